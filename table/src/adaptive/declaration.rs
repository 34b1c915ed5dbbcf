//! What a namespace declares about adaptive limits (`{ns}/ADAPTIVE#`,
//! `#DECLARATION`), written by the provisioner on each apply: the estimated
//! capacity of each resource per limit (tokens per minute, advisory: a
//! target for scaling, never a ceiling) and the utilization the law aims at
//! where it is not 1, and the levels whose limit opted in (`adaptive:
//! utilization`, or `shadow`: computed and reported, never stamped) with
//! their `max_scale`. The aggregator senses only what has an estimated
//! capacity; the controller scales only what a level opted into.

use super::factor::Factor;
use crate::keys::{self, Index};
use crate::level::Level;
use crate::store::{Store, StoreError};
use crate::value::{Attr, Item};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

pub const CAPACITY: &str = "capacity";
pub const TARGET_UTILIZATION: &str = "target_utilization_ppm";
pub const LEVELS: &str = "levels";
/// The resources whose spare capacity is shared by demand (`share: demand`).
pub const SHARE_DEMAND: &str = "share_demand";
const MODE: &str = "mode";
const SHADOW: &str = "shadow";
const KIND: &str = "kind";
const TARGET: &str = "target";
const LIMIT: &str = "limit";
const MAX_SCALE_PPM: &str = "max_scale_ppm";
const MAX_FACTOR_PPM: &str = "max_factor_ppm";

/// One level's limit that opted in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AdaptiveLevel {
    pub level: Level,
    pub limit: String,
    pub max_scale: Option<Factor>,
    /// The most its buckets scale, from its declared burst over its rate and
    /// `max_scale` (`zae_adaptive::law::max_factor`), computed at apply.
    pub max_factor: Factor,
    /// `adaptive: shadow`: the factor is computed, reported and recorded,
    /// and its buckets stay at base.
    pub shadow: bool,
}

impl AdaptiveLevel {
    /// Whether this opt-in governs buckets of `resource` decided by `level`:
    /// the same level, where a system or entity-default level applies to
    /// every resource.
    pub fn governs(&self, level: &Level, limit: &str) -> bool {
        self.limit == limit && self.level == *level
    }

