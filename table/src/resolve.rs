//! Strongly consistent, memoised reads of config levels, resolved in the
//! client's order: for one provisioner fan-out, or one controller tick.

use crate::config::{Disabled, LevelConfig};
use crate::keys::{self, Index, config_key};
use crate::level::{DEFAULT_RESOURCE, Level};
use crate::store::{Query, Store, StoreError};
use crate::value::Attr;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Levels kept for one fan-out. Past this many, entity levels are
/// forgotten (and read again when needed), so memory stays bounded when a
/// fan-out crosses a namespace of many entities.
const LEVELS_KEPT: usize = 10_000;

type LevelKey = (String, String);

/// Strongly consistent, memoised reads of config levels for one fan-out.
pub struct Resolver<'a, S> {
    store: &'a S,
    namespace: &'a str,
    cache: Mutex<HashMap<LevelKey, Option<LevelConfig>>>,
    /// Levels seeded by the caller: never forgotten, never read again.
    seeded: Mutex<HashSet<LevelKey>>,
    /// Reads under way: concurrent callers of one level wait for one read.
    reading: Mutex<HashMap<LevelKey, Arc<futures::lock::Mutex<()>>>>,
}

impl<'a, S: Store> Resolver<'a, S> {
    pub fn new(store: &'a S, namespace: &'a str) -> Self {
        Resolver {
            store,
            namespace,
            cache: Mutex::new(HashMap::new()),
            seeded: Mutex::new(HashSet::new()),
            reading: Mutex::new(HashMap::new()),
        }
    }

    fn cached(&self, key: &LevelKey) -> Option<Option<LevelConfig>> {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    pub async fn level(&self, level: &Level) -> Result<Option<LevelConfig>, StoreError> {
        let key = config_key(self.namespace, level);
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        // One read per level, however many stamps ask for it at once.
        let slot = Arc::clone(
            self.reading
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(key.clone())
                .or_default(),
        );
        let _reading = slot.lock().await;
        if let Some(hit) = self.cached(&key) {
            return Ok(hit);
        }
        let item = self.store.get(&key.0, &key.1, true).await?;
        let config = item.as_ref().map(LevelConfig::decode);
        self.remember(key.clone(), config.clone());
        self.reading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        Ok(config)
    }

    fn remember(&self, key: LevelKey, config: Option<LevelConfig>) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= LEVELS_KEPT {
            let seeded = self.seeded.lock().unwrap_or_else(|p| p.into_inner());
            let entity = keys::pk_entity(self.namespace, "");
            cache.retain(|key, _| seeded.contains(key) || !key.0.starts_with(&entity));
        }
        cache.insert(key, config);
    }

    /// Records a level already read, so the fan-out does not read it again.
    pub fn seed(&self, level: &Level, config: Option<LevelConfig>) {
        let key = config_key(self.namespace, level);
        self.seeded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone());
        self.remember(key, config);
    }

    pub async fn disabled(&self, entity: &str, resource: &str) -> Result<Disabled, StoreError> {
        for level in Level::resolution(entity, resource, false) {
            if let Some(disabled) = self.level(&level).await?.and_then(|c| c.disabled) {
                return Ok(disabled);
            }
        }
        Ok(Disabled::No)
    }

    pub async fn cascade(&self, entity: &str, resource: &str) -> Result<Option<bool>, StoreError> {
        for level in Level::resolution(entity, resource, false) {
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
            Level::resolution(entity, resource, true)
        } else {
            from.to_vec()
        };
        first_with_limits(self, walk).await
    }
}

/// Where config levels are read from: a [`Resolver`] for one fan-out or
/// tick, or a cache that lives longer (the aggregator's repair).
pub trait LevelSource {
    fn level(
        &self,
        level: &Level,
    ) -> impl std::future::Future<Output = Result<Option<LevelConfig>, StoreError>> + Send;
}

impl<S: Store> LevelSource for Resolver<'_, S> {
    async fn level(&self, level: &Level) -> Result<Option<LevelConfig>, StoreError> {
        Resolver::level(self, level).await
    }
}

/// The first level of `walk` with any limit, as the client resolves a
/// bucket's limits, and its config.
pub async fn first_with_limits(
    source: &impl LevelSource,
    walk: Vec<Level>,
) -> Result<Option<(Level, LevelConfig)>, StoreError> {
    for level in walk {
        if let Some(config) = source.level(&level).await?
            && !config.limits.is_empty()
        {
            return Ok(Some((level, config)));
        }
    }
    Ok(None)
}

/// The entities with a config of their own for a resource and for
/// `_default_`, from the entity-config index (GSI3): every other bucket is
/// decided by the resource or system level, read once, instead of two reads
/// per entity. The index is eventually consistent: a config written moments
/// ago may be missed, and its buckets then stamped from the level below only
/// if they carry that level's capacity, until the next pass.
#[derive(Debug, Default, Clone)]
pub struct Configured {
    own: HashSet<String>,
    default: HashSet<String>,
}

impl Configured {
    pub async fn read<S: Store>(
        store: &S,
        namespace: &str,
        resource: &str,
    ) -> Result<Configured, StoreError> {
        let mut sets: [HashSet<String>; 2] = Default::default();
        for (set, r) in sets.iter_mut().zip([resource, DEFAULT_RESOURCE]) {
            let query = Query {
                index: &Index::GSI3,
                pk: keys::gsi3_pk_entity_config(namespace, r),
                sk_prefix: String::new(),
                consistent: false,
            };
            for item in store.query(&query).await? {
                if let Some(entity) = item.get(Index::GSI3.sk).and_then(Attr::as_s) {
                    set.insert(entity.to_owned());
                }
            }
        }
        let [own, default] = sets;
        Ok(Configured { own, default })
    }

    /// Whether `level` may hold a config: any level but an entity's that
    /// the index does not list.
    pub fn may_have(&self, level: &Level) -> bool {
        match level {
            Level::Entity { entity, resource } if resource == DEFAULT_RESOURCE => {
                self.default.contains(entity)
            }
            Level::Entity { entity, .. } => self.own.contains(entity),
            _ => true,
        }
    }
}

/// Config levels from `source`, without reading an entity level the
/// entity-config index says does not exist.
pub struct Through<'a, L> {
    pub source: &'a L,
    pub configured: &'a Configured,
}

impl<L: LevelSource + Sync> LevelSource for Through<'_, L> {
    async fn level(&self, level: &Level) -> Result<Option<LevelConfig>, StoreError> {
        if !self.configured.may_have(level) {
            return Ok(None);
        }
        self.source.level(level).await
    }
}
