//! The slow path (§3 of the protocol): read config, the owner's META and
//! the bucket; refill; write once, conditionally. Two buckets (a cascade)
//! are one transaction. Its modules, in a pass's order:
//! - `read`: each bucket's config, META and item (the parent's too, in a
//!   cascade);
//! - `plan`: each bucket's write (pure), and here the pass's rejection
//!   when a hard limit is short, with its stale stamps corrected;
//! - `bypass`: the counted write of a bucket bypassed by config and stamp;
//! - `commit`: the write, conflicts resent, and after a lost lock the
//!   consumption alone (§3.5);
//! - `many`: several resources' passes (`acquire_many`), planned each as
//!   here and committed in one transaction.
//!
//! Like the fast path's, its I/O is `impl Shared` blocks (see `fast`).

mod bypass;
mod commit;
pub(crate) mod many;
pub(crate) mod plan;
mod read;

use crate::bucket::BucketView;
use crate::config::Resolved;
use crate::error::{Error, RateLimitExceeded};
use crate::lease::Outcome;
use crate::rejection::plan_statuses;
use crate::shared::Shared;
use crate::status::Consume;
use plan::{Pass, Planned, Stamps};
use zae_table::entity::Meta;
use zae_table::keys::BucketKey;
use zae_table::store::{Returns, Store, StoreError};

/// What the slow path read for one bucket.
pub(crate) struct Target {
    resolved: Resolved,
    meta: Option<Meta>,
    view: Option<BucketView>,
}

/// A slow path plans at most twice (a create that lost its race, once).
const SLOW_PASSES: usize = 2;

impl<S: Store + 'static> Shared<S> {
    /// The slow path on `key`'s shard, with the parent's bucket in the same
    /// commit when `cascade` and the entity's META and config say so. A
    /// create that lost to a changed META (or, in a cascade, any lost
    /// create) is planned again once from fresh reads.
    pub(crate) async fn slow(&self, key: &BucketKey, consume: &Consume, cascade: bool) -> Outcome {
        self.slow_pinned(key, consume, cascade, None).await
    }

    /// The slow path with the parent's bucket on `parent_shard` (a shard a
    /// doubling just added, which nothing else creates) when the entity's
    /// META still names that parent; else on a shard drawn as usual.
    pub(crate) async fn slow_pinned(
        &self,
        key: &BucketKey,
        consume: &Consume,
        cascade: bool,
        parent_shard: Option<&BucketKey>,
    ) -> Outcome {
        // Inside a multi-resource acquire the resource's slow pass is
        // planned there, with the others, into one transaction (`many`).
        if cascade && many::defer(key, parent_shard) {
            return Ok(Vec::new());
        }
        for pass in 0..SLOW_PASSES {
            let now_plan = self.now();
            // A re-plan reads META and the buckets strongly consistent.
            let targets = self
                .read_targets(key, cascade, pass > 0, parent_shard)
                .await?;
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

    /// Each bucket's write, judged on what was read; a rejection when any
    /// hard limit is short (its stale stamps corrected first).
    async fn plan(
        &self,
        targets: &[(BucketKey, Target)],
        consume: &Consume,
        now_plan: i64,
    ) -> Result<Vec<Planned>, Error> {
        let shared = self;
        let now_commit = shared.now();
        let deadline = |now: i64| shared.deadline(now);
        let stamps = Stamps {
            deadline: &deadline,
            ttl_multiplier: shared.ttl_multiplier,
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
            .map(|(k, t)| {
                let pass = Pass {
                    resolved: &t.resolved,
                    meta: t.meta.as_ref(),
                    consume,
                    now_plan,
                    now_commit,
                    stamps,
                };
                match &t.view {
                    Some(view) if t.resolved.bypassed() && view.bypass_present => {
                        bypass::plan_counted(k, view, pass)
                    }
                    Some(view) => plan::plan_update(k, view, pass),
                    None => plan::plan_create(k, shared.known_shards(&k.entity, &k.resource), pass),
                }
            })
            .collect();
        if plans.iter().all(|p| p.admitted) {
            return Ok(plans);
        }
        self.fix_stamps(targets, now_plan, stamps).await;
        let statuses = plans
            .iter()
            .zip(targets)
            // A bypassed bucket is judged on nothing: it lists no statuses.
            .filter(|(p, _)| !p.bypassed)
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
            let Some(fix) = plan::stamp_fix(key, view, &target.resolved, now, stamps) else {
                continue;
            };
            match self.store.update(&fix, Returns::Nothing).await {
                Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                Err(e) => {
                    tracing::warn!(bucket = %key.pk(), error = %e, "a stamp correction failed")
                }
            }
        }
    }
}
