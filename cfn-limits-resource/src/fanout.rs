//! Bucket fan-outs: a config change must reach the buckets that already
//! exist, because the client reads parameters and flags from its bucket
//! items between config-cache refreshes. Every fan-out works from the
//! table's current config (never from the manifest), only updates bucket
//! items that exist (`attribute_exists(PK)`), and finds them through an
//! index queried twice, so a bucket created during the first pass is not
//! missed.

use crate::config::{LevelConfig, LimitConfig, config_key};
use crate::expr::UpdateBuilder;
use crate::manifest::{DEFAULT_RESOURCE, Disabled, Level};
use crate::pending::Kind;
use crate::schedule;
use crate::store::{Attr, Item, Query, Returns, Store, StoreError};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use zae_table::BucketKey;
use zae_table::keys;

/// Soft and bypass stamps are deadlines: the client renews or drops them
/// from fresh config on its slow path.
pub const STAMP_TTL_MS: i64 = 60_000;
const BUCKET_SCHED_NONE: &str = "-";
const SK_META: &str = "#META";
const STALE_FIELDS: [&str; 15] = [
    "tk", "cp", "ra", "rp", "tc", "sched", "rsched", "soft", "rsa", "ws", "wa", "wtc", "gc", "tu",
    "rn",
];

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `t + 60 s × U(0.8, 1)`: staggered, so stamped buckets do not all fall
/// back to the slow path in the same instant.
pub fn deadline(t_ms: i64) -> i64 {
    t_ms + (STAMP_TTL_MS as f64 * (0.8 + 0.2 * fastrand::f64())) as i64
}

fn bucket_attr(limit: &str, field: &str) -> String {
    format!("b_{limit}_{field}")
}

/// Strongly consistent, memoised reads of config levels for one fan-out.
pub struct Resolver<'a, S> {
    store: &'a S,
    namespace: &'a str,
    cache: Mutex<HashMap<(String, String), Option<LevelConfig>>>,
}

