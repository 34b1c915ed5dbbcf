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
    pub(super) async fn refill<R: AsRef<str>>(
        &self,
        records: &[R],
        bucket: &Activity,
        now_ms: i64,
        deadline: Option<Instant>,
    ) -> Refill {
        let Some(update) = plan(records, bucket, now_ms) else {
            return Refill::NotNeeded;
        };
        let Ok(update) = update else {
            return Refill::Skipped;
        };
        let result = self
            .retrying(deadline, || self.store.update(&update, Returns::Nothing))
            .await;
        match result {
            Ok(_) => Refill::Written,
            Err(StoreError::ConditionFailed { .. }) => Refill::LostRace,
            Err(e) => {
                tracing::warn!(error = %e, pk = %bucket.pk, "refill dropped after its retries");
                Refill::Dropped(e)
            }
        }
    }
}

/// The write for one bucket: `None` when none is needed, `Err` when the
/// bucket was skipped (logged here).
fn plan<R: AsRef<str>>(
    records: &[R],
    bucket: &Activity,
    now_ms: i64,
) -> Option<Result<zae_table::store::Update, ()>> {
    let skipped = |reason: &dyn std::fmt::Display| {
        tracing::warn!(pk = %bucket.pk, %reason, "refill skipped");
        Some(Err(()))
    };
    // The planner read this record already; it parses.
    let record = StreamRecord::parse(records.get(bucket.last_record)?.as_ref()).ok()?;
    let image = record.new_image()?;
    let state = match BucketState::read(image) {
        Ok(state) => state,
        Err(e) => return skipped(&e),
    };
    let pass = Pass {
        pk: &bucket.pk,
        state: &state,
        consumed: &bucket.consumed,
        now: now_ms,
    };
    match pass.decide() {
        Ok(write) => write.map(|w| Ok(w.update())),
        Err(e) => skipped(&e),
    }
}

#[cfg(test)]
mod tests;
