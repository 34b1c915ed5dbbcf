//! The errors an acquire refuses with, and the statuses a rejection
//! lists: judged on a bucket image (the fast path's refusal, a bucket read
//! again), on a slow pass's plan, or passed whole when other writers held
//! the bucket (`contended`).

use crate::bucket::BucketView;
use crate::config::Resolved;
use crate::error::{CONTENDED_RETRY_MS, Error, Feature, LimitStatus, RateLimitExceeded};
use crate::lease::{Entry, entry_statuses};
use crate::slow::plan::Planned;
use crate::status::{self, Consume};
use std::collections::BTreeMap;
use zae_table::keys::BucketKey;
use zae_table::milli::MILLI;

pub(crate) fn disabled(key: &BucketKey, level: &str) -> Error {
    Error::ResourceDisabled {
        entity: key.entity.clone(),
        resource: key.resource.clone(),
        level: level.to_owned(),
    }
}

pub(crate) fn unsupported(key: &BucketKey, feature: Feature) -> Error {
    Error::Unsupported {
        feature,
        entity: key.entity.clone(),
        resource: key.resource.clone(),
        at: format!("bucket item {}", key.pk()),
    }
}

/// Statuses of a bucket as an image shows it (its own soft stamps).
pub(crate) fn image_statuses(
    key: &BucketKey,
    view: &BucketView,
    consume: &Consume,
    now: i64,
) -> Vec<LimitStatus> {
    let soft = |n: &str| view.limits.get(n).is_some_and(|l| l.soft_present);
    let by_bucket = BTreeMap::new();
    let who = (key.entity.as_str(), key.resource.as_str());
    status::declared(
        status::statuses(who, view, consume, (&soft, &by_bucket), now),
        consume,
    )
}

/// A rejection judged on one image.
pub(crate) fn rejection(key: &BucketKey, view: &BucketView, consume: &Consume, now: i64) -> Error {
    Error::RateLimitExceeded(RateLimitExceeded {
        statuses: image_statuses(key, view, consume, now),
        contended: false,
    })
}

/// A cascade's parent refused a debit its child's bucket took: both
/// buckets' statuses, the child's judged on its live soft stamps.
pub(crate) fn cascade(
    (key, view): (&BucketKey, &BucketView),
    (pkey, pview): (&BucketKey, &BucketView),
    consume: &Consume,
    now: i64,
) -> Error {
    let soft = |n: &str| view.limits.get(n).is_some_and(|l| l.soft_live(now));
    let by_bucket = BTreeMap::new();
    let mut statuses = status::declared(
        status::statuses(
            (&key.entity, &key.resource),
            view,
            consume,
            (&soft, &by_bucket),
            now,
        ),
        consume,
    );
    statuses.extend(image_statuses(pkey, pview, consume, now));
    Error::RateLimitExceeded(RateLimitExceeded {
        statuses,
        contended: false,
    })
}

/// Other writers held the bucket: nothing judged, every status passed,
/// each quoting the contention wait.
pub(crate) fn contended_on(
    key: &BucketKey,
    view: &BucketView,
    consume: &Consume,
    now: i64,
) -> Error {
    // Each limit quotes the contention wait, as the 0.17.0 client's body.
    let mut statuses = image_statuses(key, view, consume, now);
    for status in &mut statuses {
        (status.exceeded, status.retry_after_ms) = (false, CONTENDED_RETRY_MS);
    }
    Error::RateLimitExceeded(RateLimitExceeded {
        statuses,
        contended: true,
    })
}

