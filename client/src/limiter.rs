//! `RateLimiter`: one namespace of one table, its options, `open`,
//! `acquire` and `acquire_with`, and the dispatch of each attempt between
//! the fast path (`fast`) and the slow path (`slow`).

use crate::clock::{Clock, SystemClock};
use crate::config::{OnUnavailable, SystemCache};
use crate::error::Error;
use crate::fast::Fast;
use crate::lease::{Lease, Outcome, Unclaimed, entry_from_view};
use crate::overrides;
use crate::rejection_cache::RejectionCache;
use crate::shared::{ShardDraw, Shared};
use crate::status::Consume;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zae_table::config::{LimitConfig, MAX_TOKENS};
use zae_table::keys::{self, BucketKey};
use zae_table::names::{self, NameKind};
use zae_table::sdk::DynamoStore;
use zae_table::store::{Store, StoreError};

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
    /// How long a fast write's image may refuse a repeat with no request
    /// (monotonic); 0 turns the rejection cache off.
    pub rejection_cache_ttl: Duration,
    /// Picks a shard for tests (the differential pins both clients' draws
    /// to one source): given how many shards a draw picks from, the index
    /// of the one it takes (taken modulo that count). `None` draws at
    /// random.
    pub shard_draw: Option<ShardDraw>,
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
            rejection_cache_ttl: Duration::from_secs(1),
            shard_draw: None,
        }
    }
}

