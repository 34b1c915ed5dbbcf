//! What a batch tells the adaptive controller (the sensor's plan): the
//! consumption each bucket admitted, per limit and minute, and the canaries
//! that came through the stream.
//!
//! Within one delivery, a bucket's deltas for a limit and minute are summed
//! with a running clamp at zero (`s = max(0, s + d)`): a refund can take back
//! consumption only from records delivered with it. Summed over any set of
//! deliveries that covers every record at least once, that is never less
//! than the true total, so redelivery can over-count, never under-count.

use std::collections::BTreeMap;
use zae_table::adaptive::demand::Reading;
use zae_table::adaptive::usage::{TAIL_FROM_MS, minute_of};
use zae_table::names::WCU_LIMIT;
use zae_table::{BucketKey, SequenceNumber};

/// What a record's image says of each limit that admitted a request.
pub type Readings = [(String, Reading)];

/// One bucket's admitted consumption of one limit in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sensed {
    pub bucket: BucketKey,
    /// The parent its requests were also debited to: its cascade stamp.
    pub cascades_to: Option<String>,
    pub limit: String,
    pub minute_ms: i64,
    /// Millitokens, never negative.
    pub amount: i64,
    /// Of them, those of records in the minute's tail (its last third).
    pub tail: i64,
    /// The first record it counts: what to redeliver from if it is not written.
    pub earliest: SequenceNumber,
    /// A record of the run left the bucket short (see
    /// `zae_table::adaptive::demand`).
    pub short: bool,
    /// The bucket's last image carried a raise of ours.
    pub raised: bool,
    /// The entity's shard count, as the bucket's last image says.
    pub shards: i64,
}

/// A canary record: the controller's canary `index` of its tick at `tick_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canary {
    pub tick_ms: i64,
    pub index: u32,
    pub sequence: SequenceNumber,
}

/// Collects a batch's bucket records, in stream order.
#[derive(Debug, Default)]
pub struct Sensor {
    runs: BTreeMap<(String, String, i64), Sensed>,
}

impl Sensor {
    /// Adds one bucket record's consumption (millitokens per limit) and what
    /// its image says of the limits that admitted a request.
    pub fn record(
        &mut self,
        bucket: &BucketKey,
        cascades_to: Option<&str>,
        at_ms: i64,
        (consumed, readings): (&[(String, i64)], &Readings),
        sequence: &SequenceNumber,
    ) {
        let minute_ms = minute_of(at_ms);
        for (limit, delta) in consumed.iter().filter(|(l, _)| l != WCU_LIMIT) {
            let key = (bucket.pk(), limit.clone(), minute_ms);
            let run = self.runs.entry(key).or_insert_with(|| Sensed {
                bucket: bucket.clone(),
                cascades_to: None,
                limit: limit.clone(),
                minute_ms,
                amount: 0,
                tail: 0,
                earliest: sequence.clone(),
                short: false,
                raised: false,
                shards: 1,
            });
            run.amount = run.amount.saturating_add(*delta).max(0);
            if at_ms.saturating_sub(minute_ms) >= TAIL_FROM_MS {
                run.tail = run.tail.saturating_add(*delta).max(0).min(run.amount);
            }
            run.cascades_to = cascades_to.map(str::to_owned);
            if let Some((_, reading)) = readings.iter().find(|(l, _)| l == limit) {
                run.short |= reading.short;
                run.raised = reading.raised;
                run.shards = reading.shards;
            }
        }
    }

    /// The runs that counted something.
    pub fn into_sensed(self) -> Vec<Sensed> {
        self.runs.into_values().filter(|s| s.amount > 0).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> BucketKey {
        BucketKey::parse("ns/BUCKET#e#r#0").unwrap()
    }

    fn seq(n: u64) -> SequenceNumber {
        SequenceNumber::parse(&n.to_string()).unwrap()
    }

    fn sense(deltas: &[i64]) -> i64 {
        let mut sensor = Sensor::default();
        for (i, d) in deltas.iter().enumerate() {
            sensor.record(
                &key(),
                None,
                1_000,
                (&[("tpm".into(), *d)], &[]),
                &seq(i as u64 + 1),
            );
        }
        sensor.into_sensed().iter().map(|s| s.amount).sum()
    }

    #[test]
    fn a_refund_takes_back_only_what_came_with_it() {
        assert_eq!(sense(&[1_000, -400]), 600);
        assert_eq!(sense(&[-400, 1_000]), 1_000);
        assert_eq!(sense(&[-400]), 0);
    }

    #[test]
    fn minutes_limits_and_wcu_are_apart() {
        let mut sensor = Sensor::default();
        let consumed = [("tpm".to_owned(), 5), ("wcu".to_owned(), 1_000)];
        sensor.record(&key(), Some("org"), 59_999, (&consumed, &[]), &seq(1));
        sensor.record(&key(), Some("org"), 60_000, (&consumed, &[]), &seq(2));
        let sensed = sensor.into_sensed();
        assert_eq!(sensed.len(), 2);
        assert!(sensed.iter().all(|s| s.limit == "tpm" && s.amount == 5));
        assert_eq!(sensed[0].cascades_to.as_deref(), Some("org"));
        assert_eq!((sensed[0].minute_ms, sensed[1].minute_ms), (0, 60_000));
    }

    /// Records from 40 s into the minute on are its tail as well.
    #[test]
    fn the_minutes_last_third_is_counted_apart_as_well() {
        let mut sensor = Sensor::default();
        let consumed = [("tpm".to_owned(), 5)];
        sensor.record(&key(), None, 39_999, (&consumed, &[]), &seq(1));
        sensor.record(&key(), None, 40_000, (&consumed, &[]), &seq(2));
        sensor.record(&key(), None, 59_999, (&consumed, &[]), &seq(3));
        let sensed = sensor.into_sensed();
        assert_eq!((sensed[0].amount, sensed[0].tail), (15, 10));
    }

    proptest! {
        /// Any redelivery pattern: deliveries are stream slices that cover
        /// every record at least once (each starts at or before the end of
        /// the last), the way Lambda redelivers from a failed record.
        #[test]
        fn redelivery_never_under_counts(
            deltas in prop::collection::vec(-2_000i64..3_000, 1..40),
            cuts in prop::collection::vec((0usize..40, 0usize..40), 1..6),
        ) {
            let truth: i64 = deltas.iter().sum::<i64>().max(0);
            let n = deltas.len();
            let mut covered = 0;
            let mut sensed = 0;
            for (back, len) in cuts {
                let start = covered - back.min(covered);
                let end = (start + len + 1).min(n).max(covered.min(n));
                sensed += sense(&deltas[start..end.max(start)]);
                covered = covered.max(end);
            }
            sensed += sense(&deltas[covered.min(n)..]);
            prop_assert!(sensed >= truth, "sensed {sensed} < true total {truth}");
        }
    }
}
