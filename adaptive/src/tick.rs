//! A factor target's tick, decided from what the controller read: the law
//! it is evaluated under, each minute's observation, the estimator the
//! target carries, and whether (and why) the target moves. The controller
//! reads the minutes and writes the target and its stamps.

use crate::estimator::{Decision, Estimator, Law, Observation, Reason};
use crate::law::Factor;
use zae_table::adaptive::Declaration;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::usage::{MINUTE_MS, TAILS_PER_MINUTE, minute_of};

/// Minutes a target catches up on at most: older ones say little now.
pub const CATCH_UP: i64 = 3;

/// The law a (resource, limit) ticks under: its target utilization, and
/// `max`, the most any opted-in level scales.
pub fn law(declaration: &Declaration, resource: &str, limit: &str, max: Factor) -> Law {
    Law {
        target: declaration.target_utilization(resource, limit),
        max_factor: max.as_f64(),
    }
}

/// The estimated capacity a (resource, limit)'s use is measured against,
/// tokens per minute (at least one).
pub fn capacity(declaration: &Declaration, resource: &str, limit: &str) -> i64 {
    declaration.capacity(resource, limit).unwrap_or(1).max(1)
}

/// A minute's utilization: `used` millitokens over `capacity` tokens.
pub fn utilization(used: i64, capacity: i64) -> f64 {
    used as f64 / (capacity as f64 * 1000.0)
}

/// What the estimator observes of the minute starting at `minute`: its
/// utilization, the factor `target` had in force over it, and its last
/// third's use (`tail`, millitokens) as a rate per minute.
pub fn observation(
    target: &Target,
    minute: i64,
    utilization: f64,
    tail: Option<i64>,
    capacity: i64,
) -> Observation {
    let (factor, mixed) = target.in_force(minute, minute + MINUTE_MS);
    let tail =
        tail.map(|used| used.saturating_mul(TAILS_PER_MINUTE) as f64 / (capacity as f64 * 1000.0));
    Observation {
        utilization,
        factor,
        mixed,
        tail,
    }
}

/// The factor a tick moves a factor target to (not under `share: demand`,
/// whose own factor stays at one): the estimator's, within `max`, when it
/// decided a move and that is not where the target already is.
pub fn moves_to(
    estimator: &Estimator,
    decision: &Decision,
    max: Factor,
    target: &Target,
    demand: bool,
) -> Option<Factor> {
    let wanted = Factor::from_f64(estimator.factor).min(max);
    let moved = !demand && matches!(decision, Decision::Move(_)) && wanted != target.factor;
    moved.then_some(wanted)
}

/// A move is named by where it goes (minutes caught up on in one tick can
/// cross), unless it is a surge, a spike or blindness.
pub fn move_reason(estimator: &Estimator, wanted: Factor, target: &Target) -> &'static str {
    match estimator.reason {
        Reason::Raise | Reason::Cut if wanted > target.factor => "raise",
        Reason::Raise | Reason::Cut => "cut",
        other => other.name(),
    }
}

/// The target's estimator; the target is the truth, so a reset (or a state
/// that does not read back) starts from its factor.
pub fn estimator_of(target: &Target) -> Estimator {
    let estimator: Estimator = target
        .state
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    if Factor::from_f64(estimator.factor) == target.factor {
        return estimator;
    }
    Estimator {
        factor: target.factor.as_f64(),
        reason: Reason::Start,
        ..Estimator::default()
    }
}

/// A new target. Its first minute starts after every aggregator has read
/// the declaration that made it (`declaration_ttl_ms`, their cache): the
/// minutes before may not have been sensed at all.
pub fn first_target(resource: &str, limit: &str, now_ms: i64, declaration_ttl_ms: i64) -> Target {
    let mut base = Target::base(resource, limit);
    base.minute_ms = minute_of(now_ms + declaration_ttl_ms);
    base
}

#[cfg(test)]
mod tests;
