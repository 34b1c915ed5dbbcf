//! `acquire_many`: several resources for one entity in one acquire, all or
//! none (§10 of the protocol, the 0.17.0 client's `also=`):
//! 1. every resource is checked against the rejection cache before any
//!    write; one known short rejects with no request;
//! 2. the fast path runs for every resource at once, each as a
//!    single-resource acquire runs it (shards, cascade, parent refund);
//! 3. the resources it could not settle are planned each as its slow pass
//!    would plan it and committed together in one transaction
//!    (`slow::many`);
//! 4. any rejection, disable or error refunds every debit that landed, and
//!    the statuses of every resource are raised together;
//!    `ResourceDisabled` outranks everything.

use crate::config::{self, OnUnavailable};
use crate::error::{Error, LimitStatus};
use crate::lease::{Entry, Lease};
use crate::limiter::{RateLimiter, validate};
use crate::rejection::{admitted_statuses, combined};
use crate::slow::many::{Deferred, SlowPart, deferring};
use crate::slow::plan::cascades;
use crate::status::Consume;
use std::sync::Arc;
use zae_table::config::{Disabled, LimitConfig};
use zae_table::entity::Meta;
use zae_table::keys::{self, BucketKey, SK_META};
use zae_table::store::Store;

/// The most resources one acquire may debit (the 0.17.0 client's
/// `MAX_ACQUIRE_RESOURCES`): two bucket items and two META checks each
/// stay under a transaction's 100 items.
pub const MAX_ACQUIRE_RESOURCES: usize = 16;

/// Each resource with its amounts, primary first.
type Parts = Vec<(String, Consume)>;

