//! The write path against the in-memory twin of the table, which evaluates
//! the expressions the aggregator sends, with faults injected at the store
//! seam: throttles before an update applies, 5xx answers after it applied.
use super::*;
use crate::write::retry::RetryPolicy;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use zae_table::store::StoreError;
use zae_table::{Attr, Item};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// Injected failures of the UpdateItem calls.
#[derive(Default)]
struct UpdateFaults {
    calls: AtomicUsize,
    /// Updates (1-based) that fail: before applying (throttled) or after (5xx).
    fail_before: Vec<usize>,
    fail_after: Vec<usize>,
    fail_all_writes: bool,
    /// Updates of this partition are refused as DynamoDB refuses an item
    /// over its size limit: a ValidationException, every time.
    reject_pk: Option<String>,
    /// Puts of this partition are refused as DynamoDB refuses a key over
    /// its limit: a ValidationException, every time.
    reject_put_pk: Option<String>,
    /// Every update finds its watermarks changed (another writer, always).
    conflict_always: bool,
    /// Every call takes this long (on tokio's clock): a slow table.
    slow: Option<Duration>,
    /// Only reads take this long.
    slow_reads: Option<Duration>,
}

fn retryable(key: &str) -> StoreError {
    StoreError::Retryable {
        operation: "UpdateItem",
        key: key.into(),
        message: "injected".into(),
    }
}

impl Faults for UpdateFaults {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        if let Call::Put(item) = call {
            let pk = zae_table::keys::pk_of(item).unwrap_or_default();
            return (self.reject_put_pk.as_deref() == Some(pk)).then(|| StoreError::Rejected {
                operation: "PutItem",
                key: pk.to_owned(),
                message: "ValidationException: One or more parameter values were invalid: Size limit exceeded".into(),
            });
        }
        let Call::Update(update) = call else {
            return None;
        };
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_before.contains(&n) || self.fail_all_writes {
            return Some(retryable(&update.pk));
        }
        if self.conflict_always {
            return Some(StoreError::ConditionFailed {
                operation: "UpdateItem",
                key: update.pk.clone(),
            });
        }
        (self.reject_pk.as_deref() == Some(update.pk.as_str())).then(|| StoreError::Rejected {
            operation: "UpdateItem",
            key: update.pk.clone(),
            message: "ValidationException: Item size has exceeded the maximum allowed size".into(),
        })
    }

    fn delay(&self, call: &Call<'_>) -> Option<Duration> {
        match call {
            Call::Get { .. } => self.slow.or(self.slow_reads),
            _ => self.slow,
        }
    }

    fn after(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Update(update) = call else {
            return None;
        };
        let n = self.calls.load(Ordering::SeqCst);
        self.fail_after.contains(&n).then(|| retryable(&update.pk))
    }
}

/// The in-memory table, with injected failures of its UpdateItem calls.
type Faulty = Injected<MemoryStore, UpdateFaults>;

fn faulty(faults: UpdateFaults) -> Faulty {
    Injected {
        inner: MemoryStore::new(),
        faults,
    }
}

fn num(v: Option<&Attr>) -> i128 {
    match v {
        Some(Attr::N(n)) => n.parse().unwrap(),
        _ => 0,
    }
}

fn snapshot(table: &Faulty, pk: &str, sk: &str) -> BTreeMap<String, Attr> {
    table.inner.item(pk, sk).unwrap_or_default()
}

fn settings() -> Settings {
    // These tests are about snapshots and audit events; the refill
    // pass has its own (`refill/tests.rs`).
    Settings::for_tests(&[Window::Hourly, Window::Daily], 3, false)
}

/// Records for two entities' buckets; each debits 1 token of its soft `tpm`
/// per record, going into debt at the 3rd.
/// An aggregator writing one item at a time, so that faults meet the
/// items in record order.
fn one_at_a_time(table: Faulty) -> Aggregator<Faulty> {
    Aggregator::new(
        table,
        Settings {
            concurrency: 1,
            ..settings()
        },
    )
}

/// A batch given a deadline already come: it is to be redelivered from its
/// first record, and no `what` (an attempt, a round) reached the table.
async fn stops_at_a_deadline_come(agg: &Aggregator<Faulty>, what: &str) {
    let outcome = agg.process(&records(), "p", 0, Some(Instant::now())).await;
    assert_eq!(outcome.first_failure.unwrap().as_stream(), "1000");
    assert_eq!(
        agg.store().faults.calls.load(Ordering::SeqCst),
        0,
        "no {what} starts at or after the deadline"
    );
}

