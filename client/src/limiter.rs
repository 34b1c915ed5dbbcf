//! `RateLimiter`: one namespace of one table, and the acquire that ties
//! the fast path, the slow path, cascades and shards together.

use crate::bucket::{BucketView, LimitView};
use crate::clock::{Clock, SystemClock};
use crate::config::{self, OnUnavailable, Resolved, SystemCache};
use crate::error::{Error, RateLimitExceeded};
use crate::fast::{self, Refusal};
use crate::lease::{self, Entry, Lease, Part, Unclaimed};
use crate::slow::{self, Planned, Stamps};
use crate::status::{self, Consume};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zae_table::bucket::shard::{self, MAX_SHARD_COUNT};
use zae_table::config::{Disabled, MAX_TOKENS};
use zae_table::entity::{Meta, create_check};
use zae_table::keys::{self, BucketKey, SK_META, SK_STATE};
use zae_table::milli::MILLI;
use zae_table::names::{self, NameKind};
use zae_table::sdk::DynamoStore;
use zae_table::store::{Returns, Store, StoreError, TxWrite, Updated};

/// How a limiter behaves; the defaults are the 0.17.0 client's.
#[derive(Clone)]
pub struct Options {
    /// How long the system level (its limits, `on_unavailable`) is kept; 0
    /// reads it on every acquire.
    pub config_cache_ttl: Duration,
    /// Overrides the system level's `on_unavailable`.
    pub on_unavailable: Option<OnUnavailable>,
    /// How long a soft stamp lives (its deadline is drawn in 0.8 to 1.0 of it).
    pub stamp_ttl: Duration,
    /// Bucket TTL as a multiple of the slowest recovery; `<= 0` for none.
    pub ttl_multiplier: i64,
    /// Try the one-write fast path first.
    pub speculative_writes: bool,
    pub clock: Arc<dyn Clock>,
    /// A fixed draw in [0.8, 1.0] for stamp deadlines (tests); `None` draws.
    pub stamp_draw: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config_cache_ttl: Duration::from_secs(60),
            on_unavailable: None,
            stamp_ttl: Duration::from_secs(60),
            ttl_multiplier: 7,
            speculative_writes: true,
            clock: Arc::new(SystemClock),
            stamp_draw: None,
        }
    }
}

/// What every acquire and lease of one limiter shares.
pub struct Shared<S> {
    pub(crate) store: S,
    pub(crate) namespace: String,
    options: Options,
    system: SystemCache,
    /// The largest shard count seen per (entity, resource).
    shards: Mutex<HashMap<(String, String), i64>>,
    /// The parent an entity's bucket cascades to, as its images said.
    parents: Mutex<HashMap<(String, String), Option<String>>>,
}

impl<S> Shared<S> {
    pub(crate) fn now(&self) -> i64 {
        self.options.clock.now_ms()
    }

    fn deadline(&self, now: i64) -> i64 {
        let draw = self
            .options
            .stamp_draw
            .unwrap_or_else(|| 0.8 + 0.2 * fastrand::f64());
        let ttl_ms = self.options.stamp_ttl.as_millis() as f64;
        now + (ttl_ms * draw) as i64
    }

