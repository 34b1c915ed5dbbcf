//! The refill pass's writes against the in-memory twin of the table, which
//! evaluates their update and condition expressions: they land, lose their
//! race when anything they read has moved, and never fail a batch. Faults
//! moto cannot show (throttling) are injected at the store seam.

use crate::write::{Aggregator, BatchOutcome, Settings};
use serde_json::{Value, json};
use zae_table::Attr;
use zae_table::Window;
use zae_table::store::Store;
use zae_table::store::StoreError;
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

const NOW: i64 = 1_780_000_000_000;
const PK: &str = "ns/BUCKET#e#r#0";

/// A bucket image (wire format): `rps` 10 tokens of burst, 1 a second.
fn image(rf: i64, tc: i64, tk: i64) -> Value {
    json!({
        "PK": {"S": PK}, "SK": {"S": "#STATE"}, "rf": {"N": rf.to_string()},
        "b_rps_tc": {"N": tc.to_string()}, "b_rps_tk": {"N": tk.to_string()},
        "b_rps_cp": {"N": "10000"}, "b_rps_ra": {"N": "1000"}, "b_rps_rp": {"N": "1000"},
    })
}

fn record(seq: u64, old: &Value, new: &Value) -> String {
    json!({"eventName": "MODIFY", "dynamodb": {
        "ApproximateCreationDateTime": (NOW / 1000) as f64,
        "Keys": {"PK": {"S": PK}, "SK": {"S": "#STATE"}},
        "SequenceNumber": seq.to_string(), "NewImage": new, "OldImage": old}})
    .to_string()
}

fn item(image: &Value) -> zae_table::Item {
    image
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let attr = match (v.get("S"), v.get("N")) {
                (Some(s), _) => Attr::s(s.as_str().unwrap()),
                (_, Some(n)) => Attr::N(n.as_str().unwrap().to_owned()),
                _ => unreachable!("test images hold S and N only"),
            };
            (k.clone(), attr)
        })
        .collect()
}

fn int(table: &MemoryStore, attr: &str) -> i64 {
    table.item(PK, "#STATE").unwrap()[attr].as_int().unwrap()
}

fn aggregator<S: Store>(table: S) -> Aggregator<S> {
    aggregator_at(table, || NOW)
}

/// An aggregator whose clock reads `now` whatever the records say.
fn aggregator_at<S: Store>(table: S, now: crate::write::Clock) -> Aggregator<S> {
    let settings = Settings::for_tests(&[Window::Hourly, Window::Daily], 3, true);
    Aggregator::new(table, settings).with_clock(now)
}

/// A batch that drained `rps` to 1 token, on whatever the table holds.
async fn run<S: Store>(table: S) -> (Aggregator<S>, BatchOutcome) {
    let old = image(NOW - 5_000, 0, 10_000);
    let new = image(NOW - 5_000, 9_000, 1_000);
    let aggregator = aggregator(table);
    let outcome = aggregator
        .process(&[record(1, &old, &new)], "p", NOW / 1000, None)
        .await;
    (aggregator, outcome)
}

fn seeded(stored: &Value) -> MemoryStore {
    let table = MemoryStore::new();
    table.insert(item(stored));
    table
}

#[tokio::test]
async fn a_top_up_lands_through_the_tables_expression_rules() {
    let stored = image(NOW - 5_000, 9_000, 1_000);
    let (aggregator, outcome) = run(seeded(&stored)).await;
    let table = aggregator.store();
    assert_eq!(outcome.stats.refills_written, 1, "{:?}", outcome.errors);
    assert_eq!(int(table, "b_rps_tk"), 6_000, "five seconds of refill");
    assert_eq!(int(table, "rf"), NOW);
    assert_eq!(
        outcome.stats.snapshot_writes, 2,
        "hourly and daily, as before"
    );
}

#[tokio::test]
async fn a_refill_loses_its_race_to_anything_it_read_having_moved() {
    let moved = [
        ("rf", json!({"N": (NOW - 1_000).to_string()})), // a client slow path
        ("b_rps_ra", json!({"N": "5000"})),              // an admin sync, an adaptive factor
        ("b_rps_cp", json!({"N": "20000"})),
        ("b_rps_tk", json!({"N": "2000"})), // a refund: no raise on top of it
        ("vu", json!({"N": "0"})),          // a fan-out closed the fast path
        ("shard_count", json!({"N": "2"})), // a doubling shrank the share
    ];
    for (attr, value) in moved {
        let mut stored = image(NOW - 5_000, 9_000, 1_000);
        stored[attr] = value.clone();
        let (aggregator, outcome) = run(seeded(&stored)).await;
        let table = aggregator.store();
        assert_eq!(
            (outcome.stats.refills_written, outcome.stats.refills_lost),
            (0, 1),
            "{attr} moved"
        );
        assert!(
            outcome.first_failure.is_none() && outcome.errors.is_empty(),
            "{attr}: not an error"
        );
        assert_eq!(
            table.item(PK, "#STATE").unwrap(),
            item(&stored),
            "{attr}: nothing written"
        );
    }
}

