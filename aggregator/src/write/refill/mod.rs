//! The refill pass's writes, after the batch's snapshots are written: one
//! conditional UpdateItem per bucket that needs one. A refill is an
//! optimisation: a lost race is expected, and a write that still fails
//! after its retries is dropped and counted, never a batch failure.

use super::Aggregator;
use crate::plan::Activity;
use crate::plan::refill::Pass;
use std::time::Instant;
use zae_table::StreamRecord;
use zae_table::bucket::BucketState;
use zae_table::names::WCU_LIMIT;
use zae_table::store::{Returns, Store, StoreError};

/// What the pass did with one bucket.
pub(super) enum Refill {
    NotNeeded,
    Written,
    /// Something moved since the image (the client, a fan-out, a doubling).
    LostRace,
    /// The bucket could not be read as a bucket, or its schedule could not.
    Skipped,
    Dropped(StoreError),
}

impl<S: Store> Aggregator<S> {
    /// The refill pass for one bucket, then, on a shard 0, a doubling if its
    /// `wcu` runs low; both from the bucket as the batch's last record shows it.
    pub(super) async fn refill<R: AsRef<str>>(
        &self,
        records: &[R],
        bucket: &Activity,
        now_ms: i64,
        deadline: Option<Instant>,
    ) -> (Refill, bool) {
        // The planner read this record already; it parses.
        let Some(record) = records
            .get(bucket.last_record)
            .and_then(|text| StreamRecord::parse(text.as_ref()).ok())
        else {
            return (Refill::NotNeeded, false);
        };
        let Some(image) = record.new_image() else {
            return (Refill::NotNeeded, false);
        };
        let state = match BucketState::read(image) {
            Ok(state) => state,
            Err(e) => return (skipped(bucket, &e), false),
        };
        // Never beyond the newest image's own time (DynamoDB's clock when it
        // was written): an aggregator clock ahead of the table's would stamp
        // an `rf` in the clients' future, and their slow paths would credit
        // nothing until their clocks caught up.
        let horizon = record.created_ms.map_or(now_ms, |at| at.min(now_ms));
        let refill = self.materialise(bucket, &state, horizon, deadline).await;
        let wcu = bucket.consumed.get(WCU_LIMIT).copied().unwrap_or(0);
        // Past the deadline, a doubling waits for the shard's next batch.
        let in_time = !crate::write::retry::past(deadline);
        let doubled = in_time
            && bucket.shard == 0
            && self
                .double_if_hot(&bucket.pk, &state, wcu, now_ms, deadline)
                .await;
        (refill, doubled)
    }

    async fn materialise(
        &self,
        bucket: &Activity,
        state: &BucketState<'_>,
        now_ms: i64,
        deadline: Option<Instant>,
    ) -> Refill {
        let pass = Pass {
            pk: &bucket.pk,
            state,
            consumed: &bucket.consumed,
            now: now_ms,
        };
        let update = match pass.decide() {
            Ok(Some(write)) => write.update(),
            Ok(None) => return Refill::NotNeeded,
            Err(e) => return skipped(bucket, &e),
        };
        let result = self
            .retrying(deadline, || self.store.update(&update, Returns::Nothing))
            .await;
        match result {
            Ok(_) => Refill::Written,
            Err(StoreError::ConditionFailed { .. }) => Refill::LostRace,
            // The table refuses the arithmetic on what a client wrote there
            // (a number past DynamoDB's 38 digits, say): the same write fails
            // every time, so the bucket is skipped, not an error.
            Err(e @ StoreError::Rejected { .. }) => skipped(bucket, &e),
            Err(e) => {
                tracing::warn!(error = %e, pk = %bucket.pk, "refill dropped after its retries");
                Refill::Dropped(e)
            }
        }
    }
}

fn skipped(bucket: &Activity, reason: &dyn std::fmt::Display) -> Refill {
    tracing::warn!(pk = %bucket.pk, %reason, "refill skipped");
    Refill::Skipped
}

#[cfg(test)]
mod tests;