impl<S: Store + 'static> RateLimiter<S> {
    /// Admits `parts` (each a resource with its amounts, the primary first)
    /// for `entity`, all or none: the Python client's `acquire(resource,
    /// consume, also={...})`. The lease covers every resource: its own
    /// `adjust`, `consume` and `release` act on the primary, and
    /// `lease.resource(name)` reaches another. One part is `acquire` (or,
    /// with `limits`, `acquire_with_limits`); `limits` with more than one
    /// is refused, as in Python (an override names no resource).
    pub async fn acquire_many(
        &self,
        entity: &str,
        parts: &[(&str, &[(&str, i64)])],
        limits: Option<&[LimitConfig]>,
    ) -> Result<Lease<S>, Error> {
        let checked = validate_parts(entity, parts, limits.is_some())?;
        if let [(resource, consume)] = parts {
            return match limits {
                Some(limits) => {
                    self.acquire_with_limits(entity, resource, consume, limits)
                        .await
                }
                None => self.acquire(entity, resource, consume).await,
            };
        }
        self.many_scoped(entity, checked).await
    }

    /// The acquire on a task of its own (cancel-safe, as `acquire`): a
    /// lease nobody waits for any more is rolled back whole.
    async fn many_scoped(&self, entity: &str, parts: Parts) -> Result<Lease<S>, Error> {
        let this = self.clone();
        let entity = entity.to_owned();
        Self::on_own_task(async move { this.admit_many(&entity, &parts).await }).await
    }

    /// The acquire, with `on_unavailable` deciding an outage.
    async fn admit_many(&self, entity: &str, parts: &Parts) -> Result<Lease<S>, Error> {
        let shared = &self.shared;
        let mode = match shared.on_unavailable {
            Some(mode) => mode,
            None => shared.system.mode(&shared.store, &shared.namespace).await,
        };
        match self.attempt_many(entity, parts).await {
            Ok(entries) => {
                let names = parts.iter().map(|(r, _)| r.clone()).collect();
                Ok(Lease::new(Arc::clone(shared), entries).with_resources(names))
            }
            Err(Error::Unavailable(e)) if mode == OnUnavailable::Allow => {
                tracing::warn!(error = %e, "table unavailable: admitted without counting (on_unavailable = allow)");
                Ok(Lease::degraded())
            }
            Err(e) => Err(e),
        }
    }

    /// The fast path of every part at once, then the rest in one commit;
    /// every landed debit refunded when anything fails.
    async fn attempt_many(&self, entity: &str, parts: &Parts) -> Result<Vec<Entry>, Error> {
        let shared = &self.shared;
        let now = shared.now();
        let mut landed: Vec<(Vec<Entry>, &Consume)> = Vec::new();
        let mut slow = Vec::new();
        if !shared.speculative_writes {
            for (resource, consume) in parts {
                slow.push(self.slow_part(entity, resource, consume, None));
            }
        } else {
            // All of them before any write: one known short costs nothing.
            for (resource, consume) in parts {
                shared.precheck(entity, resource, consume, now)?;
            }
            let attempts = parts
                .iter()
                .map(|(r, c)| deferring(self.attempt_paths(entity, r, c)));
            let mut errors = Vec::new();
            let outcomes = futures::future::join_all(attempts).await;
            for ((resource, consume), outcome) in parts.iter().zip(outcomes) {
                match outcome {
                    (Ok(entries), _) if !entries.is_empty() => landed.push((entries, consume)),
                    (Ok(_), deferred) => {
                        slow.push(self.slow_part(entity, resource, consume, deferred));
                    }
                    (Err(e), _) => errors.push(e),
                }
            }
            if !errors.is_empty() {
                return Err(self.fast_failure(entity, errors, &landed, &slow).await);
            }
        }
        let settled = match slow.is_empty() {
            true => Vec::new(),
            false => match shared.slow_many(&slow).await {
                Ok(entries) => entries,
                Err(e) => return Err(self.slow_failure(e, &landed).await),
            },
        };
        // The fast path's resources first, as the Python lease holds them.
        let fast = landed.into_iter().flat_map(|(e, _)| e);
        Ok(fast.chain(settled).collect())
    }

    /// A part for the shared commit, on the shard its fast path chose.
    fn slow_part<'c>(
        &self,
        entity: &str,
        resource: &str,
        consume: &'c Consume,
        deferred: Option<Deferred>,
    ) -> SlowPart<'c> {
        let deferred = deferred.unwrap_or_else(|| {
            let count = self.shared.known_shards(entity, resource);
            Deferred {
                key: BucketKey {
                    namespace: self.shared.namespace.clone(),
                    entity: entity.to_owned(),
                    resource: resource.to_owned(),
                    shard: self.shared.draw(count, &[]),
                },
                parent_shard: None,
            }
        });
        SlowPart { deferred, consume }
    }

    /// Some fast path failed: every landed debit refunded, and a disabled
    /// resource the fast path did not reach looked for, when there is a
    /// rejection for it to outrank.
    async fn fast_failure(
        &self,
        entity: &str,
        mut errors: Vec<Error>,
        landed: &[(Vec<Entry>, &Consume)],
        slow: &[SlowPart<'_>],
    ) -> Error {
        self.refund_all(landed).await;
        let rejected = errors
            .iter()
            .any(|e| matches!(e, Error::RateLimitExceeded(_)));
        let disabled = errors
            .iter()
            .any(|e| matches!(e, Error::ResourceDisabled { .. }));
        if rejected && !disabled {
            let resources: Vec<&str> = slow
                .iter()
                .map(|p| p.deferred.key.resource.as_str())
                .collect();
            if let Some(found) = self.find_disabled(entity, &resources).await {
                errors.push(found);
            }
        }
        combined(errors, landed_statuses(landed, self.shared.now()))
    }

    /// The shared commit failed: every fast-path debit refunded, and their
    /// statuses added to a rejection.
    async fn slow_failure(&self, error: Error, landed: &[(Vec<Entry>, &Consume)]) -> Error {
        self.refund_all(landed).await;
        match error {
            Error::RateLimitExceeded(mut r) => {
                r.statuses
                    .extend(landed_statuses(landed, self.shared.now()));
                Error::RateLimitExceeded(r)
            }
            other => other,
        }
    }

    /// Every landed debit taken back at once; a failed refund is logged
    /// (as a rollback's), never raised over the error that caused it.
    async fn refund_all(&self, landed: &[(Vec<Entry>, &Consume)]) {
        let refunds = landed
            .iter()
            .flat_map(|(entries, _)| entries)
            .map(|e| self.shared.refund(e));
        futures::future::join_all(refunds).await;
    }

    /// The first of `resources` disabled for `entity` (or, when it cascades
    /// there, for its parent): a resource with no bucket yet is found
    /// disabled only by a read. A failed read ends the search with none.
    async fn find_disabled(&self, entity: &str, resources: &[&str]) -> Option<Error> {
        let shared = &self.shared;
        let resolve = |who: String, resource: String| async move {
            let ns = &shared.namespace;
            match config::resolve(&shared.store, &shared.system, ns, &who, &resource).await {
                Ok(resolved) => Ok(Some(resolved)),
                Err(Error::NoLimits { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        };
        for resource in resources {
            let Some(resolved) = resolve(entity.to_owned(), resource.to_string())
                .await
                .ok()?
            else {
                continue;
            };
            if let Some(found) = disabled_error(entity, resource, &resolved) {
                return Some(found);
            }
            if resolved.cascade == Some(false) {
                continue;
            }
            let meta_pk = keys::pk_entity(&shared.namespace, entity);
            let item = shared.store.get(&meta_pk, SK_META, true).await.ok()?;
            let meta = item.as_ref().map(Meta::read);
            let parent = meta.as_ref().and_then(|m| m.parent_id.clone());
            let Some(parent) = parent.filter(|_| cascades(&resolved, meta.as_ref())) else {
                continue;
            };
            let Some(presolved) = resolve(parent.clone(), resource.to_string()).await.ok()? else {
                continue;
            };
            if let Some(found) = disabled_error(&parent, resource, &presolved) {
                return Some(found);
            }
        }
        None
    }
}

/// `ResourceDisabled` when the resolved config says so.
fn disabled_error(entity: &str, resource: &str, resolved: &config::Resolved) -> Option<Error> {
    match &resolved.disabled {
        Some((Disabled::Yes, level)) => Some(Error::ResourceDisabled {
            entity: entity.to_owned(),
            resource: resource.to_owned(),
            level: level.kind().to_owned(),
        }),
        _ => None,
    }
}

/// The passed statuses of the resources admitted on the way to a failure.
fn landed_statuses(landed: &[(Vec<Entry>, &Consume)], now: i64) -> Vec<LimitStatus> {
    landed
        .iter()
        .flat_map(|(entries, consume)| admitted_statuses(entries, consume, now))
        .collect()
}

/// The parts as the Python client checks them before any request: amounts
/// and names, at most 16 resources, each once, and no `limits=` beside
/// more than one.
fn validate_parts(
    entity: &str,
    parts: &[(&str, &[(&str, i64)])],
    with_limits: bool,
) -> Result<Parts, Error> {
    let Some(((primary, _), also)) = parts.split_first() else {
        return Err(Error::Validation(
            "acquire_many needs at least one resource".into(),
        ));
    };
    let invalid = |reason: String| Error::Validation(format!("Invalid also: {reason}"));
    if !also.is_empty() && with_limits {
        return Err(invalid(
            "cannot be combined with limits=; a limits override has no resource".into(),
        ));
    }
    if parts.len() > MAX_ACQUIRE_RESOURCES {
        return Err(invalid(format!(
            "at most {MAX_ACQUIRE_RESOURCES} resources per acquire, got {}",
            parts.len()
        )));
    }
    let mut out: Parts = Vec::with_capacity(parts.len());
    for (resource, consume) in parts {
        let checked = validate(entity, resource, consume)?;
        if out.iter().any(|(r, _)| r == resource) {
            let what = match resource == primary {
                true => "names the primary resource",
                false => "names a resource twice",
            };
            return Err(invalid(format!("{what}; each resource appears once")));
        }
        out.push(((*resource).to_owned(), checked));
    }
    Ok(out)
}