fn records() -> Vec<String> {
    records_of(&["a", "b"], &["tpm"])
}

/// Six records per entity; each debits 1 token of every soft limit named.
fn records_of(entities: &[&str], limits: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..6i64 {
        for entity in entities {
            let pk = format!("ns/BUCKET#{entity}#r#0");
            let image = |tc: i64| {
                let mut image = json!({"PK": {"S": pk}, "SK": {"S": "#STATE"}});
                for limit in limits {
                    image[format!("b_{limit}_tc")] = json!({"N": (tc * 1000).to_string()});
                    image[format!("b_{limit}_tk")] = json!({"N": ((2 - tc) * 1000).to_string()});
                    image[format!("b_{limit}_soft")] = json!({"N": "1"});
                }
                image
            };
            out.push(
                json!({"eventName": "MODIFY", "dynamodb": {
                    "ApproximateCreationDateTime": 1_795_970_136 + i,
                    "Keys": {"PK": {"S": pk}, "SK": {"S": "#STATE"}},
                    "SequenceNumber": (1000 + out.len()).to_string(),
                    "NewImage": image(i + 1), "OldImage": image(i)}})
                .to_string(),
            );
        }
    }
    out
}

fn usage(table: &Faulty, entity: &str) -> (i128, i128, i128) {
    let item = snapshot(
        table,
        &format!("ns/ENTITY#{entity}"),
        "#USAGE#r#2026-11-29T16:00:00Z",
    );
    (
        num(item.get("tpm")),
        num(item.get("tpm#od")),
        num(item.get("total_events")),
    )
}

/// The overdraw transitions among a batch's metrics.
fn transitions(outcome: &BatchOutcome) -> usize {
    outcome
        .metrics
        .iter()
        .filter(|m| matches!(m, MetricEvent::Transition { .. }))
        .count()
}

#[tokio::test]
async fn a_batch_delivered_twice_changes_no_total_and_writes_no_second_event() {
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let first = agg.process(&records(), "p", 0, None).await;
    assert!(first.first_failure.is_none());
    assert_eq!(first.stats.snapshot_writes, 4);
    assert_eq!(transitions(&first), 2, "a and b each go into debt once");
    let handled = records().len() as u64;
    assert!(
        first
            .metrics
            .iter()
            .any(|m| matches!(m, MetricEvent::Count { name: metrics::RECORDS_PROCESSED, count, .. } if *count == handled)),
        "{:?}",
        first.metrics
    );
    let second = agg.process(&records(), "p", 0, None).await;
    assert_eq!(
        (
            second.stats.snapshot_writes,
            second.stats.snapshots_already_applied
        ),
        (0, 4)
    );
    assert_eq!(second.stats.audit_events_existing, 2);
    // The metric of a transition already recorded is published again: the
    // first delivery may have died before publishing it.
    assert_eq!(
        second.metrics, first.metrics,
        "the same datapoints, no more"
    );
    assert_eq!(usage(agg.store(), "a"), (6, 4, 6));
}

#[tokio::test]
async fn a_failed_item_is_reported_from_its_earliest_record_and_the_redelivery_is_exact() {
    let table = faulty(UpdateFaults {
        fail_all_writes: false,
        fail_before: vec![1, 2, 3],
        ..Default::default()
    });
    let agg = one_at_a_time(table);
    let all = records();
    let outcome = agg.process(&all, "p", 0, None).await;
    let failed = outcome
        .first_failure
        .expect("the first item failed three times");
    assert_eq!(outcome.stats.failed_writes, 1);
    // Lambda redelivers from the failed record on.
    let from = all
        .iter()
        .position(|r| r.contains(&format!("\"{}\"", failed.as_stream())))
        .unwrap();
    let retry = agg.process(&all[from..], "p", 0, None).await;
    assert!(retry.first_failure.is_none());
    assert_eq!(usage(agg.store(), "a"), (6, 4, 6));
    assert_eq!(usage(agg.store(), "b"), (6, 4, 6));
}

