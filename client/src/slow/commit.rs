//! A slow pass's write: one bucket alone, two (a cascade) in one
//! transaction, conflicts resent; after a lost lock, the consumption alone
//! (§3.5), and a rejection judged on the buckets read again.

use super::Target;
use super::plan::{Planned, milli};
use crate::bucket::BucketView;
use crate::error::{Error, RateLimitExceeded};
use crate::lease::{Entry, Outcome, entry};
use crate::rejection::{contended, image_statuses, rejection};
use crate::shared::{CONFLICT_WAITS_MS, Shared, conflict_wait};
use crate::status::Consume;
use zae_table::Attr;
use zae_table::bucket::{field, limit_attr};
use zae_table::entity::create_check;
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::store::{Store, StoreError, TxWrite, Update, UpdateBuilder, Updated};

impl<S: Store + 'static> Shared<S> {
    /// Writes the plans: one bucket alone, several in one transaction;
    /// conflicts resent, a lost lock retried with the consumption alone.
    /// `None`: plan again (a create lost its race, and this was not the
    /// `last` pass).
    pub(super) async fn commit(
        &self,
        plans: &[Planned],
        targets: &[(BucketKey, Target)],
        consume: &Consume,
        now: i64,
        last: bool,
    ) -> Option<Outcome> {
        let store = &self.store;
        let mut writes = Vec::new();
        for (plan, (key, target)) in plans.iter().zip(targets) {
            writes.push(plan.write.clone());
            if matches!(plan.write, TxWrite::Put { .. }) {
                writes.push(create_check(
                    &self.namespace,
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
                Err(StoreError::ConditionFailed { .. } | StoreError::Cancelled { .. })
                    if plans.iter().any(|p| p.bypassed && p.view.is_some()) =>
                {
                    // A bypass lifted since the config read: plan again, from
                    // fresh reads (enforced now), never a debit on a guess.
                    if !last {
                        return None;
                    }
                    break;
                }
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
        let store = &self.store;
        let updates: Vec<_> = plans
            .iter()
            .zip(targets)
            .map(|(p, (_, t))| {
                let taken: Consume = consume
                    .iter()
                    .filter(|(n, a)| **a > 0 && p.after.contains_key(*n))
                    .map(|(n, a)| (n.clone(), *a))
                    .collect();
                consumption_update(&p.key, &taken, &|n| t.resolved.is_soft(n), now)
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
                        return Err(rejection(&plans[0].key, &view, consume, now));
                    }
                    Ok(_) => Err(StoreError::ConditionFailed {
                        operation: "UpdateItem",
                        key: plans[0].key.pk(),
                    }),
                    Err(e) => Err(e),
                }
            } else {
                // A bucket that takes none of the consumed limits has nothing
                // to write, and DynamoDB refuses an empty Update.
                let writes: Vec<TxWrite> = updates
                    .iter()
                    .filter(|u| !u.expression.is_empty())
                    .cloned()
                    .map(TxWrite::Update)
                    .collect();
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
            match self.store.get(&plan.key.pk(), SK_STATE, true).await {
                Ok(Some(item)) => statuses.extend(image_statuses(
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

/// The lease's view of a planned bucket: the balances this pass computed,
/// refilled where its refill reached (as the Python lease holds them).
pub(super) fn entry_from_plan(plan: &Planned, consume: &Consume, now: i64) -> Entry {
    let mut entry = Entry {
        quoted: plan.quoted.clone(),
        rf: plan.rf,
        refilled_at: plan.refilled_at.clone(),
        shard_count: plan.shard_count,
        bypassed: plan.bypassed,
        vu: plan.vu,
        schedules: plan.schedules.clone(),
        sched: plan.sched.clone(),
        ..entry(&plan.key, &plan.after, consume, now)
    };
    // Under `limits=` the override says which limits are soft, stamp or not.
    if let Some(limits) = crate::overrides::current() {
        entry.soft = entry
            .limits
            .keys()
            .filter(|n| limits.iter().any(|l| &l.name == *n && l.soft))
            .cloned()
            .collect();
    }
    entry
}

/// The consumption alone, after a lost lock (§3.5): no refill, no stamps;
/// each hard limit must still hold the amount, or a live soft stamp waive
/// it. A limit the config just read says is soft needs only to be there.
fn consumption_update(
    key: &BucketKey,
    taken: &Consume,
    soft: &dyn Fn(&str) -> bool,
    now: i64,
) -> Update {
    let mut b = UpdateBuilder::new();
    let mut conditions = Vec::new();
    let now_value = b.value(Attr::n(now));
    for (name, amount) in taken {
        let wanted = milli(*amount);
        let tk = b.name(&limit_attr(name, field::TOKENS));
        let cp = b.name(&limit_attr(name, field::CAPACITY));
        b.add(&limit_attr(name, field::TOKENS), Attr::n(-wanted));
        b.add(&limit_attr(name, field::CONSUMED), Attr::n(wanted));
        let present = format!("attribute_exists({cp}) AND attribute_exists({tk})");
        if soft(name) {
            conditions.push(present);
            continue;
        }
        let stamp = b.name(&limit_attr(name, field::SOFT));
        let floor = b.value(Attr::n(wanted));
        conditions.push(format!(
            "({tk} >= {floor} OR ({stamp} > {now_value} AND {present}))"
        ));
    }
    let condition = (!conditions.is_empty()).then(|| conditions.join(" AND "));
    b.build(&key.pk(), SK_STATE, condition)
}
