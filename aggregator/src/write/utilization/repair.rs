//! The aggregator's repair of adaptive stamps: a managed bucket seen on the
//! stream whose `ra` is not what its target asks for (a new bucket or shard
//! created at base, an admin `set_limits` sync, a stamp whose config moved)
//! is stamped at once. When the controller has not ticked for five minutes,
//! the table or the bucket's target (a namespace that left the registry, or
//! whose ticks keep failing, while others tick), the buckets seen go back to
//! base instead: a stamp must not outlive its controller for long.
//!
//! It reads targets, config levels and the entity-config index through
//! caches up to a minute old, so it never writes from what it read alone: a
//! repair is one transaction that checks the target is still at the
//! generation the repair read, and its stamp is refused over a newer one
//! (the bucket's record). A target that moved on is read again. Levels in
//! shadow are repaired to base. A repair's own record shows the stamp in
//! place and writes nothing.

use super::super::Aggregator;
use super::lock;
use crate::plan::BatchPlan;
use crate::write::cache::Bounded;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zae_adaptive::repair::{self as decide, Read};
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::stamp::{Record, Stamp, stamp};
use zae_table::adaptive::target::{Target, generation_is};
use zae_table::adaptive::tick::Tick;
use zae_table::bucket::{field, split_bucket_attr};
use zae_table::config::LevelConfig;
use zae_table::keys::{BucketKey, Index, SK_STATE, config_key};
use zae_table::resolve::{Configured, LevelSource, Through, first_with_limits};
use zae_table::store::{Condition, Store, StoreError, TxWrite};
use zae_table::{Attr, Item, Level, StreamRecord};

/// How long cached targets, levels and index reads are used.
const CACHE_TTL: Duration = Duration::from_secs(60);
/// Config levels kept: the levels of entities with configs of their own (an
/// entity without one costs no entry), the resources and the systems. Past
/// half of it, the older half is dropped whole.
const LEVELS_KEPT: usize = 50_000;
/// Namespaces whose targets are kept (a client may write under any prefix).
pub const NAMESPACES_KEPT: usize = 10_000;
/// A controller silent this long is stopped: buckets seen go back to base.
pub use zae_adaptive::repair::STOPPED_AFTER_MS;

type Timed<T> = (Instant, T);
/// A namespace and a resource, or a config item's key.
type Pair = (String, String);

/// What the repair keeps between batches.
#[derive(Default)]
pub struct RepairCache {
    targets: Mutex<Bounded<String, Timed<Arc<Vec<Target>>>, NAMESPACES_KEPT>>,
    /// Entities raised by a demand share, by namespace.
    allocations: Mutex<Bounded<String, Timed<Arc<Vec<Allocated>>>, NAMESPACES_KEPT>>,
    ticked: Mutex<Option<Timed<i64>>>,
    configured: Mutex<Bounded<Pair, Timed<Arc<Configured>>, LEVELS_KEPT>>,
    levels: Mutex<Bounded<Pair, Timed<Option<LevelConfig>>, LEVELS_KEPT>>,
}

fn fresh<T: Clone>(hit: Option<&Timed<T>>) -> Option<T> {
    hit.filter(|(at, _)| at.elapsed() < CACHE_TTL)
        .map(|(_, v)| v.clone())
}

