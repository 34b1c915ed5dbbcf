//! The aggregator's repair of adaptive stamps: a managed bucket seen on the
//! stream whose `ra` is not what its target asks for (a new bucket or shard
//! created at base, an admin `set_limits` sync) is stamped at once, from
//! cached reads of the targets and config levels (at most a minute old).
//! When the controller has not ticked for five minutes, the buckets seen go
//! back to base instead: a stamp must not outlive its controller for long.
//! A repair's own record shows the stamp in place and writes nothing.

use super::super::Aggregator;
use super::lock;
use crate::plan::BatchPlan;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zae_table::adaptive::Factor;
use zae_table::adaptive::stamp::{Stamp, stamp};
use zae_table::adaptive::target::{Target, Tick};
use zae_table::bucket::{field, split_bucket_attr};
use zae_table::config::LevelConfig;
use zae_table::keys::{BucketKey, Index, SK_STATE, config_key};
use zae_table::resolve::{LevelSource, first_with_limits};
use zae_table::store::{Returns, Store, StoreError};
use zae_table::{Attr, Item, Level, StreamRecord};

/// How long cached targets and config levels are used.
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Config levels kept; past this the cache starts over.
const LEVELS_KEPT: usize = 10_000;
/// A controller silent this long is stopped: buckets seen go back to base.
pub const STOPPED_AFTER_MS: i64 = 5 * 60_000;

type Targets = (Instant, Arc<Vec<Target>>, i64);
type Levels = HashMap<(String, String), (Instant, Option<LevelConfig>)>;

/// What the repair keeps between batches.
#[derive(Default)]
pub struct RepairCache {
    targets: Mutex<HashMap<String, Targets>>,
    levels: Mutex<Levels>,
}

impl<S: Store> Aggregator<S> {
    /// Repairs the stamps of the batch's buckets; counted, never a failure.
    pub(in crate::write) async fn repair<R: AsRef<str>>(
        &self,
        records: &[R],
        plan: &BatchPlan,
        now_ms: i64,
    ) -> (usize, usize) {
        let (mut repaired, mut failed) = (0, 0);
        for bucket in &plan.buckets {
            let Some(text) = records.get(bucket.last_record) else {
                continue;
            };
            match self.repair_bucket(text.as_ref(), &bucket.pk, now_ms).await {
                Ok(n) => repaired += n,
                Err(e) => {
                    tracing::warn!(pk = %bucket.pk, error = %e, "adaptive repair failed");
                    failed += 1;
                }
            }
        }
        (repaired, failed)
    }

    async fn repair_bucket(&self, text: &str, pk: &str, now_ms: i64) -> Result<usize, StoreError> {
        let Ok(key) = BucketKey::parse(pk) else {
            return Ok(0);
        };
        let Some(declaration) = self.declaration(&key.namespace, None).await? else {
            return Ok(0);
        };
        let limits: Vec<String> = declaration
            .targets()
            .into_iter()
            .filter(|(r, _, _)| *r == key.resource)
            .map(|(_, limit, _)| limit)
            .collect();
        if limits.is_empty() {
            return Ok(0);
        }
        let Some(image) = image_item(text, pk) else {
            return Ok(0);
        };
        let (stored, ticked_at) = self.targets(&key.namespace).await?;
        let stopped = now_ms.saturating_sub(ticked_at) > STOPPED_AFTER_MS;
        let Some((level, config)) = self.governing(&key).await? else {
            return Ok(0);
        };
        let mut repaired = 0;
        for limit in limits {
            let Some(base) = config.limits.iter().find(|l| l.name == limit) else {
                continue;
            };
            let opt_in = declaration.scaling(&level, &limit);
            let factor = match stored
                .iter()
                .find(|t| t.resource == key.resource && t.limit == limit)
            {
                Some(t) if opt_in.is_some() && !stopped => t.factor,
                _ => Factor::ONE,
            };
            let max_scale = opt_in.and_then(|o| o.max_scale);
            if let Stamp::Write { update, .. } = stamp(&image, base, factor, max_scale) {
                match self.store.update(&update, Returns::Nothing).await {
                    Ok(_) => repaired += 1,
                    // Written since this image: its own record comes next.
                    Err(StoreError::ConditionFailed { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(repaired)
    }

    /// A namespace's targets and its controller's last tick, at most a
    /// minute old.
    async fn targets(&self, namespace: &str) -> Result<(Arc<Vec<Target>>, i64), StoreError> {
        let hit = lock(&self.repair.targets).get(namespace).cloned();
        if let Some((at, targets, ticked)) = hit
            && at.elapsed() < CACHE_TTL
        {
            return Ok((targets, ticked));
        }
        let targets = Arc::new(Target::read_all(&self.store, namespace).await?);
        let ticked = Tick::read(&self.store, namespace, false)
            .await?
            .ticked_at_ms;
        lock(&self.repair.targets).insert(
            namespace.to_owned(),
            (Instant::now(), Arc::clone(&targets), ticked),
        );
        Ok((targets, ticked))
    }

    /// The level that decides the bucket's limits and its config, in the
    /// client's order, from cached reads.
    async fn governing(&self, key: &BucketKey) -> Result<Option<(Level, LevelConfig)>, StoreError> {
        let cached = CachedLevels {
            aggregator: self,
            namespace: &key.namespace,
        };
        first_with_limits(&cached, Level::resolution(&key.entity, &key.resource, true)).await
    }
}

/// A namespace's config levels through the repair's cache (at most a
/// minute old, kept across batches).
struct CachedLevels<'a, S> {
    aggregator: &'a Aggregator<S>,
    namespace: &'a str,
}

impl<S: Store> LevelSource for CachedLevels<'_, S> {
    async fn level(&self, level: &Level) -> Result<Option<LevelConfig>, StoreError> {
        let key = config_key(self.namespace, level);
        let cache = &self.aggregator.repair.levels;
        if let Some((at, config)) = lock(cache).get(&key).cloned()
            && at.elapsed() < CACHE_TTL
        {
            return Ok(config);
        }
        let config = self
            .aggregator
            .store
            .get(&key.0, &key.1, false)
            .await?
            .map(|item| LevelConfig::decode(&item));
        let mut levels = lock(cache);
        if levels.len() >= LEVELS_KEPT {
            levels.clear();
        }
        levels.insert(key, (Instant::now(), config.clone()));
        Ok(config)
    }
}

/// The keys and every limit's `cp` and `ra` of a record's new image, as an item.
fn image_item(text: &str, pk: &str) -> Option<Item> {
    let record = StreamRecord::parse(text).ok()?;
    let image = record.new_image()?;
    let mut item = Item::from([
        (Index::TABLE.pk.to_owned(), Attr::s(pk)),
        (Index::TABLE.sk.to_owned(), Attr::s(SK_STATE)),
    ]);
    for (name, value) in image.entries() {
        let Some((_, f)) = split_bucket_attr(name) else {
            continue;
        };
        if f == field::CAPACITY || f == field::REFILL_AMOUNT {
            item.insert(name.to_owned(), Attr::n(value.int(name).ok()?));
        }
    }
    Some(item)
}