impl<'a, S: Store> Resolver<'a, S> {
    pub fn new(store: &'a S, namespace: &'a str) -> Self {
        Resolver {
            store,
            namespace,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub async fn level(&self, level: &Level) -> Result<Option<LevelConfig>, StoreError> {
        let key = config_key(self.namespace, level);
        if let Some(hit) = self.cache.lock().expect("not poisoned").get(&key) {
            return Ok(hit.clone());
        }
        let item = self.store.get(&key.0, &key.1, true).await?;
        let config = item.as_ref().map(LevelConfig::decode);
        self.cache
            .lock()
            .expect("not poisoned")
            .insert(key, config.clone());
        Ok(config)
    }

    /// Records a level already read, so the fan-out does not read it again.
    pub fn seed(&self, level: &Level, config: Option<LevelConfig>) {
        let key = config_key(self.namespace, level);
        self.cache.lock().expect("not poisoned").insert(key, config);
    }

    /// Entity level, the entity's `_default_`, the resource, and with
    /// `system` the system level: the client's resolution order.
    fn walk(entity: &str, resource: &str, system: bool) -> Vec<Level> {
        let mut levels = vec![Level::Entity {
            entity: entity.into(),
            resource: resource.into(),
        }];
        if resource != DEFAULT_RESOURCE {
            levels.push(Level::Entity {
                entity: entity.into(),
                resource: DEFAULT_RESOURCE.into(),
            });
            levels.push(Level::Resource(resource.into()));
        }
        if system {
            levels.push(Level::System);
        }
        levels
    }

    pub async fn disabled(&self, entity: &str, resource: &str) -> Result<Disabled, StoreError> {
        for level in Self::walk(entity, resource, false) {
            if let Some(disabled) = self.level(&level).await?.and_then(|c| c.disabled) {
                return Ok(disabled);
            }
        }
        Ok(Disabled::No)
    }

    pub async fn cascade(&self, entity: &str, resource: &str) -> Result<Option<bool>, StoreError> {
        for level in Self::walk(entity, resource, false) {
            if let Some(cascade) = self.level(&level).await?.and_then(|c| c.cascade) {
                return Ok(Some(cascade));
            }
        }
        Ok(None)
    }

    /// The limits a bucket of (entity, resource) runs on, and the level
    /// that decided them: the first level with any limit.
    pub async fn limits(
        &self,
        entity: &str,
        resource: &str,
        from: &[Level],
    ) -> Result<Option<(Level, LevelConfig)>, StoreError> {
        let walk = if from.is_empty() {
            Self::walk(entity, resource, true)
        } else {
            from.to_vec()
        };
        for level in walk {
            if let Some(config) = self.level(&level).await? {
                if !config.limits.is_empty() {
                    return Ok(Some((level, config)));
                }
            }
        }
        Ok(None)
    }
}

/// Whether a bucket is one a level's fan-out must reach.
fn in_scope(level: &Level, key: &BucketKey) -> bool {
    match level {
        Level::System => true,
        Level::Resource(resource) => key.resource == *resource,
        Level::Entity { entity, resource } => {
            key.entity == *entity && (resource == DEFAULT_RESOURCE || key.resource == *resource)
        }
    }
}

/// Every bucket of the namespace, from one GSI4 query: cheaper than one
/// query per level when an apply owes many fan-outs.
pub async fn sweep(store: &impl Store, namespace: &str) -> Result<Vec<(BucketKey, Item)>, StoreError> {
    let items = store.query(&discovery(namespace, &Level::System)).await?;
    Ok(items
        .into_iter()
        .filter_map(|item| {
            let key = BucketKey::parse(item.get("PK").and_then(Attr::as_s)?).ok()?;
            Some((key, item))
        })
        .collect())
}

/// Where a fan-out looks for buckets.
fn discovery(namespace: &str, level: &Level) -> Query {
    let prefix = keys::BUCKET_PREFIX.to_owned();
    match level {
        Level::System => Query {
            index: Some("GSI4"),
            pk_attr: "GSI4PK",
            pk: namespace.to_owned(),
            sk_attr: "GSI4SK",
            sk_prefix: prefix,
            consistent: false,
        },
        Level::Resource(resource) => Query {
            index: Some("GSI2"),
            pk_attr: "GSI2PK",
            pk: keys::gsi2_pk_resource(namespace, resource),
            sk_attr: "GSI2SK",
            sk_prefix: prefix,
            consistent: false,
        },
        Level::Entity { entity, resource } => Query {
            index: Some("GSI3"),
            pk_attr: "GSI3PK",
            pk: keys::pk_entity(namespace, entity),
            sk_attr: "GSI3SK",
            sk_prefix: if resource == DEFAULT_RESOURCE {
                prefix
            } else {
                format!("{prefix}{resource}#")
            },
            consistent: false,
        },
    }
}

/// What one fan-out did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub stamped: usize,
    pub skipped: usize,
}

/// The inputs of one fan-out run beyond the level's live config.
#[derive(Debug, Default, Clone)]
pub struct Directive {
    /// For a `disabled` re-assert: the manifest's value, and skip buckets
    /// already carrying it.
    pub reassert: Option<Disabled>,
    /// For `soft`: names whose soft-ness the write changed.
    pub soft_changed: BTreeSet<String>,
    /// For `sync`: the limits the level held before this apply wrote it.
    pub previous: Option<LevelConfig>,
}

pub struct FanOuts<'a, S> {
    pub store: &'a S,
    pub namespace: &'a str,
    /// Buckets already found by a [`sweep`]; `None` queries per level.
    pub known: Option<&'a [(BucketKey, Item)]>,
}

impl<'a, S: Store> FanOuts<'a, S> {
    /// Runs one fan-out of `kind` for `level`, from its config as read now.
    pub async fn run(&self, kind: Kind, level: &Level, directive: &Directive) -> Result<Tally, StoreError> {
        let (pk, sk) = config_key(self.namespace, level);
        let live = self.store.get(&pk, &sk, true).await?;
        self.run_on(kind, level, live.as_ref(), directive).await
    }

    /// Runs one fan-out from a config item the caller has just read.
    pub async fn run_on(
        &self,
        kind: Kind,
        level: &Level,
        live: Option<&Item>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let resolver = Resolver::new(self.store, self.namespace);
        let live = live.map(LevelConfig::decode);
        resolver.seed(level, live.clone());
        match kind {
            Kind::Disabled => self.disabled(&resolver, level, live.as_ref(), directive).await,
            Kind::Cascade => self.cascade(&resolver, level).await,
            Kind::Soft => self.soft(&resolver, level, live.as_ref(), directive).await,
            Kind::Sync => self.sync(&resolver, level, live.as_ref(), directive).await,
        }
    }