/// `key`'s entry of `cache` while fresh, else what `read` gives, kept.
/// `read` is lazy: nothing is read on a hit.
async fn through<K: std::hash::Hash + Eq, T, const N: usize>(
    cache: &Mutex<Bounded<K, Timed<Arc<T>>, N>>,
    key: K,
    read: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<Arc<T>, StoreError> {
    if let Some(hit) = fresh(lock(cache).get(&key).as_ref()) {
        return Ok(hit);
    }
    let value = Arc::new(read.await?);
    lock(cache).insert(key, (Instant::now(), Arc::clone(&value)));
    Ok(value)
}

/// What the repair did with a batch's buckets, read after it ends or is
/// stopped at the deadline: the buckets it never finished are counted.
#[derive(Debug, Default)]
pub(in crate::write) struct Repairs {
    /// Buckets it finished with, whatever the outcome.
    pub done: usize,
    pub repaired: usize,
    pub failed: usize,
}

impl<S: Store> Aggregator<S> {
    /// Repairs the stamps of the batch's buckets into `repairs`; counted,
    /// never a failure. At the deadline it stops: the buckets left are
    /// repaired when the stream shows them again.
    pub(in crate::write) async fn repair<R: AsRef<str>>(
        &self,
        records: &[R],
        plan: &BatchPlan,
        now_ms: i64,
        deadline: Option<Instant>,
        repairs: &mut Repairs,
    ) {
        for bucket in &plan.buckets {
            if crate::write::retry::past(deadline) {
                return;
            }
            let Some(text) = records.get(bucket.last_record) else {
                repairs.done += 1;
                continue;
            };
            match self
                .repair_bucket(text.as_ref(), &bucket.pk, now_ms, deadline)
                .await
            {
                Ok(n) => repairs.repaired += n,
                Err(e) => {
                    tracing::warn!(pk = %bucket.pk, error = %e, "adaptive repair failed");
                    repairs.failed += 1;
                }
            }
            repairs.done += 1;
        }
    }

    /// Whether a bucket the repair did not reach may have needed one: its
    /// namespace's declaration, as the sensor last cached it, scales its
    /// resource, or is not cached (counted: over, never under).
    pub(in crate::write) fn may_need_repair(&self, pk: &str) -> bool {
        let Ok(key) = BucketKey::parse(pk) else {
            return false;
        };
        match lock(&self.declarations).get(&key.namespace) {
            Some((_, None)) => false,
            Some((_, Some(d))) => d.targets().iter().any(|(r, _, _)| *r == key.resource),
            None => true,
        }
    }

    /// Repairs one bucket's stamps from its record's new image: the stamp
    /// each of its resource's targets asks for, written where it differs.
    async fn repair_bucket(
        &self,
        text: &str,
        pk: &str,
        now_ms: i64,
        deadline: Option<Instant>,
    ) -> Result<usize, StoreError> {
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
        let Some(image) = image_item(text, pk, &limits) else {
            return Ok(0);
        };
        let ticked_ms = self.ticked().await?;
        let Some((level, config)) = self.governing(&key).await? else {
            return Ok(0);
        };
        let targets = self.targets(&key.namespace).await?;
        let demand = declaration.shares_by_demand(&key.resource);
        let allocations = match demand {
            true => self.allocations(&key.namespace).await?,
            false => Arc::default(),
        };
        let bucket = Bucket {
            key: &key,
            image: &image,
            level: &level,
        };
        let mut repaired = 0;
        for limit in limits {
            let Some(base) = config.limits.iter().find(|l| l.name == limit) else {
                continue;
            };
            let read = Read {
                base,
                target: targets
                    .iter()
                    .find(|t| t.resource == key.resource && t.limit == limit),
                allocated: allocations.iter().find(|a| {
                    a.entity == key.entity && a.resource == key.resource && a.limit == limit
                }),
                scaling: declaration.scaling(&level, &limit),
                demand,
            };
            let stopped = decide::stopped(ticked_ms, read.target, now_ms);
            repaired += self
                .repair_limit(&bucket, &limit, read, stopped, deadline)
                .await?;
        }
        Ok(repaired)
    }

    /// Stamps one limit of a bucket as `read` asks, in one transaction
    /// that checks what was read is still so; `1` when it wrote.
    async fn repair_limit(
        &self,
        bucket: &Bucket<'_>,
        limit: &str,
        read: Read<'_>,
        stopped: bool,
        deadline: Option<Instant>,
    ) -> Result<usize, StoreError> {
        let key = bucket.key;
        let wanted = decide::wanted(bucket.image, limit, read, stopped);
        let Stamp::Write { update, .. } = stamp(bucket.image, wanted) else {
            return Ok(0);
        };
        let (tpk, tsk) = Target::key(&key.namespace, &key.resource, limit);
        let mut writes = vec![unchanged(tpk, tsk, read.target.map(|t| t.generation))];
        if read.demand {
            // A raise withdrawn since is never stamped on a shard, nor a
            // new one missed.
            let (apk, ask) = Allocated::key(&key.namespace, &key.resource, limit, &key.entity);
            writes.push(unchanged(apk, ask, read.allocated.map(|a| a.generation)));
        }
        // The level as cached: a config moved meanwhile (the client's
        // `set_system_defaults`) is read again, never stamped from.
        let (pk, sk) = config_key(&key.namespace, bucket.level);
        let condition = read.base.still_configured();
        writes.push(TxWrite::Check { pk, sk, condition });
        writes.push(TxWrite::Update(update));
        // A conflict with another writer on the target or the bucket,
        // or a throttle: tried again under the batch's retry policy.
        match self
            .retrying(deadline, || self.store.transact(&writes))
            .await
        {
            Ok(()) => return Ok(1),
            // The target moved on since it was cached: read it again.
            Err(StoreError::ConditionFailed { .. }) => {
                lock(&self.repair.targets).remove(&key.namespace);
                lock(&self.repair.allocations).remove(&key.namespace);
            }
            // The allocation moved on, or the bucket was written since
            // this image (its own record comes next).
            Err(StoreError::Cancelled { .. }) => {
                lock(&self.repair.allocations).remove(&key.namespace);
                lock(&self.repair.levels).remove(&config_key(&key.namespace, bucket.level));
            }
            Err(e) => return Err(e),
        }
        Ok(0)
    }

    /// A namespace's targets, at most a minute old.
    async fn targets(&self, namespace: &str) -> Result<Arc<Vec<Target>>, StoreError> {
        let read = Target::read_all(&self.store, namespace);
        through(&self.repair.targets, namespace.to_owned(), read).await
    }

    /// A namespace's raised entities, at most a minute old.
    pub(super) async fn allocations(
        &self,
        namespace: &str,
    ) -> Result<Arc<Vec<Allocated>>, StoreError> {
        let read = Allocated::read(&self.store, namespace, "", "");
        through(&self.repair.allocations, namespace.to_owned(), read).await
    }

    /// Drops a namespace's cached allocations: the next read is fresh.
    pub(super) fn forget_allocations(&self, namespace: &str) {
        lock(&self.repair.allocations).remove(namespace);
    }

    /// When the controller last ticked, at most a minute old.
    async fn ticked(&self) -> Result<i64, StoreError> {
        if let Some(at) = fresh(lock(&self.repair.ticked).as_ref()) {
            return Ok(at);
        }
        let at = Tick::read(&self.store, false).await?.ticked_at_ms;
        *lock(&self.repair.ticked) = Some((Instant::now(), at));
        Ok(at)
    }

    /// The level that decides the bucket's limits and its config, in the
    /// client's order, as the controller's pass resolves it: entity levels
    /// only for entities the entity-config index lists.
    async fn governing(&self, key: &BucketKey) -> Result<Option<(Level, LevelConfig)>, StoreError> {
        let index = (key.namespace.clone(), key.resource.clone());
        let read = Configured::read(&self.store, &key.namespace, &key.resource);
        let configured = through(&self.repair.configured, index, read).await?;
        let cached = CachedLevels {
            aggregator: self,
            namespace: &key.namespace,
        };
        let levels = Through {
            source: &cached,
            configured: &configured,
        };
        first_with_limits(&levels, Level::resolution(&key.entity, &key.resource, true)).await
    }
}

/// The bucket a repair is for: its key, its record's new image as an
/// item, and the level governing it.
struct Bucket<'a> {
    key: &'a BucketKey,
    image: &'a Item,
    level: &'a Level,
}

