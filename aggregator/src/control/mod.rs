//! The adaptive controller: from complete minutes of sensed usage to the
//! factor each (resource, limit) is stamped with. One tick per call, for the
//! whole table:
//!
//! 1. every registered namespace's declaration and targets are read;
//! 2. if any is adaptive, the table's canaries are written (at most every
//!    30 s, as many as reach every open shard of the stream: [`canaries`],
//!    the stream's shards counted by [`stream_shards`])
//!    and waited for, within the stop instant; how far every shard has been
//!    read decides the complete minute, and blindness, for all namespaces;
//! 3. the namespaces are evaluated concurrently (a few at a time), each
//!    bounded by the stop instant ([`namespace`]): each target's new complete
//!    minutes go through the estimator as `zae_adaptive::tick` decides, a
//!    move is persisted under a new generation, and its buckets are stamped
//!    (`zae_adaptive::pass`), resumably; a `share: demand` target's share is
//!    read, planned (`zae_adaptive::share::plan`) and stamped ([`demand`]).
//!    A namespace that fails is logged and counted; the others tick.
//!
//! Here are the reads, the writes and the metrics; the decisions are
//! `zae_adaptive`'s.
//!
//! It runs as a scheduled event to the aggregator's own function, or as
//! `aggregator control`.

mod canaries;
mod demand;
pub mod namespace;
pub mod stream_shards;

pub use namespace::{NamespaceTick, TargetTick};
pub use stream_shards::StreamShards;

use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;
use zae_table::adaptive::tick::Tick;
use zae_table::keys::{self, Index};
use zae_table::registry;
use zae_table::store::{Query, Returns, Store, StoreError};

/// Namespaces evaluated at once: each may run a stamping pass of its own.
pub const NAMESPACES_AT_ONCE: usize = 8;
/// A namespace still evaluating this long after the stop instant is given
/// up on (a call that never answers): its pass stops starting writes at the
/// stop instant, so this is only for what is already in flight.
const STRAGGLER: Duration = Duration::from_secs(2);

/// The controller over one table.
pub struct Controller<'a, S, C> {
    pub store: &'a S,
    /// Counts the stream's open shards, for the canaries.
    pub shards: &'a C,
    /// Stop starting new work at this instant; passes resume at the next
    /// tick.
    pub stop_at: Option<Instant>,
    /// How long a tick waits for its own canaries, so that it can evaluate
    /// the minute that just ended; `None` evaluates what is complete now.
    pub wait: Option<Duration>,
}

/// What one tick did for the table.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TableTick {
    pub at_ms: i64,
    /// No canary written two ticks ago or later has come through on every
    /// shard: every factor went to 1.
    pub blind: bool,
    /// Canaries written by this tick (0: none were due, or nothing is adaptive).
    pub canaries_written: u32,
    /// The stream's open shards, as counted for the canaries.
    pub shards: Option<usize>,
    /// Every shard has been read up to this instant.
    pub sensed_through: Option<i64>,
    pub namespaces: Vec<NamespaceTick>,
    /// Namespaces whose tick failed, with why.
    pub failed: Vec<(String, String)>,
}

impl TableTick {
    /// Whether anything adaptive was there to tick.
    pub fn adaptive(&self) -> bool {
        !self.namespaces.is_empty() || !self.failed.is_empty()
    }
}

/// Whether a stop instant, if there is one, has come.
fn passed(stop_at: Option<Instant>) -> bool {
    stop_at.is_some_and(|stop| Instant::now() >= stop)
}

