//! The table's canaries for one tick: written when due, as many as reach
//! every open shard of the stream, then waited for within the stop instant.
//! How far every shard has been read decides the complete minute and
//! blindness for every namespace.

use super::{Controller, StreamShards, TableTick, passed};
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;
use zae_table::adaptive::canary;
use zae_table::adaptive::tick::{Tick, Written};
use zae_table::adaptive::usage::{MINUTE_MS, minute_of};
use zae_table::store::Store;

/// Canary writes in flight at once.
const IN_FLIGHT: usize = 16;
/// How often a waiting tick looks at its sensed set.
const POLL: Duration = Duration::from_millis(500);
/// Shards assumed when the stream cannot be counted and never was.
const UNCOUNTED: usize = 16;

/// What the stream says for this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    /// The last minute (its start) every shard has been read past.
    pub complete: Option<i64>,
    pub blind: bool,
}

impl<S: Store, C: StreamShards> Controller<'_, S, C> {
    /// Writes the canaries if due, waits for them, and reads how far every
    /// shard has come; `tick` records it. A failure here is blindness, never
    /// sight: canaries that could not be written or read never come through.
    pub(super) async fn watch(
        &self,
        tick: &mut Tick,
        now_ms: i64,
        report: &mut TableTick,
    ) -> Watch {
        let written = if tick.canaries_due(now_ms) {
            let shards = self.count_shards(tick).await;
            report.shards = Some(shards);
            let count = canary::count_for(shards);
            self.write_canaries(now_ms, count).await;
            report.canaries_written = count;
            Some(Written {
                at_ms: now_ms,
                count,
            })
        } else {
            None
        };
        tick.ticked(now_ms, written);
        let mut through = self.through(tick).await;
        if let (Some(wait), Some(_)) = (self.wait, written) {
            let until = Instant::now() + wait;
            let until = self.stop_at.map_or(until, |stop| until.min(stop));
            while through.is_none_or(|t| t < now_ms) && Instant::now() < until {
                tokio::time::sleep(POLL.min(until - Instant::now())).await;
                through = self.through(tick).await;
            }
        }
        report.sensed_through = through;
        report.blind = tick.blind(now_ms, through);
        Watch {
            // A minute is complete once every shard was read past its end.
            complete: through.map(|t| minute_of(t) - MINUTE_MS),
            blind: report.blind,
        }
    }

    async fn count_shards(&self, tick: &mut Tick) -> usize {
        match self.shards.open_shards().await {
            Ok(n) => {
                tick.shards = i64::try_from(n).ok();
                n
            }
            Err(e) => {
                let last = tick.shards.and_then(|n| usize::try_from(n).ok());
                tracing::warn!(error = %e, last, "stream shards not counted: the last count serves");
                last.unwrap_or(UNCOUNTED)
            }
        }
    }

    async fn write_canaries(&self, at_ms: i64, count: u32) {
        let failed = futures::stream::iter(0..count)
            .take_while(|_| futures::future::ready(!passed(self.stop_at)))
            .map(|k| async move { self.store.put(&canary::item(at_ms, k), None).await })
            .buffer_unordered(IN_FLIGHT)
            .filter(|r| futures::future::ready(r.is_err()))
            .count()
            .await;
        if failed > 0 {
            // The tick is recorded all the same: its set never fills, and
            // the controller goes blind rather than trust a partial proof.
            tracing::error!(failed, count, "canary writes failed");
        }
    }

    /// The latest canary tick all through, from the sensed sets; `None`
    /// when they cannot be read.
    async fn through(&self, tick: &Tick) -> Option<i64> {
        match tick.sensed_of(self.store).await {
            Ok(sensed) => tick.through(&sensed),
            Err(e) => {
                tracing::error!(error = %e, "sensed canaries unreadable");
                None
            }
        }
    }
}