/// A rate limiter on one namespace of a zae-limiter table.
pub struct RateLimiter<S: Store + 'static = DynamoStore> {
    pub(crate) shared: Arc<Shared<S>>,
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
        // Taken apart whole: a new option has to say where it goes.
        let Options {
            config_cache_ttl,
            on_unavailable,
            stamp_ttl,
            ttl_multiplier,
            speculative_writes,
            clock,
            stamp_draw,
            rejection_cache_ttl,
            shard_draw,
        } = options;
        Ok(RateLimiter {
            shared: Arc::new(Shared {
                store,
                namespace: id,
                system: SystemCache::new(config_cache_ttl),
                clock,
                on_unavailable,
                speculative_writes,
                stamp_ttl,
                stamp_draw,
                shard_draw,
                ttl_multiplier,
                shards: Mutex::new(HashMap::new()),
                parents: Mutex::new(HashMap::new()),
                bypassed: Mutex::new(HashSet::new()),
                rejections: RejectionCache::new(rejection_cache_ttl),
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

    /// Forgets every image the rejection cache holds, so that the next
    /// acquire asks the table: for a caller that just changed limits (the
    /// Python client clears it on each of its admin writes).
    pub fn clear_rejection_cache(&self) {
        self.shared.rejections.clear();
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
        self.acquire_scoped(entity, resource, consume, None).await
    }

    /// `acquire` with the caller's own limits for this acquire (the Python
    /// client's `acquire(limits=...)`): they replace every config level's
    /// limits, on the entity's bucket and its parent's. An existing bucket
    /// keeps its stored parameters; `disabled`, bypass and cascade still
    /// come from config. docs/client.md has the rules.
    pub async fn acquire_with_limits(
        &self,
        entity: &str,
        resource: &str,
        consume: &[(&str, i64)],
        limits: &[LimitConfig],
    ) -> Result<Lease<S>, Error> {
        let consume = validate(entity, resource, consume)?;
        let limits = overrides::validate(limits)?;
        self.acquire_scoped(entity, resource, consume, Some(limits))
            .await
    }

    /// The acquire on a task of its own (cancel-safe), with `limits` as its
    /// override.
    async fn acquire_scoped(
        &self,
        entity: &str,
        resource: &str,
        consume: Consume,
        limits: Option<Arc<[LimitConfig]>>,
    ) -> Result<Lease<S>, Error> {
        let this = self.clone();
        let (entity, resource) = (entity.to_owned(), resource.to_owned());
        Self::on_own_task(async move {
            overrides::scoped(limits, this.admit(&entity, &resource, &consume)).await
        })
        .await
    }

    /// Runs an admission on a task of its own, so that it is cancel-safe:
    /// a lease nobody waits for any more is rolled back whole. Outside a
    /// Tokio runtime it runs on the caller's task.
    pub(crate) async fn on_own_task(
        admit: impl Future<Output = Result<Lease<S>, Error>> + Send + 'static,
    ) -> Result<Lease<S>, Error> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return admit.await;
        };
        let (sender, receiver) = futures::channel::oneshot::channel();
        let task = runtime.spawn(async move {
            // Unsent or unread, the lease rolls itself back.
            let _ = sender.send(admit.await.map(Unclaimed::new));
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
        let mode = match shared.on_unavailable {
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

    /// One attempt, as `attempt_paths`; under `limits=`, a fast-path
    /// admission that only a config soft stamp allowed, on a limit the
    /// override declares hard, is refunded and the slow path decides.
    async fn attempt(&self, entity: &str, resource: &str, consume: &Consume) -> Outcome {
        let entries = self.attempt_paths(entity, resource, consume).await?;
        let Some(limits) = overrides::current() else {
            return Ok(entries);
        };
        let waived = entries.iter().any(|e| {
            !e.bypassed
                && e.limits
                    .iter()
                    .any(|(n, l)| l.tk < 0 && overrides::is_hard(&limits, n))
        });
        let Some(key) = entries.first().map(|e| e.key.clone()).filter(|_| waived) else {
            return Ok(entries);
        };
        for entry in &entries {
            self.shared.refund(entry).await;
        }
        self.shared.slow(&key, consume, true).await
    }

    /// The fast path first (both buckets at once when the entity is known
    /// to cascade), the slow path when it cannot decide.
    pub(crate) async fn attempt_paths(
        &self,
        entity: &str,
        resource: &str,
        consume: &Consume,
    ) -> Outcome {
        let shared = &self.shared;
        let now = shared.now();
        let count = shared.known_shards(entity, resource);
        let limits = overrides::current();
        // Shards the rejection cache knows short are not drawn; all of them
        // short is a rejection with no request. Never under `limits=`: the
        // images hold the stored parameters, not the override's.
        let short = match shared.speculative_writes && limits.is_none() {
            true => shared.precheck(entity, resource, consume, now)?,
            false => Vec::new(),
        };
        // An override's soft limit is on no bucket: the fast path would judge it hard.
        let fast = shared.speculative_writes
            && !limits.is_some_and(|l| overrides::skips_fast(&l, consume));
        let key = BucketKey {
            namespace: shared.namespace.clone(),
            entity: entity.to_owned(),
            resource: resource.to_owned(),
            shard: shared.draw(count, &short),
        };
        if !fast {
            return shared.slow(&key, consume, true).await;
        }
        // A process that knows the entity cascades writes both buckets at
        // once; one that does not learns it from the entity's image first.
        let Some(parent) = shared.known_parent(entity, resource) else {
            return match shared.fast(&key, consume, now).await? {
                Fast::Admitted(view) => shared.admitted(key, view, None, consume, now).await,
                Fast::Missing | Fast::Conflict => shared.slow(&key, consume, true).await,
                Fast::Refused(view) => shared.refused(key, view, consume, now).await,
            };
        };
        let pkey = shared.parent_key(&key, parent);
        let (child, parent) = futures::join!(
            shared.fast(&key, consume, now),
            shared.fast(&pkey, consume, now)
        );
        let (child, parent) = match (child, parent) {
            (Ok(child), Ok(parent)) => (child, parent),
            (child, parent) => {
                for (k, landed) in [(&key, &child), (&pkey, &parent)] {
                    if let Ok(Fast::Admitted(v)) = landed {
                        shared.refund(&entry_from_view(k, v, consume, now)).await;
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
                shared
                    .admitted(key, view, Some((pkey, parent)), consume, now)
                    .await
            }
            other => {
                if let Fast::Admitted(pview) = &parent {
                    shared
                        .refund(&entry_from_view(&pkey, pview, consume, now))
                        .await;
                }
                match other {
                    Fast::Refused(view) => shared.refused(key, view, consume, now).await,
                    _ => shared.slow(&key, consume, true).await,
                }
            }
        }
    }
}

/// Names as the table allows them, amounts within the client's ceiling.
pub(crate) fn validate(
    entity: &str,
    resource: &str,
    consume: &[(&str, i64)],
) -> Result<Consume, Error> {
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