impl<S: Store, C: StreamShards> Controller<'_, S, C> {
    /// One tick of the table at `now_ms`. Only a failure to read the
    /// registry or the table's tick record fails the tick; a namespace that
    /// fails is in [`TableTick::failed`].
    pub async fn tick_all(&self, now_ms: i64) -> Result<TableTick, StoreError> {
        let mut report = TableTick {
            at_ms: now_ms,
            ..TableTick::default()
        };
        let read = futures::stream::iter(self.namespaces().await?)
            .map(|(name, id)| async move { (name, self.prepare(id).await) })
            .buffer_unordered(NAMESPACES_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        let mut prepared = Vec::new();
        for (name, result) in read {
            match result {
                Ok(Some(p)) => prepared.push((name, p)),
                Ok(None) => {}
                Err(e) => self.failed(&mut report, &name, &e),
            }
        }
        if prepared.is_empty() {
            // Nothing adaptive: the record still says the controller ran (an
            // operator's smoke test reads it). A tick whose namespaces all
            // failed is not recorded, as before.
            if report.failed.is_empty() {
                self.store
                    .update(&Tick::touch(now_ms), Returns::Nothing)
                    .await?;
            }
            return Ok(report);
        }
        let mut tick = Tick::read(self.store, true).await?;
        let watch = self.watch(&mut tick, now_ms, &mut report).await;
        let results = futures::stream::iter(prepared)
            .map(|(name, p)| async move {
                let evaluated = self.evaluate(p, now_ms, watch);
                let result = match self.stop_at {
                    Some(stop) => tokio::time::timeout_at(stop + STRAGGLER, evaluated)
                        .await
                        .unwrap_or_else(|_| Err(out_of_time(&name))),
                    None => evaluated.await,
                };
                (name, result)
            })
            .buffer_unordered(NAMESPACES_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for (name, result) in results {
            match result {
                Ok(mut tick) => {
                    tick.namespace = name;
                    report.namespaces.push(tick);
                }
                Err(e) => self.failed(&mut report, &name, &e),
            }
        }
        report
            .namespaces
            .sort_by(|a, b| a.namespace.cmp(&b.namespace));
        self.store.update(&tick.write(), Returns::Nothing).await?;
        Ok(report)
    }

    /// The registry's namespaces: `(name, id)`.
    async fn namespaces(&self) -> Result<Vec<(String, String)>, StoreError> {
        let query = Query {
            index: &Index::TABLE,
            pk: keys::pk_registry(),
            sk_prefix: keys::sk_namespace(""),
            consistent: false,
        };
        Ok(self
            .store
            .query(&query)
            .await?
            .iter()
            .filter_map(|entry| {
                let id = registry::namespace_id(entry)?;
                let name = keys::sk_of(entry)?.strip_prefix(&keys::sk_namespace(""))?;
                Some((name.to_owned(), id.to_owned()))
            })
            .collect())
    }

    fn failed(&self, report: &mut TableTick, namespace: &str, error: &StoreError) {
        tracing::error!(namespace, error = %error, "controller tick failed for a namespace");
        report
            .failed
            .push((namespace.to_owned(), error.to_string()));
    }
}

fn out_of_time(namespace: &str) -> StoreError {
    StoreError::Retryable {
        operation: "controller tick",
        key: namespace.to_owned(),
        message: "still running past the stop instant".to_owned(),
    }
}

/// What a tick publishes: that it ticked (whether or not anything is
/// adaptive: the alarm on a stopped controller watches it), whether it is
/// blind and how far behind the stream's slowest shard is, how many
/// namespaces failed; per target the last evaluated minute's utilization,
/// the factor in force and whether its stamping lap is behind.
pub fn metrics(tick: &TableTick) -> Vec<crate::metrics::MetricEvent> {
    use crate::metrics::{
        ADAPTIVE_FACTOR, CANARY_LAG, CONTROLLER_BLIND, MetricEvent, NAMESPACE_TICKS_FAILED,
        RAISED_ENTITIES, RESOURCE_UTILIZATION, SATURATED_ENTITIES, STAMPING_BEHIND,
    };
    let at_ms = tick.at_ms;
    let mut events = vec![MetricEvent::ControllerTick { at_ms }];
    if !tick.adaptive() {
        return events;
    }
    let table = |name, value| MetricEvent::Controller { at_ms, name, value };
    events.push(table(CONTROLLER_BLIND, f64::from(u8::from(tick.blind))));
    events.push(table(NAMESPACE_TICKS_FAILED, tick.failed.len() as f64));
    if let Some(through) = tick.sensed_through {
        events.push(table(CANARY_LAG, (at_ms - through).max(0) as f64 / 1000.0));
    }
    for ns in &tick.namespaces {
        for t in &ns.targets {
            let adaptive = |name, value| MetricEvent::Adaptive {
                at_ms,
                name,
                namespace: ns.namespace.clone(),
                resource: t.resource.clone(),
                limit: t.limit.clone(),
                value,
            };
            if let Some((_, utilization)) = t.minutes.last() {
                events.push(adaptive(RESOURCE_UTILIZATION, *utilization));
            }
            events.push(adaptive(ADAPTIVE_FACTOR, t.factor));
            let behind = t.pass_unfinished || t.stamps_lost > 0;
            events.push(adaptive(STAMPING_BEHIND, f64::from(u8::from(behind))));
            if let Some(share) = &t.share {
                let count = |f: fn(&zae_adaptive::share::EntityShare) -> bool| {
                    share.entities.iter().filter(|e| f(e)).count() as f64
                };
                events.push(adaptive(SATURATED_ENTITIES, count(|e| e.saturated)));
                events.push(adaptive(RAISED_ENTITIES, count(|e| e.factor > 1.0)));
            }
        }
    }
    events
}

#[cfg(test)]
mod tests;