    /// Whether it applies to `resource` at all: system and entity-default
    /// levels apply per resource.
    pub fn applies_to(&self, resource: &str) -> bool {
        match &self.level {
            Level::System => true,
            Level::Resource(r) => r == resource,
            Level::Entity { resource: r, .. } => {
                r == resource || r == crate::level::DEFAULT_RESOURCE
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declaration {
    /// Tokens per minute, by resource and limit.
    pub capacity: BTreeMap<String, BTreeMap<String, i64>>,
    /// The utilization the law aims at, parts per million, by resource and
    /// limit; absent: 1 (the request's law).
    pub target: BTreeMap<String, BTreeMap<String, i64>>,
    pub levels: Vec<AdaptiveLevel>,
    /// Resources declared `share: demand`: spare capacity goes to the
    /// entities that want it ([`super::share`]); the others share it by
    /// base, one factor for everyone.
    pub demand: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeclarationError {
    #[error("adaptive declaration: `{0}` is missing or not of its type")]
    Malformed(String),
}

impl Declaration {
    /// The estimated capacity of `resource` for `limit`, tokens per minute.
    pub fn capacity(&self, resource: &str, limit: &str) -> Option<i64> {
        self.capacity.get(resource)?.get(limit).copied()
    }

    /// The target utilization of `resource` for `limit`: in (0, 1], 1 unless
    /// declared.
    pub fn target_utilization(&self, resource: &str, limit: &str) -> f64 {
        self.target
            .get(resource)
            .and_then(|limits| limits.get(limit))
            .map(|ppm| *ppm as f64 / super::factor::PPM as f64)
            .filter(|t| *t > 0.0 && *t <= 1.0)
            .unwrap_or(1.0)
    }

    /// Whether `resource` shares its spare capacity by demand.
    pub fn shares_by_demand(&self, resource: &str) -> bool {
        self.demand.contains(resource)
    }

    /// Whether every level that opted `limit` in on `resource` is in shadow:
    /// nothing of the target is stamped.
    pub fn shadow_only(&self, resource: &str, limit: &str) -> bool {
        self.levels
            .iter()
            .filter(|l| l.limit == limit && l.applies_to(resource))
            .all(|l| l.shadow)
    }

    pub fn is_empty(&self) -> bool {
        self.capacity.is_empty() && self.levels.is_empty()
    }

    /// Every (resource, limit) the controller scales: an estimated capacity
    /// and at least one level that opted in and applies to the resource,
    /// with the most any of them scales.
    pub fn targets(&self) -> Vec<(String, String, Factor)> {
        let mut out = Vec::new();
        for (resource, limits) in &self.capacity {
            for limit in limits.keys() {
                let max = self
                    .levels
                    .iter()
                    .filter(|l| l.limit == *limit && l.applies_to(resource))
                    .map(|l| l.max_factor)
                    .max();
                if let Some(max) = max {
                    out.push((resource.clone(), limit.clone(), max));
                }
            }
        }
        out
    }

    /// What the declaration says about one target, as text: a change of it
    /// (an opt-in added or dropped, a new `max_scale` or capacity) re-stamps.
    pub fn fingerprint(&self, resource: &str, limit: &str) -> String {
        let mut parts = vec![format!("capacity={:?}", self.capacity(resource, limit))];
        if self.shares_by_demand(resource) {
            parts.push("share=demand".to_owned());
        }
        for l in self
            .levels
            .iter()
            .filter(|l| l.limit == limit && l.applies_to(resource))
        {
            parts.push(format!(
                "{}:{}:{:?}:{}{}",
                l.level.kind(),
                l.level.target().unwrap_or_default(),
                l.max_scale.map(|s| s.ppm()),
                l.max_factor.ppm(),
                if l.shadow { ":shadow" } else { "" }
            ));
        }
        parts.join(";")
    }

    /// The opt-in of the level that decides a bucket's limits, if it opted in.
    pub fn opt_in(&self, level: &Level, limit: &str) -> Option<&AdaptiveLevel> {
        self.levels.iter().find(|l| l.governs(level, limit))
    }

    /// The opt-in that scales a bucket's limits: opted in, and not in shadow.
    pub fn scaling(&self, level: &Level, limit: &str) -> Option<&AdaptiveLevel> {
        self.opt_in(level, limit).filter(|l| !l.shadow)
    }

    /// The namespace's declaration: `None` without one, `Some(Err)` when it
    /// cannot be read back.
    pub async fn read<S: Store>(
        store: &S,
        namespace: &str,
        consistent: bool,
    ) -> Result<Option<Result<Declaration, DeclarationError>>, StoreError> {
        let pk = keys::pk_adaptive(namespace);
        let item = store
            .get(&pk, keys::SK_ADAPTIVE_DECLARATION, consistent)
            .await?;
        Ok(item.map(|item| Declaration::from_item(&item)))
    }

    pub fn to_item(&self, namespace: &str) -> Item {
        let levels = self.levels.iter().map(level_attr).collect();
        let mut item: Item = [
            (Index::TABLE.pk, Attr::s(keys::pk_adaptive(namespace))),
            (Index::TABLE.sk, Attr::s(keys::SK_ADAPTIVE_DECLARATION)),
            (CAPACITY, nested_attr(&self.capacity)),
            (LEVELS, Attr::L(levels)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if !self.target.is_empty() {
            item.insert(TARGET_UTILIZATION.to_owned(), nested_attr(&self.target));
        }
        if !self.demand.is_empty() {
            item.insert(SHARE_DEMAND.to_owned(), Attr::Ss(self.demand.clone()));
        }
        item
    }

    pub fn from_item(item: &Item) -> Result<Declaration, DeclarationError> {
        let malformed = |what: &str| DeclarationError::Malformed(what.to_owned());
        let capacity = nested(item.get(CAPACITY), CAPACITY)?;
        let target = match item.get(TARGET_UTILIZATION) {
            None => BTreeMap::new(),
            present => nested(present, TARGET_UTILIZATION)?,
        };
        let Some(Attr::L(levels)) = item.get(LEVELS) else {
            return Err(malformed(LEVELS));
        };
        let levels = levels
            .iter()
            .enumerate()
            .map(|(i, attr)| read_level(attr).ok_or_else(|| malformed(&format!("{LEVELS}[{i}]"))))
            .collect::<Result<_, _>>()?;
        let demand = match item.get(SHARE_DEMAND) {
            None => BTreeSet::new(),
            Some(Attr::Ss(resources)) => resources.clone(),
            Some(_) => return Err(malformed(SHARE_DEMAND)),
        };
        Ok(Declaration {
            capacity,
            target,
            levels,
            demand,
        })
    }
}

type Nested = BTreeMap<String, BTreeMap<String, i64>>;

/// `{resource: {limit: n}}` as a map of maps.
fn nested_attr(values: &Nested) -> Attr {
    Attr::M(
        values
            .iter()
            .map(|(resource, limits)| {
                let limits = limits
                    .iter()
                    .map(|(limit, n)| (limit.clone(), Attr::n(n)))
                    .collect();
                (resource.clone(), Attr::M(limits))
            })
            .collect(),
    )
}

/// Reads `{resource: {limit: n}}`, naming the first part that is not.
fn nested(attr: Option<&Attr>, name: &str) -> Result<Nested, DeclarationError> {
    let malformed = |what: String| DeclarationError::Malformed(what);
    let Some(Attr::M(resources)) = attr else {
        return Err(malformed(name.to_owned()));
    };
    let mut out = BTreeMap::new();
    for (resource, limits) in resources {
        let Attr::M(limits) = limits else {
            return Err(malformed(format!("{name}.{resource}")));
        };
        let mut per_limit = BTreeMap::new();
        for (limit, n) in limits {
            let n = n
                .as_int()
                .ok_or_else(|| malformed(format!("{name}.{resource}.{limit}")))?;
            per_limit.insert(limit.clone(), n);
        }
        out.insert(resource.clone(), per_limit);
    }
    Ok(out)
}

fn level_attr(level: &AdaptiveLevel) -> Attr {
    let mut map = BTreeMap::from([
        (KIND.to_owned(), Attr::s(level.level.kind())),
        (LIMIT.to_owned(), Attr::s(&level.limit)),
    ]);
    if let Some(target) = level.level.target() {
        map.insert(TARGET.to_owned(), Attr::s(target));
    }
    if let Some(scale) = level.max_scale {
        map.insert(MAX_SCALE_PPM.to_owned(), Attr::n(scale.ppm()));
    }
    map.insert(MAX_FACTOR_PPM.to_owned(), Attr::n(level.max_factor.ppm()));
    if level.shadow {
        map.insert(MODE.to_owned(), Attr::s(SHADOW));
    }
    Attr::M(map)
}

fn read_level(attr: &Attr) -> Option<AdaptiveLevel> {
    let Attr::M(map) = attr else { return None };
    let text = |key: &str| map.get(key).and_then(Attr::as_s);
    let level = Level::from_parts(text(KIND)?, text(TARGET).unwrap_or_default())?;
    let max_scale = match map.get(MAX_SCALE_PPM) {
        Some(ppm) => Some(Factor::from_ppm(ppm.as_int()?)),
        None => None,
    };
    let shadow = match text(MODE) {
        None => false,
        Some(SHADOW) => true,
        Some(_) => return None,
    };
    Some(AdaptiveLevel {
        level,
        limit: text(LIMIT)?.to_owned(),
        max_scale,
        max_factor: Factor::from_ppm(map.get(MAX_FACTOR_PPM)?.as_int()?),
        shadow,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Declaration {
        Declaration {
            capacity: BTreeMap::from([(
                "gpt-4".to_owned(),
                BTreeMap::from([("tpm".to_owned(), 100_000)]),
            )]),
            levels: vec![
                AdaptiveLevel {
                    level: Level::System,
                    limit: "tpm".into(),
                    max_scale: None,
                    max_factor: Factor::from_ppm(10_000_000),
                    shadow: false,
                },
                AdaptiveLevel {
                    level: Level::Entity {
                        entity: "key-a".into(),
                        resource: "gpt-4".into(),
                    },
                    limit: "tpm".into(),
                    max_scale: Some(Factor::from_ppm(3_000_000)),
                    max_factor: Factor::from_ppm(3_000_000),
                    shadow: true,
                },
            ],
            target: BTreeMap::from([(
                "gpt-4".to_owned(),
                BTreeMap::from([("tpm".to_owned(), 800_000)]),
            )]),
            demand: BTreeSet::from(["gpt-4".to_owned()]),
        }
    }

    #[test]
    fn round_trips_through_its_item_without_index_keys() {
        let item = sample().to_item("ns");
        assert_eq!(item["PK"], Attr::s("ns/ADAPTIVE#"));
        assert!(!item.keys().any(|k| k.starts_with("GSI")));
        assert_eq!(Declaration::from_item(&item).unwrap(), sample());
        assert_eq!(sample().capacity("gpt-4", "tpm"), Some(100_000));
        assert_eq!(sample().capacity("gpt-4", "rpm"), None);
        // The system level's 10x and key-a's 3x both apply to gpt-4.
        assert_eq!(
            sample().targets(),
            vec![("gpt-4".into(), "tpm".into(), Factor::from_ppm(10_000_000))]
        );
        assert_eq!(sample().target_utilization("gpt-4", "tpm"), 0.8);
        assert_eq!(sample().target_utilization("other", "tpm"), 1.0);
        assert!(sample().shares_by_demand("gpt-4") && !sample().shares_by_demand("other"));
        assert!(
            sample()
                .fingerprint("gpt-4", "tpm")
                .contains("share=demand")
        );
        // key-a is in shadow, the system level is not.
        assert!(!sample().shadow_only("gpt-4", "tpm"));
        let key_a = &sample().levels[1].level;
        assert!(
            sample().opt_in(key_a, "tpm").is_some() && sample().scaling(key_a, "tpm").is_none()
        );
    }

    #[test]
    fn an_item_written_before_targets_and_shadow_reads_back_with_their_defaults() {
        let mut declaration = sample();
        declaration.target.clear();
        declaration.levels[1].shadow = false;
        declaration.demand.clear();
        let item = declaration.to_item("ns");
        assert!(!item.contains_key(TARGET_UTILIZATION));
        assert!(!item.contains_key(SHARE_DEMAND));
        assert!(!format!("{item:?}").contains("shadow"));
        assert_eq!(Declaration::from_item(&item).unwrap(), declaration);
    }

    #[test]
    fn a_damaged_item_names_what_is_wrong() {
        let mut item = sample().to_item("ns");
        item.insert(LEVELS.into(), Attr::L(vec![Attr::s("x")]));
        let err = Declaration::from_item(&item).unwrap_err();
        assert!(err.to_string().contains("levels[0]"), "{err}");
    }
}
