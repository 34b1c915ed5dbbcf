//! The adaptive controller: from complete minutes of sensed usage to the
//! factor each (resource, limit) is stamped with. One tick per call, per
//! namespace that declares adaptive limits:
//!
//! 1. write canaries (at most every 30 s) and read how far they came through;
//! 2. per target, evaluate each new complete minute with the estimator
//!    (`zae_table::adaptive::estimator`), or go to base when blind;
//! 3. persist a changed target under its generation, then stamp its buckets
//!    (`zae_table::adaptive::pass`), resumably.
//!
//! It runs as a scheduled event to the aggregator's own function, or as
//! `aggregator control`.

mod tick;

pub use tick::{NamespaceTick, TargetTick};

use std::time::Instant;
use zae_table::keys::{self, Index};
use zae_table::registry;
use zae_table::store::{Query, Store, StoreError};

/// The controller over one table.
pub struct Controller<'a, S> {
    pub store: &'a S,
    /// Stop starting new bucket writes at this instant; the pass resumes at
    /// the next tick.
    pub stop_at: Option<Instant>,
    /// How long a tick waits for its own canaries, so that it can evaluate
    /// the minute that just ended; `None` evaluates what is complete now.
    pub wait: Option<std::time::Duration>,
}

/// What a tick publishes: that it ticked (whether or not any namespace
/// declares adaptive limits: the alarm on a stopped controller watches it),
/// and per target the last evaluated minute's utilization and the factor
/// in force.
pub fn metrics(ticks: &[NamespaceTick], at_ms: i64) -> Vec<crate::metrics::MetricEvent> {
    use crate::metrics::{ADAPTIVE_FACTOR, MetricEvent, RESOURCE_UTILIZATION};
    let mut events = vec![MetricEvent::ControllerTick { at_ms }];
    for tick in ticks {
        for t in &tick.targets {
            let adaptive = |name, value| MetricEvent::Adaptive {
                at_ms,
                name,
                resource: t.resource.clone(),
                limit: t.limit.clone(),
                value,
            };
            if let Some((_, utilization)) = t.minutes.last() {
                events.push(adaptive(RESOURCE_UTILIZATION, *utilization));
            }
            events.push(adaptive(ADAPTIVE_FACTOR, t.factor));
        }
    }
    events
}

/// Whether a stop instant, if there is one, has come.
fn passed(stop_at: Option<Instant>) -> bool {
    stop_at.is_some_and(|stop| Instant::now() >= stop)
}

impl<S: Store> Controller<'_, S> {
    /// One tick of every registered namespace that declares adaptive
    /// limits. A namespace whose tick fails does not stop the others; the
    /// first error is returned after all have ticked.
    pub async fn tick_all(&self, now_ms: i64) -> Result<Vec<NamespaceTick>, StoreError> {
        let query = Query {
            index: &Index::TABLE,
            pk: keys::pk_registry(),
            sk_prefix: keys::sk_namespace(""),
            consistent: false,
        };
        let mut ticks = Vec::new();
        let mut first_error = None;
        for entry in self.store.query(&query).await? {
            let Some(namespace) = registry::namespace_id(&entry) else {
                continue;
            };
            match self.tick(namespace, now_ms).await {
                Ok(Some(tick)) => ticks.push(tick),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(namespace, error = %e, "controller tick failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(ticks),
        }
    }
}

#[cfg(test)]
mod tests;
