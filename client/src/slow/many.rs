//! Several resources' slow passes in one commit (`acquire_many`, the
//! 0.17.0 client's `also=`): each resource the fast path could not settle
//! is read and planned as its own slow pass would be, and every plan is
//! written in one TransactWriteItems, all or none. At most 16 resources of
//! at most two buckets and two META checks each: 64 items, under
//! DynamoDB's 100 (no quota moves ride here).

use super::commit::entry_from_plan;
use super::plan::{Planned, Stamps};
use super::{SLOW_PASSES, Target};
use crate::error::{Error, RateLimitExceeded};
use crate::lease::Entry;
use crate::rejection::contended;
use crate::shared::{CONFLICT_WAITS_MS, Shared, conflict_wait};
use crate::status::Consume;
use std::future::Future;
use std::sync::{Arc, Mutex};
use zae_table::entity::create_check;
use zae_table::keys::BucketKey;
use zae_table::store::{Store, StoreError, TxWrite};

/// A resource's slow pass a multi-resource acquire took over: the shard
/// the fast path chose, and a parent shard a doubling added.
#[derive(Clone, Debug)]
pub(crate) struct Deferred {
    pub(crate) key: BucketKey,
    pub(crate) parent_shard: Option<BucketKey>,
}

type Slot = Arc<Mutex<Option<Deferred>>>;

tokio::task_local! {
    static SLOT: Slot;
}

/// Runs one resource's attempt; the slow pass it reached, if any, is
/// answered `Ok` with no entries and handed back here, not run.
pub(crate) async fn deferring<F: Future>(work: F) -> (F::Output, Option<Deferred>) {
    let slot = Slot::default();
    let out = SLOT.scope(Arc::clone(&slot), work).await;
    let deferred = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    (out, deferred)
}

/// Keeps the pass for the multi-resource commit, when one is running.
pub(super) fn defer(key: &BucketKey, parent_shard: Option<&BucketKey>) -> bool {
    SLOT.try_with(|slot| {
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(Deferred {
            key: key.clone(),
            parent_shard: parent_shard.cloned(),
        });
    })
    .is_ok()
}

/// One resource for the shared commit.
pub(crate) struct SlowPart<'a> {
    pub(crate) deferred: Deferred,
    pub(crate) consume: &'a Consume,
}

/// One resource as read and planned.
struct PlannedPart<'a> {
    targets: Vec<(BucketKey, Target)>,
    plans: Vec<Planned>,
    consume: &'a Consume,
}

impl<S: Store + 'static> Shared<S> {
    /// Every part planned as its own slow pass, committed in one
    /// transaction. A rejected, disabled or failed part fails them all,
    /// with the statuses the others planned (nothing written). One part
    /// alone is the single-resource slow path, consumption-only retry and
    /// all.
    pub(crate) async fn slow_many(&self, parts: &[SlowPart<'_>]) -> Result<Vec<Entry>, Error> {
        if let [part] = parts {
            let d = &part.deferred;
            return self
                .slow_pinned(&d.key, part.consume, true, d.parent_shard.as_ref())
                .await;
        }
        for pass in 0..SLOW_PASSES {
            let now = self.now();
            let planned = self.plan_parts(parts, pass > 0, now).await?;
            let last = pass + 1 == SLOW_PASSES;
            if let Some(done) = self.commit_parts(&planned, now, last).await {
                return done;
            }
        }
        Err(Error::Unavailable(StoreError::Retryable {
            operation: "TransactWriteItems",
            key: parts
                .first()
                .map(|p| p.deferred.key.pk())
                .unwrap_or_default(),
            message: "every planned create lost to another writer".into(),
        }))
    }

    /// Reads (concurrently) and plans each part; on any failure the parts
    /// that planned correct their stale stamps alone, as a rejected pass
    /// does, and the failures are combined with their statuses.
    async fn plan_parts<'p>(
        &self,
        parts: &'p [SlowPart<'p>],
        consistent: bool,
        now: i64,
    ) -> Result<Vec<PlannedPart<'p>>, Error> {
        let reads = futures::future::join_all(parts.iter().map(|p| {
            let d = &p.deferred;
            self.read_targets(&d.key, true, consistent, d.parent_shard.as_ref())
        }))
        .await;
        let (mut planned, mut errors) = (Vec::new(), Vec::new());
        for (part, read) in parts.iter().zip(reads) {
            let targets = match read {
                Ok(targets) => targets,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            match self.plan(&targets, part.consume, now).await {
                Ok(plans) => planned.push(PlannedPart {
                    targets,
                    plans,
                    consume: part.consume,
                }),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            return Ok(planned);
        }
        let deadline = |now: i64| self.deadline(now);
        let stamps = Stamps {
            deadline: &deadline,
            ttl_multiplier: self.ttl_multiplier,
        };
        let mut admitted = Vec::new();
        for part in &planned {
            self.fix_stamps(&part.targets, now, stamps).await;
            let entries: Vec<Entry> = part
                .plans
                .iter()
                .map(|p| entry_from_plan(p, part.consume, now))
                .collect();
            admitted.extend(crate::rejection::admitted_statuses(
                &entries,
                part.consume,
                now,
            ));
        }
        Err(crate::rejection::combined(errors, admitted))
    }

    /// The plans in one transaction, conflicts resent. `None`: plan again
    /// (a lock or a create lost to another writer; which bucket is not
    /// known). On the last pass that loss is a contended rejection.
    async fn commit_parts(
        &self,
        planned: &[PlannedPart<'_>],
        now: i64,
        last: bool,
    ) -> Option<Result<Vec<Entry>, Error>> {
        let writes = self.part_writes(planned);
        for attempt in 0..=CONFLICT_WAITS_MS.len() {
            match self.store.transact(&writes).await {
                Ok(()) => {
                    let entries = planned.iter().flat_map(|part| {
                        part.plans
                            .iter()
                            .map(|p| entry_from_plan(p, part.consume, now))
                    });
                    return Some(Ok(entries.collect()));
                }
                Err(e) if e.is_conflict() => conflict_wait(attempt).await,
                Err(StoreError::ConditionFailed { .. } | StoreError::Cancelled { .. }) if !last => {
                    return None;
                }
                Err(StoreError::ConditionFailed { .. } | StoreError::Cancelled { .. }) => break,
                Err(e) => return Some(Err(Error::store(e))),
            }
        }
        let statuses = planned
            .iter()
            .flat_map(|part| match contended(&part.plans, part.consume, now) {
                Error::RateLimitExceeded(r) => r.statuses,
                _ => Vec::new(),
            })
            .collect();
        Some(Err(Error::RateLimitExceeded(RateLimitExceeded {
            statuses,
            contended: true,
        })))
    }

    /// Each plan's write, and its owner's META check beside the first
    /// create of each owner (a transaction names an item once).
    fn part_writes(&self, planned: &[PlannedPart<'_>]) -> Vec<TxWrite> {
        let mut writes = Vec::new();
        let mut checked = std::collections::HashSet::new();
        for part in planned {
            for (plan, (key, target)) in part.plans.iter().zip(&part.targets) {
                writes.push(plan.write.clone());
                let create = matches!(plan.write, TxWrite::Put { .. });
                if create && checked.insert(key.entity.clone()) {
                    let meta = target.meta.as_ref();
                    writes.push(create_check(&self.namespace, &key.entity, meta));
                }
            }
        }
        writes
    }
}
