//! Soft-limit overdraw: a soft limit's balance crossing zero on one bucket
//! shard, in either direction, is a transition the aggregator records.

use zae_table::audit::Action;
use zae_table::{BucketKey, LimitState, SequenceNumber};

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
}

/// The transition, if any, between a limit's state before and after a
/// record. A limit made hard while in debt still closes its overdraw.
pub fn transition_between(before: &LimitState, now: &LimitState) -> Option<TransitionKind> {
    let new_balance = now.balance?;
    let was_in_debt = before.balance.is_some_and(|b| b < 0);
    match (was_in_debt, new_balance < 0) {
        (false, true) if now.soft => Some(TransitionKind::Overdrawn),
        (true, false) if now.soft || before.soft => Some(TransitionKind::Recovered),
        _ => None,
    }
}