#[tokio::test]
async fn a_write_that_succeeded_but_reported_a_5xx_is_not_applied_twice() {
    let table = faulty(UpdateFaults {
        fail_after: vec![1, 4],
        ..Default::default()
    });
    let agg = one_at_a_time(table);
    let outcome = agg.process(&records(), "p", 0, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(usage(agg.store(), "a"), (6, 4, 6));
    assert_eq!(usage(agg.store(), "b"), (6, 4, 6));
}

#[tokio::test]
async fn retrying_stops_at_the_deadline() {
    let table = faulty(UpdateFaults {
        fail_all_writes: true,
        ..Default::default()
    });
    let agg = Aggregator::new(
        table,
        Settings {
            retry: RetryPolicy {
                max_attempts: 20,
                ..settings().retry
            },
            ..settings()
        },
    );
    stops_at_a_deadline_come(&agg, "attempt").await;
}

#[tokio::test]
async fn skipped_records_are_counted_in_a_metric() {
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let mut batch = records();
    batch.insert(3, "{\"eventName\":\"MODIFY\"}".into());
    let outcome = agg.process(&batch, "p", 7, None).await;
    assert_eq!(outcome.stats.skipped, 1);
    assert!(outcome.metrics.contains(&MetricEvent::Count {
        at_ms: 7000,
        name: metrics::RECORDS_SKIPPED,
        count: 1
    }));
    assert_eq!(usage(agg.store(), "a").0, 6);
}

#[tokio::test]
async fn a_limit_named_like_a_snapshot_attribute_loses_only_its_counter() {
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let outcome = agg
        .process(&records_of(&["a"], &["window", "tpm"]), "p", 7, None)
        .await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(
        usage(agg.store(), "a"),
        (6, 4, 12),
        "tpm is counted, both limits are events"
    );
    let item = snapshot(agg.store(), "ns/ENTITY#a", "#USAGE#r#2026-11-29T16:00:00Z");
    assert_eq!(
        item["window"],
        Attr::s("hourly"),
        "the snapshot keeps its own attribute"
    );
    assert_eq!(
        num(item.get("window#od")),
        4,
        "its overdraw counter still counts"
    );
    assert_eq!(outcome.stats.counters_left_out, 1);
    assert!(outcome.metrics.contains(&MetricEvent::Count {
        at_ms: 7000,
        name: metrics::USAGE_SKIPPED,
        count: 1
    }));
    let overdrawn: Vec<&str> = outcome
        .metrics
        .iter()
        .filter_map(|m| match m {
            MetricEvent::Transition { limit, .. } => Some(limit.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        overdrawn,
        ["tpm", "window"],
        "both overdraw signals are sent"
    );
}

#[tokio::test]
async fn a_snapshot_item_dynamodb_rejects_is_skipped_and_the_rest_are_written() {
    let table = faulty(UpdateFaults {
        reject_pk: Some("ns/ENTITY#b".into()),
        ..Default::default()
    });
    let agg = Aggregator::new(table, settings());
    let outcome = agg.process(&records(), "p", 7, None).await;
    assert!(
        outcome.first_failure.is_none(),
        "a rejection must not block the shard"
    );
    assert_eq!(usage(agg.store(), "a"), (6, 4, 6));
    assert_eq!(
        outcome.stats.snapshots_rejected, 2,
        "b's hourly and daily items"
    );
    assert!(outcome.metrics.contains(&MetricEvent::Count {
        at_ms: 7000,
        name: metrics::USAGE_SKIPPED,
        count: 2
    }));
    assert_eq!(
        outcome.stats.audit_events_written, 2,
        "b's overdraw is still recorded"
    );
}

/// One record of entity `a`'s bucket shard `shard`: its `k`th debit of one token.
fn shard_record(shard: u32, sequence: u64, k: i64) -> String {
    let pk = format!("ns/BUCKET#a#r#{shard}");
    let image = |tc: i64| json!({"PK": {"S": pk}, "SK": {"S": "#STATE"}, "b_rpm_tc": {"N": (tc * 1000).to_string()}});
    json!({"eventName": "MODIFY", "dynamodb": {
        "ApproximateCreationDateTime": 1_795_970_136,
        "Keys": {"PK": {"S": pk}, "SK": {"S": "#STATE"}},
        "SequenceNumber": sequence.to_string(),
        "NewImage": image(k), "OldImage": image(k - 1)}})
    .to_string()
}

#[tokio::test]
async fn two_readers_interleaved_over_a_sharded_bucket_never_count_a_record_twice() {
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let s0 = |k: i64| shard_record(0, 1000 + k as u64, k);
    let s1 = |k: i64| shard_record(1, 2000 + k as u64, k);
    let rpm = |agg: &Aggregator<Faulty>| {
        num(snapshot(agg.store(), "ns/ENTITY#a", "#USAGE#r#2026-11-29T16:00:00Z").get("rpm"))
    };
    // Reader A gets both shards up to their 3rd record.
    let a = [s0(1), s0(2), s0(3), s1(1), s1(2), s1(3)];
    assert!(agg.process(&a, "p", 0, None).await.first_failure.is_none());
    assert_eq!(rpm(&agg), 6);
    // Reader B is ahead on shard 0 and behind on shard 1.
    let b = [s0(1), s0(2), s0(3), s0(4), s0(5), s1(1), s1(2)];
    assert!(agg.process(&b, "p", 0, None).await.first_failure.is_none());
    assert_eq!(rpm(&agg), 8);
    // Reader B goes on with shard 1: its 3rd record is already counted.
    let b2 = [s1(3), s1(4)];
    assert!(agg.process(&b2, "p", 0, None).await.first_failure.is_none());
    assert_eq!(rpm(&agg), 9, "nine distinct records, each counted once");
}

#[tokio::test]
async fn every_detected_transition_is_published_at_processing_time() {
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let now_s = 1_795_999_999;
    let outcome = agg.process(&records(), "p", now_s, None).await;
    let times: Vec<(i64, i64)> = outcome
        .metrics
        .iter()
        .filter_map(|m| match m {
            MetricEvent::Transition {
                at_ms,
                transition_ms,
                ..
            } => Some((*at_ms, *transition_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(times.len(), 2);
    for (at_ms, transition_ms) in times {
        assert_eq!(
            at_ms,
            now_s * 1000,
            "the datapoint is stamped when published"
        );
        assert!(
            transition_ms < at_ms,
            "the transition's own time is kept as a property"
        );
    }
    // A redelivery publishes them again, whoever wrote the audit events.
    let again = agg.process(&records(), "p", now_s + 60, None).await;
    assert_eq!(again.stats.audit_events_written, 0);
    assert_eq!(transitions(&again), 2);
}

#[tokio::test]
async fn conflict_rounds_stop_at_the_deadline() {
    let contended = || {
        faulty(UpdateFaults {
            conflict_always: true,
            ..Default::default()
        })
    };
    let agg = one_at_a_time(contended());
    let outcome = agg.process(&records(), "p", 0, None).await;
    assert!(outcome.first_failure.is_some());
    assert_eq!(
        agg.store().faults.calls.load(Ordering::SeqCst),
        4 * 5,
        "five rounds per item"
    );

    let agg = one_at_a_time(contended());
    stops_at_a_deadline_come(&agg, "round").await;
}

/// A MODIFY of `h`'s shard 0 moving its `shard_count` from `from` to `to`
/// (as a client with the acquire policy may write), with a `cp` of `cp`;
/// shard 0 is in the table as the new image has it.
fn hostile_count(table: &Faulty, (from, to): (i64, i64), cp: i64, sequence: u64) -> String {
    let pk = "ns/BUCKET#h#r#0";
    let image = |count: i64| {
        json!({"PK": {"S": pk}, "SK": {"S": "#STATE"}, "shard_count": {"N": count.to_string()},
               "b_tpm_cp": {"N": cp.to_string()}, "b_tpm_tc": {"N": "0"}})
    };
    table.inner.insert(Item::from([
        ("PK".into(), Attr::s(pk)),
        ("SK".into(), Attr::s("#STATE")),
        ("shard_count".into(), Attr::n(to)),
        ("b_tpm_cp".into(), Attr::n(cp)),
        ("b_tpm_tc".into(), Attr::n(0)),
    ]));
    json!({"eventName": "MODIFY", "dynamodb": {
        "ApproximateCreationDateTime": 1_795_970_136,
        "Keys": {"PK": {"S": pk}, "SK": {"S": "#STATE"}},
        "SequenceNumber": sequence.to_string(),
        "NewImage": image(to), "OldImage": image(from)}})
    .to_string()
}

/// A client may write any `shard_count` on its own bucket. Set to -1 and
/// then 0 (a "raise" to no shards), or to -1 under a `cp` of `i64::MIN`,
/// the propagation divided by the count and panicked: the batch failed at
/// every retry and every record after it, other entities' usage included,
/// was never counted. A count outside 1..=32, or a capacity below 1, is
/// refused where the image is read: the record is skipped and counted, and
/// the batch goes on.
#[tokio::test]
async fn a_shard_count_a_client_sets_out_of_range_is_skipped_and_the_batch_goes_on() {
    for (counts, cp) in [
        ((-1, 0), 10_000),
        ((-2, -1), i64::MIN),
        ((1, 64), 10_000),
        // A count in range under a capacity the client never writes.
        ((1, 2), i64::MIN),
        ((1, 2), 0),
    ] {
        let with_refills = Settings {
            refill: true,
            ..settings()
        };
        let agg = Aggregator::new(faulty(UpdateFaults::default()), with_refills);
        let mut batch = records();
        batch.insert(3, hostile_count(agg.store(), counts, cp, 999));
        let outcome = agg.process(&batch, "p", 7, None).await;
        assert_eq!(outcome.stats.skipped, 1, "{counts:?}: {:?}", outcome.stats);
        assert!(outcome.first_failure.is_none(), "{counts:?}");
        assert_eq!(usage(agg.store(), "a").0, 6, "{counts:?}");
        assert_eq!(usage(agg.store(), "b").0, 6, "{counts:?}");
    }
}

/// Against a table where each call takes 10 s and 3 s are left, the first
/// attempt of every write was always made and ran to its end, and the
/// refill pass and the propagation started after the deadline: Lambda
/// timed the function out with no `batchItemFailures`, and the whole batch
/// was retried and bisected. Now no phase starts past the deadline, no
/// attempt runs past it, and what was not done is a batch-item failure
/// from its earliest record.
#[tokio::test(start_paused = true)]
async fn a_slow_table_stops_every_phase_at_the_deadline_and_answers_in_time() {
    let slow = Settings {
        refill: true,
        ..settings()
    };
    let agg = Aggregator::new(
        faulty(UpdateFaults {
            slow: Some(Duration::from_secs(10)),
            ..Default::default()
        }),
        slow,
    );
    let mut batch = records();
    batch.insert(3, hostile_count(agg.store(), (1, 2), 10_000, 999));
    let started = tokio::time::Instant::now();
    let deadline = started.into_std() + Duration::from_secs(3);
    let outcome = agg.process(&batch, "p", 7, Some(deadline)).await;
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "answered {:?} after the start, past the deadline",
        started.elapsed()
    );
    assert_eq!(
        outcome.first_failure.map(|f| f.as_stream().to_owned()),
        Some("999".to_owned()),
        "{:?}",
        outcome.errors
    );
    assert_eq!(outcome.stats.snapshot_writes, 0);
}

/// A propagation that starts in time and meets a slow read: its reads of
/// shard 0 and the siblings were not bounded by the deadline (one SDK
/// attempt may take 10 s against a 3 s margin). It is stopped whole at the
/// deadline now, as a transient failure (its writes are conditional, so the
/// redelivery from the raise's record takes up where it stopped).
#[tokio::test(start_paused = true)]
async fn a_propagation_that_meets_a_slow_read_stops_at_the_deadline() {
    let agg = Aggregator::new(
        faulty(UpdateFaults {
            slow_reads: Some(Duration::from_secs(10)),
            ..Default::default()
        }),
        settings(),
    );
    hostile_count(agg.store(), (1, 2), 10_000, 999);
    let raise = crate::plan::shard::Raise {
        key: zae_table::BucketKey::parse("ns/BUCKET#h#r#0").unwrap(),
        from: 1,
        to: 2,
        sequence: SequenceNumber::parse("999").unwrap(),
    };
    let started = tokio::time::Instant::now();
    let deadline = started.into_std() + Duration::from_secs(3);
    let done = agg.propagate(&raise, 0, Some(deadline)).await;
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "answered {:?} after the start",
        started.elapsed()
    );
    assert!(done.failed && done.retry, "{done:?}");
}

/// The records of a bucket a principal wrote by hand under an entity id
/// longer than the client's cap (256), in debt on a soft limit: skipped and
/// counted as unreadable records are, never a batch failure, while the
/// other entity's records are all counted. On the twin, which refuses the
/// audit event's `GSI4SK` past 1,024 bytes as DynamoDB does.
#[tokio::test]
async fn a_bucket_whose_entity_id_passes_the_clients_cap_is_skipped_and_counted_not_a_batch_failure()
 {
    let long = "e".repeat(1_100);
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let outcome = agg
        .process(&records_of(&[&long, "b"], &["tpm"]), "p", 7, None)
        .await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(usage(agg.store(), "b"), (6, 4, 6));
    assert_eq!(outcome.stats.skipped, 6, "each of its six records");
    assert!(outcome.metrics.contains(&MetricEvent::Count {
        at_ms: 7000,
        name: metrics::RECORDS_SKIPPED,
        count: 6
    }));
    let written = agg.store().inner.items();
    assert!(
        written
            .iter()
            .all(|i| !i["PK"].as_s().unwrap_or_default().contains(&long)),
        "nothing derived from the long entity id is written"
    );
}

/// The cap is the client's, in bytes: an entity id of 256 is counted like
/// any other; 257 bytes, or 129 two-byte characters (258 bytes), is not.
#[tokio::test]
async fn an_entity_id_at_the_clients_cap_is_counted_and_one_byte_past_it_is_skipped() {
    let at_cap = "e".repeat(256);
    let agg = Aggregator::new(faulty(UpdateFaults::default()), settings());
    let outcome = agg
        .process(&records_of(&[&at_cap], &["tpm"]), "p", 7, None)
        .await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(
        (outcome.stats.skipped, outcome.stats.audit_events_written),
        (0, 1)
    );
    assert_eq!(usage(agg.store(), &at_cap), (6, 4, 6));
    for past in ["e".repeat(257), "é".repeat(129)] {
        let outcome = agg
            .process(&records_of(&[&past], &["tpm"]), "p", 7, None)
            .await;
        assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
        assert_eq!(outcome.stats.skipped, 6, "{} bytes", past.len());
        assert_eq!(usage(agg.store(), &past), (0, 0, 0));
    }
}

/// A write DynamoDB refuses as invalid is never a batch failure: the audit
/// event is skipped and counted, with a bounded log line, and the batch
/// completes. Injected at the store seam (a ValidationException on the
/// audit put): with the client's caps no key the aggregator builds is over
/// DynamoDB's limits, so neither the twin nor moto can show it.
#[tokio::test]
async fn an_audit_write_dynamodb_refuses_is_skipped_and_counted_not_redelivered() {
    let table = faulty(UpdateFaults {
        reject_put_pk: Some("ns/AUDIT#b".into()),
        ..Default::default()
    });
    let agg = Aggregator::new(table, settings());
    let outcome = agg.process(&records(), "p", 7, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(usage(agg.store(), "b"), (6, 4, 6), "b's usage is written");
    assert_eq!(outcome.stats.writes_refused, 1);
    assert_eq!(outcome.stats.audit_events_written, 1, "a's event");
    assert!(outcome.metrics.contains(&MetricEvent::Count {
        at_ms: 7000,
        name: metrics::RECORDS_SKIPPED,
        count: 1
    }));
}

/// DynamoDB Local 2.6 answers a transaction holding a key over its limit
/// with a `TransactionCanceledException` whose reason is `ValidationError`
/// (moto answers a `ValidationException`): the SDK store maps it to
/// `Rejected`, as it maps a `ValidationException`, so the write paths skip
/// it instead of failing the batch. With the SDK's mock client.
#[tokio::test]
async fn the_sdk_store_maps_a_transaction_cancelled_as_invalid_to_rejected() {
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    use aws_sdk_dynamodb::types::CancellationReason;
    use aws_sdk_dynamodb::types::error::TransactionCanceledException;
    use aws_smithy_mocks::{mock, mock_client};
    use zae_table::store::TxWrite;
    let reason = |code: &str| CancellationReason::builder().code(code).build();
    let rule = mock!(aws_sdk_dynamodb::Client::transact_write_items).then_error(move || {
        TransactWriteItemsError::TransactionCanceledException(
            TransactionCanceledException::builder()
                .message("Transaction cancelled, please refer cancellation reasons for specific reasons [None, ValidationError]")
                .cancellation_reasons(reason("None"))
                .cancellation_reasons(reason("ValidationError"))
                .build(),
        )
    });
    let client = mock_client!(aws_sdk_dynamodb, [&rule]);
    let store = zae_table::sdk::DynamoStore::new(client, "t");
    let item = |pk: &str| Item::from([("PK".into(), Attr::s(pk)), ("SK".into(), Attr::s("1"))]);
    let writes = [
        TxWrite::Put {
            item: item("ok"),
            condition: None,
        },
        TxWrite::Put {
            item: item(&"p".repeat(2049)),
            condition: None,
        },
    ];
    let refused = store.transact(&writes).await;
    assert!(
        matches!(&refused, Err(StoreError::Rejected { .. })),
        "{refused:?}"
    );
}
