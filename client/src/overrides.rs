//! `limits=`: a caller's own limits for one acquire (§1.5 and §10 of the
//! protocol), as the 0.17.0 client takes them. They replace every config
//! level's limits for this acquire, on the entity's bucket and its
//! parent's; `disabled`, bypass and cascade still come from config. An
//! existing bucket keeps its stored parameters (the override shapes only
//! what this acquire creates or seeds), and keeps the limits the override
//! does not name, refilled as any pass refills them but never gated.
//! Soft-ness is the override's for this acquire and stamped on nothing.
//!
//! The override rides in a task-local scoped around the acquire, so the
//! paths that resolve limits (`config::resolve`, reached from every fast
//! path's fall to the slow path) read it without each threading it.

use crate::error::Error;
use crate::status::Consume;
use std::future::Future;
use std::sync::Arc;
use zae_table::config::LimitConfig;
use zae_table::names::{self, WCU_LIMIT};

tokio::task_local! {
    static LIMITS: Option<Arc<[LimitConfig]>>;
}

/// Runs `work` with `limits` as this acquire's override.
pub(crate) async fn scoped<F: Future>(limits: Option<Arc<[LimitConfig]>>, work: F) -> F::Output {
    LIMITS.scope(limits, work).await
}

/// The override of the acquire running on this task, if any.
pub(crate) fn current() -> Option<Arc<[LimitConfig]>> {
    LIMITS.try_with(Clone::clone).ok().flatten()
}

/// The caller's limits, checked before any request: named as limits are,
/// once each, with a positive period and no negative amount.
pub(crate) fn validate(limits: &[LimitConfig]) -> Result<Arc<[LimitConfig]>, Error> {
    if limits.is_empty() {
        return Err(Error::Validation("limits= needs at least one limit".into()));
    }
    for (i, limit) in limits.iter().enumerate() {
        let name = &limit.name;
        if !names::is_limit_name(name) || name == WCU_LIMIT {
            return Err(Error::Validation(format!(
                "limits=: '{name}' is not a limit name (letters first, then letters, digits, _ . -; 'wcu' is reserved)"
            )));
        }
        if limits[..i].iter().any(|l| &l.name == name) {
            return Err(Error::Validation(format!("limits= names {name} twice")));
        }
        if limit.capacity < 0 || limit.refill_amount < 0 || limit.refill_period <= 0 {
            return Err(Error::Validation(format!(
                "limits=: {name} needs capacity and refill amount of 0 or more and a period above 0"
            )));
        }
    }
    Ok(limits.into())
}

/// The fast path is skipped when the override declares a soft limit the
/// request consumes: no bucket carries its stamp, so the fast path would
/// judge it hard.
pub(crate) fn skips_fast(limits: &[LimitConfig], consume: &Consume) -> bool {
    limits
        .iter()
        .any(|l| l.soft && consume.contains_key(&l.name))
}

/// Whether `name` is a hard limit of the override.
pub(crate) fn is_hard(limits: &[LimitConfig], name: &str) -> bool {
    limits.iter().any(|l| l.name == name && !l.soft)
}
