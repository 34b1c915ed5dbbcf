//! Soft-limit overdraw: a soft limit's balance crossing zero on one bucket
//! shard, in either direction, is a transition the aggregator records. An
//! overdraw also closes when its limit stops being soft or leaves the bucket,
//! so none stays open for ever.

use zae_table::audit::Action;
use zae_table::milli::whole_tokens;
use zae_table::names::WCU_LIMIT;
use zae_table::{BucketImage, BucketKey, LimitState, SequenceNumber};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionKind {
    Overdrawn,
    Recovered,
}

impl TransitionKind {
    pub fn action(self) -> Action {
        match self {
            TransitionKind::Overdrawn => Action::LimitOverdrawn,
            TransitionKind::Recovered => Action::LimitRecovered,
        }
    }
    pub fn metric(self) -> &'static str {
        match self {
            TransitionKind::Overdrawn => "SoftLimitOverdrawn",
            TransitionKind::Recovered => "SoftLimitRecovered",
        }
    }
}

/// A soft limit crossing zero on one bucket shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub kind: TransitionKind,
    pub bucket: BucketKey,
    pub limit: String,
    pub sequence: SequenceNumber,
    pub at_ms: i64,
    /// Whole tokens, floored.
    pub balance: i64,
    pub capacity: Option<i64>,
    pub shard_count: Option<i64>,
    /// Why an overdraw closed with the balance still in debt.
    pub reason: Option<&'static str>,
}

/// The limit is now hard: its debt is no overdraw any more.
pub const NO_LONGER_SOFT: &str = "no_longer_soft";
/// The limit left the bucket (its level dropped it).
pub const LIMIT_REMOVED: &str = "limit_removed";

/// The transition, if any, between a limit's state before and after a
/// record (`now` is `None` when the limit left the bucket), with the reason
/// when an overdraw closes in debt. A limit made hard while in debt closes
/// its overdraw, and so does a soft limit removed while in debt.
pub fn transition_between(
    before: &LimitState,
    now: Option<&LimitState>,
) -> Option<(TransitionKind, Option<&'static str>)> {
    let was_in_debt = before.balance.is_some_and(|b| b < 0);
    let Some(now) = now else {
        return (was_in_debt && before.soft)
            .then_some((TransitionKind::Recovered, Some(LIMIT_REMOVED)));
    };
    let new_balance = now.balance?;
    match (was_in_debt, new_balance < 0) {
        (false, true) if now.soft => Some((TransitionKind::Overdrawn, None)),
        (true, false) if now.soft || before.soft => Some((TransitionKind::Recovered, None)),
        (true, true) if before.soft && !now.soft => {
            Some((TransitionKind::Recovered, Some(NO_LONGER_SOFT)))
        }
        _ => None,
    }
}

/// Every transition between two images of one bucket shard: the limits of
/// the new image, then the ones the record removed.
pub fn transitions(
    bucket: &BucketKey,
    sequence: &SequenceNumber,
    at_ms: i64,
    old: &BucketImage<'_>,
    new: &BucketImage<'_>,
) -> Vec<Transition> {
    let now = new
        .limits
        .iter()
        .map(|(limit, state)| (*limit, Some(state)));
    let removed = old
        .limits
        .keys()
        .filter(|limit| !new.limits.contains_key(*limit))
        .map(|limit| (*limit, None));
    let mut found = Vec::new();
    for (limit, now) in now.chain(removed) {
        if limit == WCU_LIMIT {
            continue;
        }
        let before = old.limit(limit).copied().unwrap_or_default();
        let Some((kind, reason)) = transition_between(&before, now) else {
            continue;
        };
        let last = now.unwrap_or(&before);
        found.push(Transition {
            kind,
            bucket: bucket.clone(),
            limit: limit.to_owned(),
            sequence: sequence.clone(),
            at_ms,
            balance: whole_tokens(last.balance.unwrap_or_default()),
            capacity: last.capacity.map(whole_tokens),
            shard_count: new.shard_count,
            reason,
        });
    }
    found
}