    /// The buckets in the level's reach: from the sweep, or from its index,
    /// queried twice over, each PK once.
    async fn buckets(&self, level: &Level) -> Result<Vec<(BucketKey, Item)>, StoreError> {
        if let Some(known) = self.known {
            return Ok(known.iter().filter(|(key, _)| in_scope(level, key)).cloned().collect());
        }
        let query = &discovery(self.namespace, level);
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for _pass in 0..2 {
            for item in self.store.query(query).await? {
                let Some(pk) = item.get("PK").and_then(Attr::as_s) else {
                    continue;
                };
                let Ok(key) = BucketKey::parse(pk) else {
                    continue;
                };
                if seen.insert(pk.to_owned()) {
                    found.push((key, item));
                }
            }
        }
        Ok(found)
    }

    async fn write(&self, key: &BucketKey, update: UpdateBuilder, condition: Option<String>) -> Result<bool, StoreError> {
        let pk = key.pk();
        let mut update = update;
        let exists = update.name("PK");
        let condition = match condition {
            Some(extra) => format!("attribute_exists({exists}) AND ({extra})"),
            None => format!("attribute_exists({exists})"),
        };
        let update = update.build(&pk, keys::SK_STATE, Some(condition));
        match self.store.update(&update, Returns::Nothing).await {
            Ok(_) => Ok(true),
            // The bucket went away (TTL, reset) or never existed: nothing to stamp.
            Err(StoreError::ConditionFailed { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn disabled_stamp(update: &mut UpdateBuilder, disabled: Disabled, t_ms: i64) {
        match disabled {
            Disabled::Yes => {
                update.set("disabled", Attr::Bool(true)).remove("bypass");
            }
            Disabled::Bypass => {
                update.set("bypass", Attr::n(deadline(t_ms))).remove("disabled");
            }
            Disabled::No => {
                update.remove("disabled").remove("bypass");
            }
        }
    }

    async fn disabled(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
        live: Option<&LevelConfig>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let mut tally = Tally::default();
        let started = now_ms();
        match level {
            Level::System => {}
            Level::Resource(resource) => {
                let wanted = directive
                    .reassert
                    .or_else(|| live.and_then(|c| c.disabled))
                    .unwrap_or(Disabled::No);
                for (key, item) in self.buckets(level).await? {
                    if directive.reassert.is_some() && carries(&item, wanted) {
                        tally.skipped += 1;
                        continue;
                    }
                    // An entity-level `disabled` is a carve-out the resource does not override.
                    let t = now_ms();
                    if resolver.disabled(&key.entity, resource).await? != wanted {
                        tally.skipped += 1;
                        continue;
                    }
                    let mut update = UpdateBuilder::new();
                    Self::disabled_stamp(&mut update, wanted, t);
                    tally.stamped += usize::from(self.write(&key, update, None).await?);
                }
            }
            Level::Entity { entity, resource } => {
                for (key, _) in self.buckets(level).await? {
                    if key.entity != *entity {
                        continue;
                    }
                    let bucket_resource = if resource == DEFAULT_RESOURCE {
                        key.resource.as_str()
                    } else {
                        resource.as_str()
                    };
                    let wanted = resolver.disabled(entity, bucket_resource).await?;
                    // A repair pass only writes what is missing; GSI3 projects
                    // keys only, so the bucket is read to know.
                    if directive.reassert.is_some() {
                        let current = self.store.get(&key.pk(), keys::SK_STATE, true).await?;
                        if current.is_none_or(|item| carries(&item, wanted)) {
                            tally.skipped += 1;
                            continue;
                        }
                    }
                    let mut update = UpdateBuilder::new();
                    Self::disabled_stamp(&mut update, wanted, started);
                    tally.stamped += usize::from(self.write(&key, update, None).await?);
                }
            }
        }
        Ok(tally)
    }

    async fn cascade(&self, resolver: &Resolver<'_, S>, level: &Level) -> Result<Tally, StoreError> {
        let mut tally = Tally::default();
        if matches!(level, Level::System) {
            return Ok(tally);
        }
        let mut metas: HashMap<String, Option<Item>> = HashMap::new();
        for (key, _) in self.buckets(level).await? {
            if let Level::Entity { entity, .. } = level {
                if key.entity != *entity {
                    continue;
                }
            }
            let meta = match metas.get(&key.entity) {
                Some(meta) => meta.clone(),
                None => {
                    let meta = self
                        .store
                        .get(&keys::pk_entity(self.namespace, &key.entity), SK_META, true)
                        .await?;
                    metas.insert(key.entity.clone(), meta.clone());
                    meta
                }
            };
            let Some(meta) = meta else {
                tally.skipped += 1;
                continue;
            };
            let parent = meta.get("parent_id").and_then(Attr::as_s).filter(|p| !p.is_empty());
            let generation = meta.get("pgen").and_then(Attr::as_int).unwrap_or(0);
            let incarnation = meta
                .get("pinc")
                .or_else(|| meta.get("created_at"))
                .map(|a| match a {
                    Attr::S(s) => s.clone(),
                    Attr::N(n) => n.clone(),
                    _ => "-".into(),
                })
                .unwrap_or_else(|| "-".into());
            let policy = match resolver.cascade(&key.entity, &key.resource).await? {
                Some(policy) => policy,
                None => matches!(meta.get("cascade"), Some(Attr::Bool(true))),
            };
            let mut update = UpdateBuilder::new();
            update.set("cascade", Attr::Bool(parent.is_some() && policy));
            match parent {
                Some(parent) => update.set("parent_id", Attr::s(parent)),
                None => update.remove("parent_id"),
            };
            update.set("pgen", Attr::n(generation));
            update.set("pinc", Attr::s(&incarnation));
            // A bucket stamped from a newer generation of the same entity
            // incarnation keeps its stamp (the client moved the parent since).
            let pinc = update.name("pinc");
            let pgen = update.name("pgen");
            let pi = update.value(Attr::s(&incarnation));
            let pg = update.value(Attr::n(generation));
            let pin = format!(
                "attribute_not_exists({pinc}) OR {pinc} <> {pi} OR attribute_not_exists({pgen}) OR {pgen} <= {pg}"
            );
            tally.stamped += usize::from(self.write(&key, update, Some(pin)).await?);
        }
        Ok(tally)
    }

    async fn soft(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
        live: Option<&LevelConfig>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let mut tally = Tally::default();
        if matches!(level, Level::Entity { .. }) {
            return Ok(tally);
        }
        let mut names: BTreeSet<String> = directive.soft_changed.clone();
        if let Some(live) = live {
            names.extend(live.limits.iter().map(|l| l.name.clone()));
        }
        for (key, _) in self.buckets(level).await? {
            let t = now_ms();
            let resolved = resolver.limits(&key.entity, &key.resource, &[]).await?;
            let soft: BTreeSet<String> = match &resolved {
                // Entity levels carry soft-ness through their own param sync.
                Some((Level::Entity { .. }, _)) => {
                    tally.skipped += 1;
                    continue;
                }
                Some((Level::Resource(_), _)) if matches!(level, Level::System) => {
                    tally.skipped += 1;
                    continue;
                }
                Some((_, config)) => config.soft_names().into_iter().collect(),
                None => BTreeSet::new(),
            };
            let mut targets = names.clone();
            if let Some((_, config)) = &resolved {
                targets.extend(config.limits.iter().map(|l| l.name.clone()));
            }
            if targets.is_empty() {
                continue;
            }
            let mut update = UpdateBuilder::new();
            for name in &targets {
                if soft.contains(name) {
                    update.set(&bucket_attr(name, "soft"), Attr::n(deadline(t)));
                } else {
                    update.remove(&bucket_attr(name, "soft"));
                }
            }
            tally.stamped += usize::from(self.write(&key, update, None).await?);
        }
        Ok(tally)
    }

    async fn sync(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
        live: Option<&LevelConfig>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let mut tally = Tally::default();
        let Level::Entity { entity, resource } = level else {
            return Ok(tally);
        };
        let declared: Vec<LimitConfig> = live.map(|c| c.limits.clone()).unwrap_or_default();
        let previous: BTreeSet<String> = directive
            .previous
            .iter()
            .flat_map(|c| c.limits.iter().map(|l| l.name.clone()))
            .collect();
        let declared_names: BTreeSet<String> = declared.iter().map(|l| l.name.clone()).collect();
        for (key, _) in self.buckets(level).await? {
            if key.entity != *entity {
                continue;
            }
            let t = now_ms();
            // What this bucket must run on now, and whether an entity level decided it.
            let plan = if resource == DEFAULT_RESOURCE {
                resolver.limits(entity, &key.resource, &[]).await?
            } else if declared.is_empty() {
                let fallback = Resolver::<S>::walk(entity, resource, true)
                    .into_iter()
                    .skip(1)
                    .collect::<Vec<_>>();
                resolver.limits(entity, resource, &fallback).await?
            } else {
                Some((level.clone(), live.cloned().unwrap_or_default()))
            };
            // Nothing resolves: the bucket keeps what it has (the client does the same).
            let Some((decided, config)) = plan else {
                tally.skipped += 1;
                continue;
            };
            let entity_decided = matches!(decided, Level::Entity { .. });
            let resolved: BTreeSet<String> = config.limits.iter().map(|l| l.name.clone()).collect();
            let stale: BTreeSet<String> = previous
                .union(&declared_names)
                .filter(|name| !resolved.contains(*name))
                .cloned()
                .collect();
            let update = param_update(&config, entity_decided, &stale, t);
            tally.stamped += usize::from(self.write(&key, update, None).await?);
        }
        Ok(tally)
    }
}

/// Whether a bucket already carries the `disabled` stamp wanted.
fn carries(item: &Item, wanted: Disabled) -> bool {
    let disabled = matches!(item.get("disabled"), Some(Attr::Bool(true)));
    let bypass = item.contains_key("bypass");
    match wanted {
        Disabled::Yes => disabled && !bypass,
        Disabled::Bypass => bypass && !disabled,
        Disabled::No => !disabled && !bypass,
    }
}

/// The bucket's item-level schedule default for one tuple, and the
/// per-limit overrides: the client's own encoding of schedules on buckets.
fn schedule_parts(
    limits: &[LimitConfig],
    pick: fn(&LimitConfig) -> Option<&String>,
) -> Option<(String, Vec<(String, Option<String>)>)> {
    let default = limits.iter().find_map(pick)?.clone();
    let overrides = limits
        .iter()
        .map(|l| {
            let compact = pick(l).cloned().unwrap_or_else(|| BUCKET_SCHED_NONE.into());
            (l.name.clone(), (compact != default).then_some(compact))
        })
        .collect();
    Some((default, overrides))
}

/// One bucket's parameter update: millitokens and milliseconds, soft
/// deadlines, schedules, TTL, and stale limits stripped.
pub fn param_update(
    config: &LevelConfig,
    entity_decided: bool,
    stale: &BTreeSet<String>,
    t_ms: i64,
) -> UpdateBuilder {
    let mut update = UpdateBuilder::new();
    for limit in &config.limits {
        let attr = |field: &str| bucket_attr(&limit.name, field);
        update.set(&attr("cp"), Attr::n(limit.capacity * 1000));
        update.set(&attr("ra"), Attr::n(limit.refill_amount * 1000));
        update.set(&attr("rp"), Attr::n(limit.refill_period * 1000));
        match limit.reset_after_seconds {
            Some(seconds) => update.set(&attr("rsa"), Attr::n(seconds)),
            None => update.remove(&attr("rsa")),
        };
        if limit.soft {
            update.set(&attr("soft"), Attr::n(deadline(t_ms)));
        } else {
            update.remove(&attr("soft"));
        }
    }
    let scheduled = config.limits.iter().any(|l| l.sched.is_some() || l.rsched.is_some());
    match (&config.sched_tz, scheduled) {
        (Some(tz), true) => update.set("sched_tz", Attr::s(tz)),
        (None, true) => update.set("sched_tz", Attr::s("UTC")),
        _ => update.remove("sched_tz"),
    };
    for (field, pick) in [
        ("sched", (|l: &LimitConfig| l.sched.as_ref()) as fn(&LimitConfig) -> Option<&String>),
        ("rsched", |l: &LimitConfig| l.rsched.as_ref()),
    ] {
        match schedule_parts(&config.limits, pick) {
            Some((default, overrides)) => {
                update.set(field, Attr::s(default));
                for (name, compact) in overrides {
                    match compact {
                        Some(compact) => update.set(&bucket_attr(&name, field), Attr::s(compact)),
                        None => update.remove(&bucket_attr(&name, field)),
                    };
                }
            }
            None => {
                update.remove(field);
                for limit in &config.limits {
                    update.remove(&bucket_attr(&limit.name, field));
                }
            }
        }
    }
    // Forces the client's one materialising pass for the new parameters.
    update.set("vu", Attr::n(0));
    // Entity-configured buckets persist; buckets on fallback limits expire
    // after seven recovery horizons, which is how later default changes reach them.
    if entity_decided {
        update.remove("ttl");
    } else if let Some(horizon) = recovery_seconds(&config.limits) {
        update.set("ttl", Attr::n(t_ms / 1000 + (horizon * 7.0) as i64));
    }
    for name in stale {
        for field in STALE_FIELDS {
            update.remove(&bucket_attr(name, field));
        }
    }
    update
}

/// The slowest recovery among the limits: time to refill from empty for a
/// drip (over the base and every schedule window), the reset cycle for a
/// calendar quota, the window for a duration quota.
pub fn recovery_seconds(limits: &[LimitConfig]) -> Option<f64> {
    limits
        .iter()
        .filter_map(|limit| {
            if let Some(seconds) = limit.reset_after_seconds {
                return Some(seconds as f64);
            }
            if let Some(rsched) = &limit.rsched {
                let entries = schedule::decode_compact(rsched)?;
                return entries
                    .iter()
                    .map(schedule::CompactEntry::cycle_seconds)
                    .min()
                    .map(|s| s as f64);
            }
            let (cp, ra, rp) = (limit.capacity * 1000, limit.refill_amount * 1000, limit.refill_period * 1000);
            let fill = |cp: i64, ra: i64, rp: i64| (ra > 0).then(|| cp as f64 / ra as f64 * rp as f64 / 1000.0);
            let mut worst = fill(cp, ra, rp)?;
            if let Some(sched) = &limit.sched {
                for entry in schedule::decode_compact(sched).unwrap_or_default() {
                    let (c, a, p) = entry.params(cp, ra, rp);
                    worst = worst.max(fill(c, a, p).unwrap_or(worst));
                }
            }
            Some(worst)
        })
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(name: &str, cp: i64, ra: i64) -> LimitConfig {
        LimitConfig {
            name: name.into(),
            capacity: cp,
            refill_amount: ra,
            refill_period: 60,
            sched: None,
            rsched: None,
            reset_after_seconds: None,
            soft: false,
        }
    }

    #[test]
    fn recovery_is_the_slowest_limit_and_window() {
        let mut night = limit("rpm", 60, 60);
        night.sched = Some("1h0-6a1".into());
        let mut daily = limit("day", 100, 0);
        daily.rsched = Some("1m0h0".into());
        assert_eq!(recovery_seconds(&[limit("rpm", 60, 60)]), Some(60.0));
        assert_eq!(recovery_seconds(&[night]), Some(3600.0));
        assert_eq!(recovery_seconds(&[daily.clone()]), Some(86_400.0));
        let mut session = limit("s", 5, 0);
        session.reset_after_seconds = Some(300);
        assert_eq!(recovery_seconds(&[session, daily]), Some(86_400.0));
    }

    #[test]
    fn a_param_update_scales_units_and_strips_stale_limits() {
        let mut soft = limit("tpm", 50_000, 50_000);
        soft.soft = true;
        let config = LevelConfig {
            limits: vec![soft, limit("rpm", 500, 500)],
            ..LevelConfig::default()
        };
        let stale = BTreeSet::from(["old".to_owned()]);
        let update = param_update(&config, true, &stale, 1_000_000).build("pk", "#STATE", None);
        let value_of = |attr: &str| {
            let alias = update.names.iter().find(|(_, a)| *a == attr).map(|(k, _)| k.clone()).unwrap();
            let at = update.expression.find(&format!("{alias} = ")).unwrap();
            let placeholder = update.expression[at + alias.len() + 3..].split([',', ' ']).next().unwrap().to_owned();
            update.values[&placeholder].clone()
        };
        assert_eq!(value_of("b_tpm_cp"), Attr::n(50_000_000));
        assert_eq!(value_of("b_rpm_rp"), Attr::n(60_000));
        let Attr::N(stamp) = value_of("b_tpm_soft") else { panic!() };
        let stamp: i64 = stamp.parse().unwrap();
        assert!((1_048_000..=1_060_000).contains(&stamp));
        assert_eq!(value_of("vu"), Attr::n(0));
        let removed = update.expression.split(" REMOVE ").nth(1).unwrap();
        for attr in ["b_rpm_soft", "ttl", "b_old_tk", "b_old_rn", "sched", "sched_tz"] {
            let alias = update.names.iter().find(|(_, a)| *a == attr).map(|(k, _)| k.clone()).unwrap();
            assert!(removed.split(", ").any(|r| r == alias), "{attr} removed");
        }
    }
}