    fn known_shards(&self, entity: &str, resource: &str) -> i64 {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards
            .get(&(entity.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(1)
    }

    fn known_parent(&self, entity: &str, resource: &str) -> Option<String> {
        let parents = self.parents.lock().unwrap_or_else(|p| p.into_inner());
        parents
            .get(&(entity.to_owned(), resource.to_owned()))
            .cloned()
            .flatten()
    }

    /// What a bucket image says of its owner's cascade.
    fn learn(&self, key: &BucketKey, view: &BucketView) {
        self.learn_shards(key, view.shard_count);
        self.remember_parent(key, view.parent_id.clone().filter(|_| view.cascade));
    }

    fn remember_parent(&self, key: &BucketKey, parent: Option<String>) {
        let mut parents = self.parents.lock().unwrap_or_else(|p| p.into_inner());
        parents.insert((key.entity.clone(), key.resource.clone()), parent);
    }

    fn learn_shards(&self, key: &BucketKey, count: i64) {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let known = shards
            .entry((key.entity.clone(), key.resource.clone()))
            .or_insert(1);
        *known = (*known).max(count.min(MAX_SHARD_COUNT));
    }
}

/// A rate limiter on one namespace of a zae-limiter table.
pub struct RateLimiter<S: Store + 'static = DynamoStore> {
    shared: Arc<Shared<S>>,
}

impl<S: Store + 'static> Clone for RateLimiter<S> {
    fn clone(&self) -> Self {
        RateLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// How long one request of [`sdk_config`] may take to connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// All of a request's attempts: past this an acquire is `Unavailable`.
/// No per-attempt bound: an attempt cut short may have landed, and the
/// SDK would send the same `ADD` again (a double debit or refund).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The SDK configuration [`RateLimiter::open`] uses: region, credentials
/// and endpoint from the environment, and every request bounded in time,
/// so that a table that accepts and never answers is `Unavailable` (which
/// `on_unavailable` then decides), never a caller held for good. The SDK
/// alone bounds only the connect.
pub async fn sdk_config() -> aws_config::SdkConfig {
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(timeouts)
        .load()
        .await
}

impl RateLimiter<DynamoStore> {
    /// Opens `namespace` of `table` with [`sdk_config`].
    pub async fn open(namespace: &str, table: &str) -> Result<Self, Error> {
        Self::open_with(&sdk_config().await, namespace, table, Options::default()).await
    }

    pub async fn open_with(
        sdk: &aws_config::SdkConfig,
        namespace: &str,
        table: &str,
        options: Options,
    ) -> Result<Self, Error> {
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(sdk), table);
        Self::on_store(store, namespace, options).await
    }
}

/// One attempt's end: admitted with the buckets debited, or refused.
type Outcome = Result<Vec<Entry>, Error>;

impl<S: Store + 'static> RateLimiter<S> {
    /// A limiter on any store (the in-memory twin in tests); `namespace` is
    /// the name registered in the table, as the Python client opens it.
    pub async fn on_store(store: S, namespace: &str, options: Options) -> Result<Self, Error> {
        let entry = store
            .get(&keys::pk_registry(), &keys::sk_namespace(namespace), false)
            .await
            .map_err(Error::store)?;
        let id = entry
            .as_ref()
            .and_then(zae_table::registry::namespace_id)
            .ok_or_else(|| Error::UnknownNamespace(namespace.to_owned()))?
            .to_owned();
        let system = SystemCache::new(options.config_cache_ttl);
        Ok(RateLimiter {
            shared: Arc::new(Shared {
                store,
                namespace: id,
                options,
                system,
                shards: Mutex::new(HashMap::new()),
                parents: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The namespace id every key of this limiter starts with.
    pub fn namespace_id(&self) -> &str {
        &self.shared.namespace
    }

    pub fn store(&self) -> &S {
        &self.shared.store
    }

    /// Admits `consume` (whole tokens per limit) for `entity` on `resource`,
    /// or says why not. The lease it answers holds the debit; commit it
    /// (or roll it back) when the work is done.
    ///
    /// Cancel-safe: inside a Tokio runtime the acquire runs to its end on a
    /// task of its own, and a lease its caller stopped waiting for (a
    /// dropped future) is rolled back, so no debit is left behind.
    pub async fn acquire(
        &self,
        entity: &str,
        resource: &str,
        consume: &[(&str, i64)],
    ) -> Result<Lease<S>, Error> {
        let consume = validate(entity, resource, consume)?;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.admit(entity, resource, &consume).await;
        };
        let (sender, receiver) = futures::channel::oneshot::channel();
        let this = self.clone();
        let (entity, resource) = (entity.to_owned(), resource.to_owned());
        let task = runtime.spawn(async move {
            let admitted = this.admit(&entity, &resource, &consume).await;
            // Unsent or unread, the lease rolls itself back.
            let _ = sender.send(admitted.map(Unclaimed::new));
        });
        match receiver.await {
            Ok(admitted) => admitted.map(Unclaimed::claim),
            Err(_) => match task.await {
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                _ => Err(Error::Unavailable(StoreError::Fatal {
                    operation: "acquire",
                    key: String::new(),
                    message: "the acquire's task was cancelled (the runtime is shutting down)"
                        .into(),
                })),
            },
        }
    }

    /// The acquire itself, on the caller's task.
    async fn admit(
        &self,
        entity: &str,
        resource: &str,
        consume: &Consume,
    ) -> Result<Lease<S>, Error> {
        let shared = &self.shared;
        let mode = match shared.options.on_unavailable {
            Some(mode) => mode,
            None => shared.system.mode(&shared.store, &shared.namespace).await,
        };
        match self.attempt(entity, resource, consume).await {
            Ok(entries) => Ok(Lease::new(Arc::clone(shared), entries)),
            Err(Error::Unavailable(e)) if mode == OnUnavailable::Allow => {
                tracing::warn!(error = %e, "table unavailable: admitted without counting (on_unavailable = allow)");
                Ok(Lease::degraded())
            }
            Err(e) => Err(e),
        }
    }

    /// Acquires, runs `work` with the lease, then commits it when the work
    /// succeeds and rolls it back when it fails: the Python client's
    /// `async with limiter.acquire(...)`.
    pub async fn acquire_with<T, E, F>(
        &self,
        entity: &str,
        resource: &str,
        consume: &[(&str, i64)],
        work: F,
    ) -> Result<Result<T, E>, Error>
    where
        F: AsyncFnOnce(&mut Lease<S>) -> Result<T, E>,
    {
        let mut lease = self.acquire(entity, resource, consume).await?;
        let result = work(&mut lease).await;
        match &result {
            Ok(_) => lease.commit().await?,
            Err(_) => lease.rollback().await,
        }
        Ok(result)
    }

    async fn attempt(&self, entity: &str, resource: &str, consume: &Consume) -> Outcome {
        let shared = &self.shared;
        let now = shared.now();
        let count = shared.known_shards(entity, resource);
        let key = BucketKey {
            namespace: shared.namespace.clone(),
            entity: entity.to_owned(),
            resource: resource.to_owned(),
            shard: draw(count, &[]),
        };
        if !shared.options.speculative_writes {
            return self.slow(&key, consume, true).await;
        }
        // A process that knows the entity cascades writes both buckets at
        // once; one that does not learns it from the entity's image first.
        let Some(parent) = shared.known_parent(entity, resource) else {
            return match self.fast(&key, consume, now).await? {
                Fast::Admitted(view) => self.admitted(key, view, None, consume, now).await,
                Fast::Missing | Fast::Conflict => self.slow(&key, consume, true).await,
                Fast::Refused(view) => self.refused(key, view, consume, now).await,
            };
        };
        let pkey = self.parent_key(&key, parent);
        let (child, parent) = futures::join!(
            self.fast(&key, consume, now),
            self.fast(&pkey, consume, now)
        );
        let (child, parent) = match (child, parent) {
            (Ok(child), Ok(parent)) => (child, parent),
            (child, parent) => {
                for (k, landed) in [(&key, &child), (&pkey, &parent)] {
                    if let Ok(Fast::Admitted(v)) = landed {
                        self.refund(&entry_from_view(k, v, consume, now)).await;
                    }
                }
                return Err(child
                    .err()
                    .or(parent.err())
                    .unwrap_or_else(|| Error::Validation("unreachable".into())));
            }
        };
        match child {
            Fast::Admitted(view) => {
                self.admitted(key, view, Some((pkey, parent)), consume, now)
                    .await
            }
            other => {
                if let Fast::Admitted(pview) = &parent {
                    self.refund(&entry_from_view(&pkey, pview, consume, now))
                        .await;
                }
                match other {
                    Fast::Refused(view) => self.refused(key, view, consume, now).await,
                    _ => self.slow(&key, consume, true).await,
                }
            }
        }
    }

    /// The parent's bucket, on a shard drawn from its known count.
    fn parent_key(&self, key: &BucketKey, parent: String) -> BucketKey {
        let count = self.shared.known_shards(&parent, &key.resource);
        BucketKey {
            entity: parent,
            shard: draw(count, &[]),
            ..key.clone()
        }
    }

    /// The fast path on one shard, conflicts resent up to three times.
    async fn fast(&self, key: &BucketKey, consume: &Consume, now: i64) -> Result<Fast, Error> {
        let update = fast::update(key, consume, now);
        let store = &self.shared.store;
        for attempt in 0..=CONFLICT_WAITS_MS.len() {
            match store.update_or_old(&update).await {
                Ok(Updated::Applied(Some(item))) => {
                    let view = BucketView::read(&item);
                    self.shared.learn(key, &view);
                    return Ok(Fast::Admitted(view));
                }
                Ok(Updated::Applied(None)) | Ok(Updated::Refused(None)) => {
                    return Ok(Fast::Missing);
                }
                Ok(Updated::Refused(Some(item))) => {
                    let view = BucketView::read(&item);
                    self.shared.learn(key, &view);
                    return Ok(Fast::Refused(view));
                }
                Err(e) if e.is_conflict() => conflict_wait(attempt).await,
                Err(e) => return Err(Error::store(e)),
            }
        }
        Ok(Fast::Conflict)
    }

    /// The entity's bucket took the debit; its parent's follows when the
    /// bucket says it cascades.
    async fn admitted(
        &self,
        key: BucketKey,
        view: BucketView,
        parent_sent: Option<(BucketKey, Fast)>,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        let child = self.fast_entry(&key, &view, consume, now).await;
        let parent = view.parent_id.clone().filter(|_| view.cascade);
        // A debit sent to a parent the bucket no longer names goes back.
        if let Some((pkey, Fast::Admitted(pview))) = &parent_sent
            && parent.as_ref() != Some(&pkey.entity)
        {
            self.refund(&entry_from_view(pkey, pview, consume, now))
                .await;
        }
        let Some(parent) = parent else {
            return Ok(vec![child]);
        };
        let (pkey, parent_fast) = match parent_sent {
            Some((pkey, sent)) if pkey.entity == parent => (pkey, Ok(sent)),
            _ => {
                let pkey = self.parent_key(&key, parent);
                let sent = self.fast(&pkey, consume, now).await;
                (pkey, sent)
            }
        };
        let parent_result = match parent_fast {
            Ok(Fast::Admitted(pview)) => {
                Ok(vec![self.fast_entry(&pkey, &pview, consume, now).await])
            }
            Ok(Fast::Refused(pview)) => match fast::classify(&pview, consume, now) {
                Refusal::Exhausted if !fast::refill_would_help(&pview, consume, now) => {
                    let soft = |n: &str| view.limits.get(n).is_some_and(|l| l.soft_live(now));
                    let by_bucket = BTreeMap::new();
                    let mut statuses = status::statuses(
                        (&key.entity, &key.resource),
                        &view,
                        consume,
                        (&soft, &by_bucket),
                        now,
                    );
                    statuses.extend(self.image_statuses(&pkey, &pview, consume, now));
                    Err(Error::RateLimitExceeded(RateLimitExceeded {
                        statuses,
                        contended: false,
                    }))
                }
                Refusal::Disabled => Err(disabled(&pkey, "bucket")),
                Refusal::Unsupported(feature) => Err(unsupported(&pkey, feature)),
                _ => self.slow(&pkey, consume, false).await,
            },
            Ok(Fast::Missing | Fast::Conflict) => self.slow(&pkey, consume, false).await,
            Err(e) => Err(e),
        };
        match parent_result {
            Ok(mut parent) => {
                let mut entries = vec![child];
                entries.append(&mut parent);
                Ok(entries)
            }
            Err(e) => {
                self.refund(&child).await;
                Err(e)
            }
        }
    }

    /// The lease entry of a fast-path debit; a bypassed bucket gets its
    /// tokens back at once (only the count stays).
    async fn fast_entry(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Entry {
        let mut entry = entry_from_view(key, view, consume, now);
        if view.bypassed(now) {
            let refund = negated(&entry.debited);
            if let Err(e) =
                lease::write_net(&self.shared.store, &entry, &refund, Part::Tokens).await
            {
                tracing::warn!(bucket = %key.pk(), error = %e, "the refund of a bypassed debit failed");
            }
            for (name, d) in &entry.debited {
                if let Some(l) = entry.limits.get_mut(name) {
                    l.tk = l.tk.saturating_add(*d);
                }
            }
            entry.bypassed = true;
        }
        entry
    }

    /// Takes back an entry's initial debit (its count alone when it was
    /// admitted bypassed: its tokens went back at once); failures are logged.
    async fn refund(&self, entry: &Entry) {
        let refund = negated(&entry.debited);
        let part = Part::of(entry);
        if let Err(e) = lease::write_net(&self.shared.store, entry, &refund, part).await {
            tracing::warn!(bucket = %entry.key.pk(), error = %e, "a compensating refund failed");
        }
    }

    /// A fast-path write that failed its condition, by what the item shows.
    async fn refused(
        &self,
        key: BucketKey,
        view: BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        match fast::classify(&view, consume, now) {
            Refusal::Disabled => Err(disabled(&key, "bucket")),
            Refusal::Unsupported(feature) => Err(unsupported(&key, feature)),
            Refusal::Boundary => self.slow(&key, consume, true).await,
            Refusal::WcuShort {
                refilled,
                limits_short,
            } => {
                if limits_short && !fast::refill_would_help(&view, consume, now) {
                    return Err(self.rejection(&key, &view, consume, now));
                }
                if refilled {
                    // The slow path refills the write budget and never spends it.
                    return self.slow(&key, consume, true).await;
                }
                self.double(&key, &view, consume, now).await
            }
            Refusal::Exhausted => self.exhausted(key, view, consume, now).await,
        }
    }

    /// The shard's write budget is spent and a refill would not bring one
    /// write back: double the bucket's shard count on shard 0 (a loser of
    /// that race adopts the winner's count), raise the other shards' counts,
    /// and take a new shard in the slow path (§5.3). At 32 shards, the slow
    /// path on this shard.
    async fn double(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        let (store, count) = (&self.shared.store, view.shard_count);
        if count >= MAX_SHARD_COUNT {
            tracing::warn!(bucket = %key.pk(), "write budget spent at the most shards a bucket may have");
            return self.slow(key, consume, true).await;
        }
        let doubled = (count * 2).min(MAX_SHARD_COUNT);
        let first = key.shard(0).pk();
        let busy = |e: StoreError| {
            if e.is_conflict() {
                self.contended_on(key, view, consume, now)
            } else {
                Error::store(e)
            }
        };
        let now_count = match store
            .update_or_old(&shard::double(&first, Some(count), doubled))
            .await
            .map_err(busy)?
        {
            Updated::Applied(_) => {
                // A shard not created yet fails its condition harmlessly.
                for other in 1..count {
                    let raise = shard::raise_count(&key.shard(other as u32).pk(), doubled, &[]);
                    match store.update(&raise, Returns::Nothing).await {
                        Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                        Err(e) => return Err(busy(e)),
                    }
                }
                doubled
            }
            Updated::Refused(Some(item)) => BucketView::read(&item).shard_count,
            Updated::Refused(None) => return self.slow(key, consume, true).await,
        };
        self.shared.learn_shards(key, now_count);
        let old: Vec<u32> = (0..u32::try_from(count).unwrap_or(1)).collect();
        let fresh = key.shard(draw(now_count, &old));
        self.slow(&fresh, consume, true).await
    }

    /// A consumed limit is short on this shard: other shards first (up to
    /// two, when the bucket does not cascade), then the refill check.
    async fn exhausted(
        &self,
        key: BucketKey,
        view: BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        // Failed on a trimming `vu = 0` only: this shard's slow path trims it.
        if view.vu.is_some() && fast::fits_now(&view, consume, now, true) {
            return self.slow(&key, consume, true).await;
        }
        if view.shard_count > 1 && !view.cascade {
            let mut tried = vec![key.shard];
            for _ in 0..2 {
                if tried.len() as i64 >= view.shard_count {
                    break;
                }
                let other = key.shard(draw(view.shard_count, &tried));
                tried.push(other.shard);
                match self.fast(&other, consume, now).await? {
                    Fast::Admitted(v) => {
                        return Ok(vec![self.fast_entry(&other, &v, consume, now).await]);
                    }
                    Fast::Missing | Fast::Conflict => {
                        return self.slow(&other, consume, true).await;
                    }
                    Fast::Refused(v) => match fast::classify(&v, consume, now) {
                        Refusal::Exhausted => continue,
                        Refusal::Disabled => return Err(disabled(&other, "bucket")),
                        Refusal::Unsupported(f) => return Err(unsupported(&other, f)),
                        _ => return self.slow(&other, consume, true).await,
                    },
                }
            }
        }
        if fast::refill_would_help(&view, consume, now) {
            return self.slow(&key, consume, true).await;
        }
        Err(self.rejection(&key, &view, consume, now))
    }

    fn image_statuses(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Vec<crate::error::LimitStatus> {
        let soft = |n: &str| view.limits.get(n).is_some_and(|l| l.soft_present);
        let by_bucket = BTreeMap::new();
        let who = (key.entity.as_str(), key.resource.as_str());
        status::statuses(who, view, consume, (&soft, &by_bucket), now)
    }

    /// Other writers held the bucket: nothing judged, every status passed.
    fn contended_on(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Error {
        let mut statuses = self.image_statuses(key, view, consume, now);
        for status in &mut statuses {
            (status.exceeded, status.retry_after_ms) = (false, 0);
        }
        Error::RateLimitExceeded(RateLimitExceeded {
            statuses,
            contended: true,
        })
    }

    fn rejection(&self, key: &BucketKey, view: &BucketView, consume: &Consume, now: i64) -> Error {
        Error::RateLimitExceeded(RateLimitExceeded {
            statuses: self.image_statuses(key, view, consume, now),
            contended: false,
        })
    }

    /// The slow path on `key`'s shard, with the parent's bucket in the same
    /// commit when `cascade` and the entity's META and config say so. A
    /// create that lost to a changed META (or, in a cascade, any lost
    /// create) is planned again once from fresh reads.
    async fn slow(&self, key: &BucketKey, consume: &Consume, cascade: bool) -> Outcome {
        for pass in 0..SLOW_PASSES {
            let now_plan = self.shared.now();
            // A re-plan reads META and the buckets strongly consistent.
            let targets = self.read_targets(key, cascade, pass > 0).await?;
            let plans = self.plan(&targets, consume, now_plan).await?;
            let last = pass + 1 == SLOW_PASSES;
            if let Some(done) = self.commit(&plans, &targets, consume, now_plan, last).await {
                return done;
            }
        }
        Err(Error::Unavailable(StoreError::Retryable {
            operation: "TransactWriteItems",
            key: key.pk(),
            message: "every planned create lost to another writer".into(),
        }))
    }

    /// The entity's bucket and, when it cascades, its parent's: config,
    /// META and the bucket of each.
    async fn read_targets(
        &self,
        key: &BucketKey,
        cascade: bool,
        consistent: bool,
    ) -> Result<Vec<(BucketKey, Target)>, Error> {
        let shared = &self.shared;
        let child = self.read_target(key, consistent).await?;
        let parent = child.meta.as_ref().and_then(|m| m.parent_id.clone());
        let parent = parent.filter(|_| slow::cascades(&child.resolved, child.meta.as_ref()));
        shared.remember_parent(key, parent.clone());
        let mut targets = vec![(key.clone(), child)];
        if let Some(parent) = parent.filter(|_| cascade) {
            let pkey = self.parent_key(key, parent);
            let target = self.read_target(&pkey, consistent).await?;
            targets.push((pkey, target));
        }
        Ok(targets)
    }

    /// Each bucket's write, judged on what was read; a rejection when any
    /// hard limit is short (its stale stamps corrected first).
    async fn plan(
        &self,
        targets: &[(BucketKey, Target)],
        consume: &Consume,
        now_plan: i64,
    ) -> Result<Vec<Planned>, Error> {
        let shared = &self.shared;
        let now_commit = shared.now();
        let deadline = |now: i64| shared.deadline(now);
        let stamps = Stamps {
            deadline: &deadline,
            ttl_multiplier: shared.options.ttl_multiplier,
        };
        if let Some((_, t)) = targets.first() {
            let unknown: Vec<&String> = consume
                .keys()
                .filter(|n| t.resolved.limit(n).is_none())
                .collect();
            if !unknown.is_empty() {
                // As the 0.17.0 client: ignored, with a warning (its v1.0
                // will refuse them). The resource goes to the log, never the
                // entity id, which is often an API key.
                tracing::warn!(?unknown, resource = %targets[0].0.resource, "acquire names limits not configured for the resource; ignored");
            }
        }
        let plans: Vec<Planned> = targets
            .iter()
            .map(|(k, t)| match &t.view {
                Some(view) => slow::plan_update(
                    k,
                    view,
                    &t.resolved,
                    t.meta.as_ref(),
                    consume,
                    now_plan,
                    now_commit,
                    stamps,
                ),
                None => slow::plan_create(
                    k,
                    shared.known_shards(&k.entity, &k.resource),
                    &t.resolved,
                    t.meta.as_ref(),
                    consume,
                    now_commit,
                    stamps,
                ),
            })
            .collect();
        if plans.iter().all(|p| p.admitted) {
            return Ok(plans);
        }
        self.fix_stamps(targets, now_plan, stamps).await;
        let statuses = plans
            .iter()
            .zip(targets)
            .flat_map(|(p, (k, t))| plan_statuses(k, p, &t.resolved, consume, now_plan))
            .collect();
        Err(Error::RateLimitExceeded(RateLimitExceeded {
            statuses,
            contended: false,
        }))
    }

    /// A rejected pass writes nothing, so the stamps it would have renewed
    /// are corrected alone, best effort (the rejection stands either way).
    async fn fix_stamps(&self, targets: &[(BucketKey, Target)], now: i64, stamps: Stamps<'_>) {
        for (key, target) in targets {
            let Some(view) = &target.view else { continue };
            let Some(fix) = slow::stamp_fix(key, view, &target.resolved, now, stamps) else {
                continue;
            };
            match self.shared.store.update(&fix, Returns::Nothing).await {
                Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                Err(e) => {
                    tracing::warn!(bucket = %key.pk(), error = %e, "a stamp correction failed")
                }
            }
        }
    }

    /// One bucket's config, its owner's META and the bucket, as the slow
    /// path reads them.
    async fn read_target(&self, key: &BucketKey, consistent: bool) -> Result<Target, Error> {
        let shared = &self.shared;
        let resolved = config::resolve(
            &shared.store,
            &shared.system,
            &shared.namespace,
            &key.entity,
            &key.resource,
        )
        .await?;
        if let Some((Disabled::Yes, level)) = &resolved.disabled {
            return Err(disabled(key, level.kind()));
        }
        if let Some((Disabled::Bypass, level)) = &resolved.disabled {
            return Err(Error::Unsupported {
                feature: crate::error::Feature::Bypass,
                entity: key.entity.clone(),
                resource: key.resource.clone(),
                at: format!("the {} level", level.describe()),
            });
        }
        let meta_pk = keys::pk_entity(&shared.namespace, &key.entity);
        let keys = vec![
            (meta_pk.clone(), SK_META.to_owned()),
            (key.pk(), SK_STATE.to_owned()),
        ];
        let items = shared
            .store
            .get_many(&keys, consistent)
            .await
            .map_err(Error::store)?;
        let meta = items
            .iter()
            .find(|i| keys::pk_of(i) == Some(&meta_pk))
            .map(Meta::read);
        let view = items
            .iter()
            .find(|i| keys::pk_of(i) == Some(&key.pk()))
            .map(BucketView::read);
        if let Some(v) = &view {
            shared.learn_shards(key, v.shard_count);
            if let Some(feature) = v.unsupported {
                return Err(unsupported(key, feature));
            }
            if v.disabled {
                return Err(disabled(key, "bucket"));
            }
        }
        Ok(Target {
            resolved,
            meta,
            view,
        })
    }

    /// Writes the plans: one bucket alone, several in one transaction;
    /// conflicts resent, a lost lock retried with the consumption alone.
    /// `None`: plan again (a create lost its race, and this was not the
    /// `last` pass).
    async fn commit(
        &self,
        plans: &[Planned],
        targets: &[(BucketKey, Target)],
        consume: &Consume,
        now: i64,
        last: bool,
    ) -> Option<Outcome> {
        let store = &self.shared.store;
        let mut writes = Vec::new();
        for (plan, (key, target)) in plans.iter().zip(targets) {
            writes.push(plan.write.clone());
            if matches!(plan.write, TxWrite::Put { .. }) {
                writes.push(create_check(
                    &self.shared.namespace,
                    &key.entity,
                    target.meta.as_ref(),
                ));
            }
        }
        for attempt in 0..=CONFLICT_WAITS_MS.len() {
            let result = match (&plans[0].write, plans.len()) {
                (TxWrite::Update(update), 1) => match store.update_or_old(update).await {
                    Ok(Updated::Applied(Some(_))) => {
                        return Some(Ok(vec![entry_from_plan(&plans[0], consume, now)]));
                    }
                    Ok(_) => Err(StoreError::ConditionFailed {
                        operation: "UpdateItem",
                        key: plans[0].key.pk(),
                    }),
                    Err(e) => Err(e),
                },
                _ => store.transact(&writes).await,
            };
            match result {
                Ok(()) => {
                    return Some(Ok(plans
                        .iter()
                        .map(|p| entry_from_plan(p, consume, now))
                        .collect()));
                }
                Err(e) if e.is_conflict() => conflict_wait(attempt).await,
                Err(e @ (StoreError::ConditionFailed { .. } | StoreError::Cancelled { .. })) => {
                    // One bucket that lost its lock, or lost its create to
                    // another writer's: the consumption alone, onto the
                    // bucket as it now is (§3.5). A create whose owner
                    // changed, or a cascade that lost anything, plans again
                    // (which bucket lost is not known); on the last pass,
                    // buckets that all exist take the consumption alone.
                    let alone = plans.len() == 1 && matches!(e, StoreError::ConditionFailed { .. });
                    let creates = plans.iter().any(|p| p.view.is_none());
                    if alone || (last && !creates) {
                        return Some(self.consumption_only(plans, targets, consume, now).await);
                    }
                    if !last {
                        return None;
                    }
                    break;
                }
                Err(e) => return Some(Err(Error::store(e))),
            }
        }
        Some(Err(contended(plans, consume, now)))
    }

    /// After a lost lock: the consumption alone, no refill (§3.5); a
    /// failure is a rejection judged on the items as they now stand.
    async fn consumption_only(
        &self,
        plans: &[Planned],
        targets: &[(BucketKey, Target)],
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        let store = &self.shared.store;
        let updates: Vec<_> = plans
            .iter()
            .zip(targets)
            .map(|(p, (_, t))| {
                let taken: Consume = consume
                    .iter()
                    .filter(|(n, a)| **a > 0 && p.after.contains_key(*n))
                    .map(|(n, a)| (n.clone(), *a))
                    .collect();
                slow::consumption_only(&p.key, &taken, &|n| t.resolved.is_soft(n), now)
            })
            .collect();
        if updates.iter().all(|u| u.expression.is_empty()) {
            return Ok(plans
                .iter()
                .map(|p| entry_from_plan(p, consume, now))
                .collect());
        }
        for attempt in 0..=CONFLICT_WAITS_MS.len() {
            let result = if updates.len() == 1 {
                match store.update_or_old(&updates[0]).await {
                    Ok(Updated::Applied(Some(_))) => {
                        return Ok(vec![entry_from_plan(&plans[0], consume, now)]);
                    }
                    Ok(Updated::Refused(Some(item))) => {
                        let view = BucketView::read(&item);
                        return Err(self.rejection(&plans[0].key, &view, consume, now));
                    }
                    Ok(_) => Err(StoreError::ConditionFailed {
                        operation: "UpdateItem",
                        key: plans[0].key.pk(),
                    }),
                    Err(e) => Err(e),
                }
            } else {
                let writes: Vec<TxWrite> = updates.iter().cloned().map(TxWrite::Update).collect();
                store.transact(&writes).await
            };
            match result {
                Ok(()) => {
                    return Ok(plans
                        .iter()
                        .map(|p| entry_from_plan(p, consume, now))
                        .collect());
                }
                Err(e) if e.is_conflict() => conflict_wait(attempt).await,
                Err(StoreError::ConditionFailed { .. } | StoreError::Cancelled { .. }) => {
                    return Err(self.rejection_now(plans, consume, now).await);
                }
                Err(e) => return Err(Error::store(e)),
            }
        }
        Err(contended(plans, consume, now))
    }

    /// A rejection judged on the buckets read again (strongly consistent).
    async fn rejection_now(&self, plans: &[Planned], consume: &Consume, now: i64) -> Error {
        let mut statuses = Vec::new();
        for plan in plans {
            match self.shared.store.get(&plan.key.pk(), SK_STATE, true).await {
                Ok(Some(item)) => statuses.extend(self.image_statuses(
                    &plan.key,
                    &BucketView::read(&item),
                    consume,
                    now,
                )),
                // Deleted (TTL) between the race and this read: nothing to
                // judge, and nothing written; worth another acquire.
                Ok(None) => return contended(plans, consume, now),
                Err(e) => return Error::store(e),
            }
        }
        Error::RateLimitExceeded(RateLimitExceeded {
            statuses,
            contended: false,
        })
    }
}

/// What the slow path read for one bucket.
struct Target {
    resolved: Resolved,
    meta: Option<Meta>,
    view: Option<BucketView>,
}

enum Fast {
    Admitted(BucketView),
    Refused(BucketView),
    Missing,
    /// Still in other transactions after three resends.
    Conflict,
}

/// A slow path plans at most twice (a create that lost its race, once).
const SLOW_PASSES: usize = 2;

/// Full-jitter waits before each resend of a conflicting write.
const CONFLICT_WAITS_MS: [u64; 3] = [25, 50, 100];

async fn conflict_wait(attempt: usize) {
    if let Some(cap) = CONFLICT_WAITS_MS.get(attempt) {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=*cap))).await;
    }
}

/// A random shard of `count`, avoiding `tried` while any is left.
fn draw(count: i64, tried: &[u32]) -> u32 {
    let count = u32::try_from(count.clamp(1, 32)).unwrap_or(1);
    let left: Vec<u32> = (0..count).filter(|s| !tried.contains(s)).collect();
    if left.is_empty() {
        return fastrand::u32(0..count);
    }
    left[fastrand::usize(0..left.len())]
}

fn disabled(key: &BucketKey, level: &str) -> Error {
    Error::ResourceDisabled {
        entity: key.entity.clone(),
        resource: key.resource.clone(),
        level: level.to_owned(),
    }
}

fn unsupported(key: &BucketKey, feature: crate::error::Feature) -> Error {
    Error::Unsupported {
        feature,
        entity: key.entity.clone(),
        resource: key.resource.clone(),
        at: format!("bucket item {}", key.pk()),
    }
}

fn contended(plans: &[Planned], consume: &Consume, _now: i64) -> Error {
    let statuses = plans
        .iter()
        .flat_map(|p| {
            p.after.iter().map(|(name, l)| {
                // The configured limit this pass judged by, as elsewhere.
                let q = status::Quoted::of(p.quoted.get(name), l).per_shard(p.shard_count);
                crate::error::LimitStatus {
                    entity: p.key.entity.clone(),
                    resource: p.key.resource.clone(),
                    limit: name.clone(),
                    available: (l.tk + consume.get(name).copied().unwrap_or_default() * MILLI)
                        .div_euclid(MILLI),
                    requested: consume.get(name).copied().unwrap_or_default(),
                    exceeded: false,
                    retry_after_ms: 0,
                    soft: l.soft_present,
                    capacity: q.capacity,
                    refill_amount: q.refill_amount,
                    refill_period_s: q.refill_period_s,
                }
            })
        })
        .collect();
    Error::RateLimitExceeded(RateLimitExceeded {
        statuses,
        contended: true,
    })
}

/// Statuses of a planned bucket, judged as the plan judged it.
fn plan_statuses(
    key: &BucketKey,
    plan: &Planned,
    resolved: &Resolved,
    consume: &Consume,
    now: i64,
) -> Vec<crate::error::LimitStatus> {
    let soft = |n: &str| resolved.is_soft(n);
    let who = (key.entity.as_str(), key.resource.as_str());
    match &plan.view {
        Some(view) => {
            let mut view = view.clone();
            for (name, after) in &plan.after {
                view.limits.entry(name.clone()).or_insert_with(|| {
                    let mut seeded = *after;
                    seeded.tk += consume.get(name).copied().unwrap_or_default() * MILLI;
                    seeded
                });
            }
            status::statuses(who, &view, consume, (&soft, &plan.quoted), now)
        }
        None => {
            let mut view = BucketView {
                rf: now,
                shard_count: plan.shard_count,
                ..Default::default()
            };
            for (name, after) in &plan.after {
                let mut fresh = *after;
                fresh.tk += consume.get(name).copied().unwrap_or_default() * MILLI;
                view.limits.insert(name.clone(), fresh);
            }
            status::statuses(who, &view, consume, (&soft, &plan.quoted), now)
        }
    }
}

fn debited(consume: &Consume, has: impl Fn(&str) -> bool) -> BTreeMap<String, i64> {
    consume
        .iter()
        .filter(|(n, _)| has(n))
        .map(|(n, a)| (n.clone(), a * MILLI))
        .collect()
}

/// The limits an acquire named, of those a bucket has.
fn declared(
    limits: &BTreeMap<String, LimitView>,
    consume: &Consume,
) -> BTreeMap<String, LimitView> {
    limits
        .iter()
        .filter(|(n, _)| consume.contains_key(*n))
        .map(|(n, l)| (n.clone(), *l))
        .collect()
}

/// A lease entry on `limits` as the acquire left them; the caller sets
/// where their refill stands.
fn entry(
    key: &BucketKey,
    limits: &BTreeMap<String, LimitView>,
    consume: &Consume,
    now: i64,
) -> Entry {
    Entry {
        key: key.clone(),
        debited: debited(consume, |n| limits.contains_key(n)),
        limits: declared(limits, consume),
        soft: limits
            .iter()
            .filter(|(_, l)| l.soft_live(now))
            .map(|(n, _)| n.clone())
            .collect(),
        rf: now,
        refilled_at: BTreeMap::new(),
        shard_count: 1,
        vu: None,
        bypassed: false,
        foreign: false,
        pending: BTreeMap::new(),
        quoted: BTreeMap::new(),
    }
}

fn entry_from_view(key: &BucketKey, view: &BucketView, consume: &Consume, now: i64) -> Entry {
    Entry {
        rf: view.rf,
        shard_count: view.shard_count,
        vu: view.vu,
        foreign: view.unsupported.is_some(),
        ..entry(key, &view.limits, consume, now)
    }
}

/// The lease's view of a planned bucket: the balances this pass computed,
/// refilled where its refill reached (as the Python lease holds them).
fn entry_from_plan(plan: &Planned, consume: &Consume, now: i64) -> Entry {
    Entry {
        quoted: plan.quoted.clone(),
        rf: plan.rf,
        refilled_at: plan.refilled_at.clone(),
        shard_count: plan.shard_count,
        ..entry(&plan.key, &plan.after, consume, now)
    }
}

fn negated(amounts: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    amounts
        .iter()
        .map(|(n, d)| (n.clone(), d.saturating_neg()))
        .collect()
}

/// Names as the table allows them, amounts within the client's ceiling.
fn validate(entity: &str, resource: &str, consume: &[(&str, i64)]) -> Result<Consume, Error> {
    names::check(NameKind::Entity, entity).map_err(Error::Validation)?;
    names::check(NameKind::Resource, resource).map_err(Error::Validation)?;
    if consume.is_empty() {
        return Err(Error::Validation(
            "acquire needs at least one limit to consume".into(),
        ));
    }
    let mut out = Consume::new();
    for (name, amount) in consume {
        if !names::is_limit_name(name) || *name == names::WCU_LIMIT {
            return Err(Error::Validation(format!(
                "'{name}' is not a limit name (letters first, then letters, digits, _ . -; 'wcu' is reserved)"
            )));
        }
        if !(0..=MAX_TOKENS).contains(amount) {
            return Err(Error::Validation(format!(
                "consume {name}={amount}: amounts are whole tokens from 0 to {MAX_TOKENS}"
            )));
        }
        if out.insert((*name).to_owned(), *amount).is_some() {
            return Err(Error::Validation(format!("consume names {name} twice")));
        }
    }
    Ok(out)
}