/// The item (a target, an allocation) is still at the generation read, or
/// still absent.
fn unchanged(pk: String, sk: String, generation: Option<i64>) -> TxWrite {
    let condition = match generation {
        Some(g) => generation_is(g),
        None => Condition::plain(&format!("attribute_not_exists({})", Index::TABLE.pk)),
    };
    TxWrite::Check { pk, sk, condition }
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
        if let Some(config) = fresh(lock(cache).get(&key).as_ref()) {
            return Ok(config);
        }
        let config = self
            .aggregator
            .store
            .get(&key.0, &key.1, false)
            .await?
            .map(|item| LevelConfig::decode(&item));
        lock(cache).insert(key, (Instant::now(), config.clone()));
        Ok(config)
    }
}

/// The keys, every limit's `cp`, `ra` and `rp`, and the stamp records of `limits`
/// of a record's new image, as an item.
fn image_item(text: &str, pk: &str, limits: &[String]) -> Option<Item> {
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
        if [field::CAPACITY, field::REFILL_AMOUNT, field::REFILL_PERIOD].contains(&f) {
            item.insert(name.to_owned(), Attr::n(value.int(name).ok()?));
        }
    }
    for name in limits.iter().flat_map(|l| Record::names(l)) {
        if let Some(value) = image.get(&name) {
            item.insert(name.clone(), Attr::n(value.int(&name).ok()?));
        }
    }
    Some(item)
}
