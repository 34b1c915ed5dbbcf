//! What a namespace declares about adaptive limits (`{ns}/ADAPTIVE#`,
//! `#DECLARATION`), written by the provisioner on each apply: the estimated
//! capacity of each resource per limit (tokens per minute, advisory: a
//! target for scaling, never a ceiling), and the levels whose limit opted in
//! (`adaptive: utilization`) with their `max_scale`. The aggregator senses
//! only what has an estimated capacity; the controller scales only what a
//! level opted into.

use super::law::Factor;
use crate::keys::{self, Index};
use crate::level::Level;
use crate::store::{Store, StoreError};
use crate::value::{Attr, Item};
use std::collections::BTreeMap;
use thiserror::Error;

pub const CAPACITY: &str = "capacity";
pub const LEVELS: &str = "levels";
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
    /// `max_scale` ([`super::law::max_factor`]), computed at apply.
    pub max_factor: Factor,
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
    pub levels: Vec<AdaptiveLevel>,
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
        for l in self
            .levels
            .iter()
            .filter(|l| l.limit == limit && l.applies_to(resource))
        {
            parts.push(format!(
                "{}:{}:{:?}:{}",
                l.level.kind(),
                l.level.target().unwrap_or_default(),
                l.max_scale.map(|s| s.ppm()),
                l.max_factor.ppm()
            ));
        }
        parts.join(";")
    }

    /// The opt-in of the level that decides a bucket's limits, if it opted in.
    pub fn opt_in(&self, level: &Level, limit: &str) -> Option<&AdaptiveLevel> {
        self.levels.iter().find(|l| l.governs(level, limit))
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
        let capacity = self
            .capacity
            .iter()
            .map(|(resource, limits)| {
                let limits = limits
                    .iter()
                    .map(|(limit, tpm)| (limit.clone(), Attr::n(tpm)))
                    .collect();
                (resource.clone(), Attr::M(limits))
            })
            .collect();
        let levels = self.levels.iter().map(level_attr).collect();
        [
            (Index::TABLE.pk, Attr::s(keys::pk_adaptive(namespace))),
            (Index::TABLE.sk, Attr::s(keys::SK_ADAPTIVE_DECLARATION)),
            (CAPACITY, Attr::M(capacity)),
            (LEVELS, Attr::L(levels)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    pub fn from_item(item: &Item) -> Result<Declaration, DeclarationError> {
        let malformed = |what: &str| DeclarationError::Malformed(what.to_owned());
        let Some(Attr::M(resources)) = item.get(CAPACITY) else {
            return Err(malformed(CAPACITY));
        };
        let mut capacity = BTreeMap::new();
        for (resource, limits) in resources {
            let Attr::M(limits) = limits else {
                return Err(malformed(&format!("{CAPACITY}.{resource}")));
            };
            let mut per_limit = BTreeMap::new();
            for (limit, tpm) in limits {
                let tpm = tpm
                    .as_int()
                    .ok_or_else(|| malformed(&format!("{CAPACITY}.{resource}.{limit}")))?;
                per_limit.insert(limit.clone(), tpm);
            }
            capacity.insert(resource.clone(), per_limit);
        }
        let Some(Attr::L(levels)) = item.get(LEVELS) else {
            return Err(malformed(LEVELS));
        };
        let levels = levels
            .iter()
            .enumerate()
            .map(|(i, attr)| read_level(attr).ok_or_else(|| malformed(&format!("{LEVELS}[{i}]"))))
            .collect::<Result<_, _>>()?;
        Ok(Declaration { capacity, levels })
    }
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
    Some(AdaptiveLevel {
        level,
        limit: text(LIMIT)?.to_owned(),
        max_scale,
        max_factor: Factor::from_ppm(map.get(MAX_FACTOR_PPM)?.as_int()?),
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
                },
                AdaptiveLevel {
                    level: Level::Entity {
                        entity: "key-a".into(),
                        resource: "gpt-4".into(),
                    },
                    limit: "tpm".into(),
                    max_scale: Some(Factor::from_ppm(3_000_000)),
                    max_factor: Factor::from_ppm(3_000_000),
                },
            ],
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
    }

    #[test]
    fn a_damaged_item_names_what_is_wrong() {
        let mut item = sample().to_item("ns");
        item.insert(LEVELS.into(), Attr::L(vec![Attr::s("x")]));
        let err = Declaration::from_item(&item).unwrap_err();
        assert!(err.to_string().contains("levels[0]"), "{err}");
    }
}