/// A slow pass's write met other writers to the end: every planned limit
/// passed, as the plan judged it.
pub(crate) fn contended(plans: &[Planned], consume: &Consume, now: i64) -> Error {
    let statuses = plans
        .iter()
        .flat_map(|p| {
            let statuses: Vec<LimitStatus> = p
                .after
                .iter()
                .map(|(name, l)| {
                    // The configured limit this pass judged by, as elsewhere.
                    let q = status::Quoted::of(p.quoted.get(name), l).per_shard(p.shard_count);
                    let schedule = p.schedules.get(name).map(|s| &**s);
                    let resets_at = crate::bucket::reset_instant(l, schedule, now);
                    LimitStatus {
                        entity: p.key.entity.clone(),
                        resource: p.key.resource.clone(),
                        limit: name.clone(),
                        available: (l.tk + consume.get(name).copied().unwrap_or_default() * MILLI)
                            .div_euclid(MILLI),
                        requested: consume.get(name).copied().unwrap_or_default(),
                        exceeded: false,
                        retry_after_ms: CONTENDED_RETRY_MS,
                        soft: l.soft_present,
                        capacity: q.capacity,
                        refill_amount: q.refill_amount,
                        refill_period_s: q.refill_period_s,
                        quota: resets_at.is_some(),
                        resets_at_ms: resets_at.flatten(),
                    }
                })
                .collect();
            status::declared(statuses, consume)
        })
        .collect();
    Error::RateLimitExceeded(RateLimitExceeded {
        statuses,
        contended: true,
    })
}

/// Statuses of a planned bucket, judged as the plan judged it.
pub(crate) fn plan_statuses(
    key: &BucketKey,
    plan: &Planned,
    resolved: &Resolved,
    consume: &Consume,
    now: i64,
) -> Vec<LimitStatus> {
    let mut statuses = status::declared(
        plan_statuses_all(key, plan, resolved, consume, now),
        consume,
    );
    // Under `limits=` the item limits the override does not name are
    // carried, never judged: no status.
    if resolved.from_override {
        statuses.retain(|s| resolved.limit(&s.limit).is_some());
    }
    statuses
}

fn plan_statuses_all(
    key: &BucketKey,
    plan: &Planned,
    resolved: &Resolved,
    consume: &Consume,
    now: i64,
) -> Vec<LimitStatus> {
    let soft = |n: &str| resolved.is_soft(n);
    let who = (key.entity.as_str(), key.resource.as_str());
    match &plan.view {
        Some(view) => {
            let mut view = view.clone();
            // An enforced pass enforces: a stamp config does not back waives nothing.
            view.bypass = None;
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

/// Each entry's statuses as admitted: its state after the debit, refilled
/// to `now`, nothing exceeded.
pub(crate) fn admitted_statuses(
    entries: &[Entry],
    consume: &Consume,
    now: i64,
) -> Vec<LimitStatus> {
    let mut statuses: Vec<LimitStatus> = entries
        .iter()
        .flat_map(|e| status::declared(entry_statuses(e, consume, now), consume))
        .collect();
    for status in &mut statuses {
        (status.exceeded, status.retry_after_ms) = (false, 0);
    }
    statuses
}

/// The one error of a multi-resource acquire: `ResourceDisabled` outranks
/// a rejection, which outranks the rest; every rejection's statuses are
/// raised together with the admitted ones, so the wait is until every
/// resource admits. Among the rest a permission denial outranks an outage
/// (which `OnUnavailable::Allow` would admit unlimited).
pub(crate) fn combined(mut errors: Vec<Error>, admitted: Vec<LimitStatus>) -> Error {
    if let Some(i) = errors
        .iter()
        .position(|e| matches!(e, Error::ResourceDisabled { .. }))
    {
        return errors.swap_remove(i);
    }
    let mut statuses = Vec::new();
    let mut contended = true;
    let mut rejected = false;
    for e in &errors {
        if let Error::RateLimitExceeded(r) = e {
            statuses.extend(r.statuses.iter().cloned());
            contended &= r.contended;
            rejected = true;
        }
    }
    if rejected {
        statuses.extend(admitted);
        return Error::RateLimitExceeded(RateLimitExceeded {
            statuses,
            contended,
        });
    }
    let denied = errors
        .iter()
        .position(|e| matches!(e, Error::PermissionDenied(_)));
    errors.swap_remove(denied.unwrap_or(0))
}