/// The aggregator's clock 10 s ahead of the table's, then 10 s behind, on
/// a record DynamoDB wrote at `NOW`. Ahead, the refill credits up to the
/// record's own time and stamps `rf` there, never in the clients' future
/// (where their slow paths would credit nothing until their clocks caught
/// up); behind, it credits nothing and writes nothing. The twin's
/// counterpart of the real client's clock-skew run
/// (`realtime::a_refill_never_stamps_rf_past_the_tables_clock`).
#[tokio::test]
async fn a_refill_never_stamps_rf_past_the_records_own_time() {
    let old = image(NOW - 5_000, 0, 10_000);
    let new = image(NOW - 5_000, 9_000, 1_000);
    let table = seeded(&new);
    let ahead = aggregator_at(table, || NOW + 10_000);
    let outcome = ahead
        .process(&[record(1, &old, &new)], "p", NOW / 1000, None)
        .await;
    let table = ahead.store();
    assert_eq!(outcome.stats.refills_written, 1, "{:?}", outcome.errors);
    assert_eq!(int(table, "rf"), NOW, "the record's time, not the clock's");
    assert_eq!(int(table, "b_rps_tk"), 6_000, "five seconds, not fifteen");

    let behind = aggregator_at(seeded(&new), || NOW - 10_000);
    let outcome = behind
        .process(&[record(1, &old, &new)], "p", NOW / 1000, None)
        .await;
    assert_eq!(outcome.stats.refills_written, 0);
    assert_eq!(behind.store().item(PK, "#STATE").unwrap(), item(&new));
}

/// Every refill write is throttled, every time.
struct ThrottleRefills;

impl Faults for ThrottleRefills {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        match call {
            Call::Update(u) if u.pk == PK => Some(StoreError::Retryable {
                operation: "UpdateItem",
                key: u.pk.clone(),
                message: "injected throttle".into(),
            }),
            _ => None,
        }
    }
}

#[tokio::test]
async fn a_refill_that_keeps_failing_is_dropped_and_counted_never_a_batch_failure() {
    let stored = image(NOW - 5_000, 9_000, 1_000);
    let table = Injected {
        inner: seeded(&stored),
        faults: ThrottleRefills,
    };
    let (aggregator, outcome) = run(table).await;
    let table = aggregator.store();
    assert_eq!(outcome.stats.refills_dropped, 1);
    assert!(
        outcome.first_failure.is_none(),
        "the batch is not redelivered for a refill"
    );
    assert_eq!(
        outcome.stats.snapshot_writes, 2,
        "the snapshots were written all the same"
    );
    assert!(outcome.metrics.iter().any(|m| m.name() == "RefillsDropped"));
    assert_eq!(table.inner.item(PK, "#STATE").unwrap(), item(&stored));
}

#[tokio::test]
async fn the_refills_own_record_triggers_nothing() {
    let before = image(NOW - 5_000, 9_000, 1_000);
    let after = image(NOW, 9_000, 6_000);
    let outcome = aggregator(seeded(&after))
        .process(&[record(2, &before, &after)], "p", NOW / 1000, None)
        .await;
    assert_eq!(
        outcome.stats.refills_written + outcome.stats.refills_lost,
        0
    );
    // In debt and not yet paid off: the reference would write on every batch.
    let debt = |rf: i64, tk: i64| image(rf, 9_000, tk);
    let table = seeded(&debt(NOW - 1_000, -5_000));
    let outcome = aggregator(table)
        .process(
            &[record(
                3,
                &debt(NOW - 2_000, -5_000),
                &debt(NOW - 1_000, -5_000),
            )],
            "p",
            NOW / 1000,
            None,
        )
        .await;
    assert_eq!(outcome.stats.refills_written, 0);
}

#[tokio::test]
async fn a_refill_the_table_rejects_is_skipped_not_an_error() {
    // The client wrote a number past DynamoDB's 38 digits after the record:
    // the twin, as DynamoDB, refuses the refill's arithmetic on it.
    let mut stored = image(NOW - 5_000, 9_000, 1_000);
    stored["b_rps_tk"] = json!({"N": "-1E+125"});
    let (_, outcome) = run(seeded(&stored)).await;
    assert_eq!(outcome.errors, Vec::<String>::new());
    assert_eq!(
        (outcome.stats.refills_skipped, outcome.stats.refills_dropped),
        (1, 0)
    );
    assert!(outcome.first_failure.is_none());
}
