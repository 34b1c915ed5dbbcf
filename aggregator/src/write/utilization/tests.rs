//! The sensor's writes on the in-memory twin of the table: what is counted
//! along a three-level cascade, what a declaration leaves out, refunds,
//! canaries, and failures.
use super::*;
use crate::write::Settings;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::{Declaration, canary, usage};
use zae_table::keys;
use zae_table::store::Counted;
use zae_table::{Item, Window};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// 2026-11-30T10:00:00Z, a minute start, in seconds.
const MINUTE_S: i64 = 1_796_032_800;

fn settings() -> Settings {
    Settings::for_tests(&[Window::Hourly], 2, false)
}

fn declaration(resource: &str) -> Item {
    Declaration {
        capacity: BTreeMap::from([(
            resource.to_owned(),
            BTreeMap::from([("tpm".to_owned(), 100_000)]),
        )]),
        levels: Vec::new(),
        ..Declaration::default()
    }
    .to_item("ns")
}

/// A bucket image with its cascade stamp.
fn image(entity: &str, tc: i64, parent: Option<&str>) -> Value {
    let mut image = json!({
        "PK": {"S": format!("ns/BUCKET#{entity}#r#0")}, "SK": {"S": "#STATE"},
        "b_tpm_tc": {"N": (tc * 1000).to_string()}, "b_tpm_tk": {"N": "0"},
        "cascade": {"BOOL": parent.is_some()},
    });
    if let Some(parent) = parent {
        image["parent_id"] = json!({"S": parent});
    }
    image
}

/// The bucket items themselves, for the cascade stamps the sensor reads.
fn bucket_item(entity: &str, parent: Option<&str>) -> Item {
    let mut item = Item::from([
        ("PK".to_owned(), Attr::s(format!("ns/BUCKET#{entity}#r#0"))),
        ("SK".to_owned(), Attr::s("#STATE")),
        ("cascade".to_owned(), Attr::Bool(parent.is_some())),
        ("b_tpm_cp".to_owned(), Attr::n(1_000_000_000)),
    ]);
    if let Some(parent) = parent {
        item.insert("parent_id".into(), Attr::s(parent));
    }
    item
}

struct Batch {
    records: Vec<String>,
    counters: BTreeMap<String, i64>,
}

impl Batch {
    fn new() -> Self {
        Batch {
            records: Vec::new(),
            counters: BTreeMap::new(),
        }
    }

    /// One debit (or refund) of `tokens` on an entity's bucket.
    fn debit(&mut self, entity: &str, parent: Option<&str>, tokens: i64) -> &mut Self {
        let before = self.counters.get(entity).copied().unwrap_or(0);
        let after = before + tokens;
        self.counters.insert(entity.to_owned(), after);
        let n = self.records.len();
        self.records.push(
            json!({"eventName": "MODIFY", "dynamodb": {
                "ApproximateCreationDateTime": MINUTE_S + 1 + n as i64,
                "Keys": {"PK": {"S": format!("ns/BUCKET#{entity}#r#0")}, "SK": {"S": "#STATE"}},
                "SequenceNumber": (1000 + n).to_string(),
                "NewImage": image(entity, after, parent), "OldImage": image(entity, before, parent)}})
            .to_string(),
        );
        self
    }

    fn canary(&mut self, tick_ms: i64, index: u32) -> &mut Self {
        let n = self.records.len() as u64;
        let item = canary::item(tick_ms, index);
        self.records.push(zae_test_support::stream::record(
            1000 + n,
            MINUTE_S + 1 + n as i64,
            &item,
            None,
        ));
        self
    }
}

/// Org <- team <- key, both lower levels cascading, as the client allows.
fn cascade_table() -> MemoryStore {
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    table.insert(bucket_item("org", None));
    table.insert(bucket_item("team", Some("org")));
    table.insert(bucket_item("key", Some("team")));
    table
}

fn used(table: &MemoryStore, resource: &str) -> Option<i64> {
    let item = table.item(
        &keys::pk_adaptive("ns"),
        &keys::sk_adaptive_usage(MINUTE_S * 1000, resource),
    )?;
    usage::Minute::from_item(&item)?.used.get("tpm").copied()
}

/// Each request as the client writes it: its entity's bucket, and its
/// parent's when the entity's bucket cascades (one level, never two).
fn three_level_requests(batch: &mut Batch) {
    batch
        .debit("key", Some("team"), 100)
        .debit("team", Some("org"), 100)
        .debit("team", Some("org"), 10)
        .debit("org", None, 10)
        .debit("org", None, 1);
}

#[tokio::test]
async fn a_three_level_cascade_counts_each_request_once() {
    let agg = Aggregator::new(cascade_table(), settings());
    let mut batch = Batch::new();
    three_level_requests(&mut batch);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    // 100 from key, 10 from team, 1 from org: 111 tokens, not 221.
    assert_eq!(used(agg.store(), "r"), Some(111_000));
    assert_eq!(outcome.stats.usage_writes, 1);
}

/// The client debits a parent only for the limits the parent has: a
/// child's `tpm` under an `rpm`-only parent has no copy above it, and counts.
#[tokio::test]
async fn a_limit_the_parent_does_not_track_is_counted_on_the_child() {
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    let mut rpm_only = bucket_item("org", None);
    rpm_only.remove("b_tpm_cp");
    rpm_only.insert("b_rpm_cp".into(), Attr::n(1_000_000));
    table.insert(rpm_only);
    table.insert(bucket_item("key", Some("org")));
    let agg = Aggregator::new(table, settings());
    let mut batch = Batch::new();
    batch.debit("key", Some("org"), 40);
    agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(used(agg.store(), "r"), Some(40_000));
}

#[tokio::test]
async fn a_parent_without_a_bucket_took_no_copy() {
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    table.insert(bucket_item("key", Some("team")));
    let agg = Aggregator::new(table, settings());
    let mut batch = Batch::new();
    batch.debit("key", Some("team"), 7);
    agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(used(agg.store(), "r"), Some(7_000));
}

/// Reads of cascade stamps fail: the bucket is counted, over and not under.
struct StampsFail;
impl Faults for StampsFail {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        match call {
            Call::Get { pk, .. } if pk.contains("BUCKET#") => Some(StoreError::Retryable {
                operation: "GetItem",
                key: (*pk).to_owned(),
                message: "injected".into(),
            }),
            _ => None,
        }
    }
}

#[tokio::test]
async fn an_unreadable_stamp_over_counts() {
    let table = Injected {
        inner: cascade_table(),
        faults: StampsFail,
    };
    let agg = Aggregator::new(table, settings());
    let mut batch = Batch::new();
    three_level_requests(&mut batch);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none());
    // Key's and team's: org's bucket does not cascade.
    assert_eq!(outcome.stats.cascade_lookups_failed, 2);
    // Every bucket counted: the copies too.
    assert_eq!(used(&agg.store().inner, "r"), Some(221_000));
}

/// Records the length of every key the sensor reads; fails nothing.
#[derive(Default)]
struct ReadKeys(std::sync::Mutex<Vec<usize>>);
impl Faults for ReadKeys {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        if let (Call::Get { pk, .. }, Ok(mut read)) = (call, self.0.lock()) {
            read.push(pk.len());
        }
        None
    }
}

/// A `parent_id` of 2 KB (a hand-written item: the 0.17.0 client caps it
/// at 256) is no parent: no read DynamoDB would refuse (the key is past
/// 2,048 bytes), the bucket's use counted once, the parent counted as
/// skipped, and nothing the batch reports carries the 2 KB id.
#[tokio::test]
async fn a_parent_id_past_the_clients_cap_is_no_parent_and_is_never_read() {
    let long = "p".repeat(2_048);
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    table.insert(bucket_item("key", Some(&long)));
    let agg = Aggregator::new(
        Injected {
            inner: table,
            faults: ReadKeys::default(),
        },
        settings(),
    );
    let mut batch = Batch::new();
    batch
        .debit("key", Some(&long), 7)
        .debit("key", Some(&long), 3);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    let read = agg.store().faults.0.lock().unwrap().clone();
    assert!(
        read.iter().all(|&len| len <= 2_048),
        "read keys of {read:?} bytes"
    );
    assert_eq!(outcome.stats.cascade_lookups_failed, 0, "no refused read");
    assert_eq!(outcome.stats.parents_beyond_caps, 1, "once per batch");
    assert_eq!(used(&agg.store().inner, "r"), Some(10_000));
    assert!(outcome.errors.iter().all(|e| e.len() < 1_000));
    let skipped = outcome.metrics.iter().find_map(|m| match m {
        crate::metrics::MetricEvent::Count { name, count, .. }
            if *name == crate::metrics::RECORDS_SKIPPED =>
        {
            Some(*count)
        }
        _ => None,
    });
    assert_eq!(skipped, Some(1), "counted as a bucket past the caps is");
}

#[tokio::test]
async fn only_declared_resources_and_limits_are_sensed() {
    let table = MemoryStore::new();
    table.insert(declaration("other"));
    let agg = Aggregator::new(table, settings());
    let mut batch = Batch::new();
    batch.debit("a", None, 5);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.usage_writes, 0);
    assert_eq!(used(agg.store(), "r"), None);
    // Nor a namespace that declares nothing.
    let agg = Aggregator::new(MemoryStore::new(), settings());
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.usage_writes, 0);
}

#[tokio::test]
async fn a_refund_in_the_same_delivery_is_netted() {
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    let agg = Aggregator::new(table, settings());
    let mut batch = Batch::new();
    batch.debit("a", None, 1_000).debit("a", None, -400);
    agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(used(agg.store(), "r"), Some(600_000));
}

#[tokio::test]
async fn canaries_join_their_ticks_sensed_sets_and_are_no_skipped_records() {
    let table = MemoryStore::new();
    let agg = Aggregator::new(table, settings());
    let mut batch = Batch::new();
    batch
        .canary(5_000, 0)
        .canary(6_000, 1)
        .canary(5_000, 2)
        .canary(5_000, 0);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!((outcome.stats.skipped, outcome.stats.ignored), (0, 0));
    let sensed = zae_table::adaptive::tick::Tick::sensed(agg.store())
        .await
        .unwrap();
    assert_eq!(
        sensed,
        vec![(5_000, 2), (6_000, 1)],
        "a set: the repeat adds nothing"
    );
    // Delivered again, in any order: the same sets.
    batch.records.reverse();
    agg.process(&batch.records, "p", MINUTE_S, None).await;
    let again = zae_table::adaptive::tick::Tick::sensed(agg.store())
        .await
        .unwrap();
    assert_eq!(again, sensed);
}

#[tokio::test]
async fn a_canary_of_an_earlier_controller_is_read_past() {
    let mut legacy = canary::item(5_000, 0);
    legacy.insert("PK".into(), Attr::s("ns/ADAPTIVE#CANARY#0"));
    let records = vec![zae_test_support::stream::record(1, MINUTE_S, &legacy, None)];
    let agg = Aggregator::new(MemoryStore::new(), settings());
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none());
    assert_eq!((outcome.stats.skipped, outcome.stats.ignored), (0, 1));
}

/// Usage writes fail for good.
struct UsageFails;
impl Faults for UsageFails {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        match call {
            Call::Update(u)
                if u.pk == keys::pk_adaptive("ns") && u.sk.starts_with(keys::SK_ADAPTIVE_USAGE) =>
            {
                Some(StoreError::Retryable {
                    operation: "UpdateItem",
                    key: u.pk.clone(),
                    message: "injected".into(),
                })
            }
            _ => None,
        }
    }
}

#[tokio::test]
async fn a_usage_write_that_fails_redelivers_from_its_first_record_before_any_canary_counts() {
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    let agg = Aggregator::new(
        Injected {
            inner: table,
            faults: UsageFails,
        },
        settings(),
    );
    let mut batch = Batch::new();
    batch
        .debit("a", None, 5)
        .debit("a", None, 5)
        .canary(9_000, 0);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(
        outcome.first_failure.map(|s| s.as_stream().to_owned()),
        Some("1000".to_owned())
    );
    // The canary came after the lost usage: it waits for the redelivery.
    assert_eq!(outcome.stats.canaries_sensed, 0);
    let sensed = zae_table::adaptive::tick::Tick::sensed(&agg.store().inner)
        .await
        .unwrap();
    assert!(sensed.is_empty());
    assert_eq!(outcome.errors.len(), 1, "{:?}", outcome.errors);
    assert!(
        outcome.errors[0].contains("ns/ADAPTIVE#"),
        "{:?}",
        outcome.errors
    );
}

/// The clock of the repair tests: a minute after the controller's last tick.
fn ten_past() -> i64 {
    MINUTE_S * 1000 + 60_000
}

/// A namespace where the controller set `tpm` on `r` to 5x and ticked at
/// `ticked_at`, with `e`'s bucket (`cp`, `ra`) in the table and on the stream.
async fn adaptive_table(ticked_at: i64, cp: i64, ra: i64) -> (MemoryStore, Vec<String>) {
    use zae_table::adaptive::tick::Tick;
    let store = zae_test_support::adaptive::table("ns", 0);
    zae_test_support::adaptive::five_times(&store, "ns", 1).await;
    let mut tick = Tick::default();
    tick.ticked(ticked_at, None);
    store.update(&tick.write(), Returns::Nothing).await.unwrap();
    store.insert(zae_test_support::adaptive::bucket("ns", "e", cp, ra));
    let image = json!({
        "PK": {"S": "ns/BUCKET#e#r#0"}, "SK": {"S": "#STATE"},
        "b_tpm_cp": {"N": cp.to_string()}, "b_tpm_ra": {"N": ra.to_string()},
        "b_tpm_rp": {"N": "60000"}, "b_tpm_tk": {"N": "0"}, "b_tpm_tc": {"N": "1000"},
    });
    let mut old = image.clone();
    old["b_tpm_tc"] = json!({"N": "0"});
    let record = json!({"eventName": "MODIFY", "dynamodb": {
        "ApproximateCreationDateTime": MINUTE_S + 1,
        "Keys": {"PK": {"S": "ns/BUCKET#e#r#0"}, "SK": {"S": "#STATE"}},
        "SequenceNumber": "1000", "NewImage": image, "OldImage": old}});
    (store, vec![record.to_string()])
}

fn tpm_ra(store: &MemoryStore) -> Attr {
    store.item("ns/BUCKET#e#r#0", "#STATE").unwrap()["b_tpm_ra"].clone()
}

#[tokio::test]
async fn a_bucket_seen_at_base_is_stamped_with_its_targets_factor() {
    let (store, records) = adaptive_table(ten_past() - 60_000, 10_000_000, 1_000_000).await;
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(5_000_000));
    // Its own record shows the stamp in place: nothing more.
    let again = agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(again.stats.stamps_repaired, 0);
}

/// Past the batch's deadline the repair stops: the bucket is repaired when
/// the stream shows it again, never at the cost of answering late.
#[tokio::test]
async fn a_repair_past_the_deadline_waits_for_the_buckets_next_batch() {
    let (store, records) = adaptive_table(ten_past() - 60_000, 10_000_000, 1_000_000).await;
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let late = agg
        .process(&records, "p", MINUTE_S, Some(std::time::Instant::now()))
        .await;
    assert_eq!(late.stats.stamps_repaired, 0, "{:?}", late.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(1_000_000));
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
}

/// `adaptive_table` with a second bucket, `f`'s, at base beside `e`'s: both
/// records ask for a repair.
async fn two_buckets_at_base() -> (MemoryStore, Vec<String>) {
    let (store, mut records) = adaptive_table(ten_past() - 60_000, 10_000_000, 1_000_000).await;
    store.insert(zae_test_support::adaptive::bucket(
        "ns", "f", 10_000_000, 1_000_000,
    ));
    let f = records[0]
        .replace("BUCKET#e#", "BUCKET#f#")
        .replace("\"1000\"", "\"1001\"");
    records.push(f);
    (store, records)
}

/// The repair's transaction on `f`'s bucket takes ten seconds: a slow table.
struct SlowRepairOfF;
impl Faults for SlowRepairOfF {
    fn delay(&self, call: &Call<'_>) -> Option<Duration> {
        let Call::Transact(writes) = call else {
            return None;
        };
        let on_f = writes.iter().any(
            |w| matches!(w, zae_table::store::TxWrite::Update(u) if u.pk == "ns/BUCKET#f#r#0"),
        );
        on_f.then_some(Duration::from_secs(10))
    }
}

/// A repair the deadline stops is counted in `repairs_failed`, as
/// docs/security.md says, whether the deadline came before the repair
/// started or part-way through it (a slow table, injected at the store
/// seam: neither moto nor DynamoDB Local can be made slow on one call).
/// Before, both were only a log line: `repairs_failed` stayed 0.
#[tokio::test(start_paused = true)]
async fn a_repair_the_deadline_stops_is_counted_as_failed() {
    let (store, records) = two_buckets_at_base().await;
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let late = agg
        .process(
            &records,
            "p",
            MINUTE_S,
            Some(tokio::time::Instant::now().into_std()),
        )
        .await;
    assert_eq!(
        (late.stats.stamps_repaired, late.stats.repairs_failed),
        (0, 2),
        "not started: both left"
    );
    let (store, records) = two_buckets_at_base().await;
    let slow = Injected {
        inner: store,
        faults: SlowRepairOfF,
    };
    let agg = Aggregator::new(slow, settings()).with_clock(ten_past);
    let started = tokio::time::Instant::now();
    let deadline = started.into_std() + Duration::from_secs(3);
    let cut = agg.process(&records, "p", MINUTE_S, Some(deadline)).await;
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "answered in time"
    );
    assert_eq!(
        (cut.stats.stamps_repaired, cut.stats.repairs_failed),
        (1, 1),
        "e repaired, f stopped at the deadline: {:?}",
        cut.stats
    );
}

#[tokio::test]
async fn with_the_controller_stopped_five_minutes_a_bucket_seen_goes_back_to_base() {
    let stopped = ten_past() - repair::STOPPED_AFTER_MS - 1;
    let (store, records) = adaptive_table(stopped, 10_000_000, 5_000_000).await;
    let record = carrying(&store, &records[0], 5_000_000, 1);
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&[record], "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(1_000_000));
    let bucket = agg.store().item("ns/BUCKET#e#r#0", "#STATE").unwrap();
    assert_eq!(bucket["vu"], Attr::n(0));
}

/// The table's controller ticks (other namespaces), but this namespace's
/// target was last ticked over five minutes ago: its namespace left the
/// registry, or its ticks keep failing. Its buckets seen go back to base,
/// as under a stopped controller; the repair used to go on stamping the
/// factor nobody evaluated any more.
#[tokio::test]
async fn a_target_no_controller_ticks_any_more_sends_its_buckets_seen_to_base() {
    let (store, records) = adaptive_table(ten_past() - 60_000, 10_000_000, 5_000_000).await;
    let record = carrying(&store, &records[0], 5_000_000, 1);
    let (pk, sk) = Target::key("ns", "r", "tpm");
    let mut target = Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
    target.ticked_at_ms = Some(ten_past() - repair::STOPPED_AFTER_MS - 1);
    store
        .update(&target.write("ns", Some(1)), Returns::Nothing)
        .await
        .unwrap();
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&[record], "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(1_000_000));
}

#[tokio::test]
async fn a_bucket_on_other_parameters_is_not_repaired() {
    let (store, records) = adaptive_table(ten_past() - 60_000, 7_000_000, 700_000).await;
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 0);
    assert_eq!(tpm_ra(agg.store()), Attr::n(700_000));
}

/// A bucket record of `r` admitting `tokens` (its `tc` from `before` on),
/// leaving `tk` tokens, written at the record's instant (`rf`), with base
/// parameters 1,000 a minute and a burst of 10,000.
fn admitted(n: usize, entity: &str, (before, tokens): (i64, i64), tk: i64) -> String {
    let at_s = MINUTE_S + 1 + n as i64;
    let image = |tc: i64| {
        json!({
            "PK": {"S": format!("ns/BUCKET#{entity}#r#0")}, "SK": {"S": "#STATE"},
            "b_tpm_tc": {"N": (tc * 1000).to_string()}, "b_tpm_tk": {"N": (tk * 1000).to_string()},
            "b_tpm_cp": {"N": "10000000"}, "b_tpm_ra": {"N": "1000000"},
            "b_tpm_rp": {"N": "60000"}, "rf": {"N": (at_s * 1000).to_string()},
        })
    };
    json!({"eventName": "MODIFY", "dynamodb": {
        "ApproximateCreationDateTime": at_s,
        "Keys": {"PK": {"S": format!("ns/BUCKET#{entity}#r#0")}, "SK": {"S": "#STATE"}},
        "SequenceNumber": (1000 + n).to_string(),
        "NewImage": image(before + tokens), "OldImage": image(before)}})
    .to_string()
}

fn demand_table() -> MemoryStore {
    let table = MemoryStore::new();
    let mut declaration = Declaration::from_item(&declaration("r")).unwrap();
    declaration.demand.insert("r".to_owned());
    table.insert(declaration.to_item("ns"));
    table
}

fn demand(table: &MemoryStore) -> zae_table::adaptive::demand::Demand {
    let items: Vec<Item> = table
        .items()
        .into_iter()
        .filter(|i| {
            i.get("SK")
                .and_then(Attr::as_s)
                .is_some_and(|sk| sk.starts_with("#DEMAND#"))
        })
        .collect();
    zae_table::adaptive::demand::Demand::from_items(&items, "tpm")
}

#[tokio::test]
async fn an_entity_left_without_room_is_listed_with_its_use_and_a_light_one_is_not() {
    let agg = Aggregator::new(demand_table(), settings());
    let records = vec![
        // heavy: 100 admitted, 40 left: another 100 does not fit.
        admitted(0, "heavy", (0, 100), 40),
        admitted(1, "heavy", (100, 30), 10),
        // light: 10 admitted, 5,000 left.
        admitted(2, "light", (0, 10), 5_000),
    ];
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(outcome.stats.demand_listed, 1);
    let d = demand(agg.store());
    assert_eq!(d.entities.len(), 1, "{d:?}");
    assert_eq!(d.entities["heavy"].used, 130_000);
    assert!(d.entities["heavy"].saturated);
    // A second batch adds to the same entity, not a second entry.
    let again = vec![admitted(3, "heavy", (130, 20), 0)];
    agg.process(&again, "p", MINUTE_S, None).await;
    let d = demand(agg.store());
    assert_eq!((d.entities.len(), d.entities["heavy"].used), (1, 150_000));
}

/// A table whose minute already lists 1,000 entities (the cap).
fn full_demand_table() -> MemoryStore {
    let table = demand_table();
    let minute_ms = MINUTE_S * 1000;
    let mut full = Item::new();
    for (name, value) in [
        ("PK", Attr::s(keys::pk_adaptive("ns"))),
        ("SK", Attr::s(keys::sk_adaptive_demand(minute_ms, "r", ""))),
        (
            zae_table::adaptive::demand::COUNT,
            Attr::n(zae_table::adaptive::demand::ENTITIES_KEPT),
        ),
    ] {
        full.insert(name.to_owned(), value);
    }
    table.insert(full);
    table
}

/// `admitted`, from a bucket carrying a 7x raise of ours.
fn raised_admitted(n: usize, entity: &str, (before, tokens): (i64, i64), tk: i64) -> String {
    let mut record: Value =
        serde_json::from_str(&admitted(n, entity, (before, tokens), tk)).unwrap();
    for image in ["NewImage", "OldImage"] {
        let image = &mut record["dynamodb"][image];
        image["b_tpm_ra"] = json!({"N": "7000000"});
        image["ad_g_tpm"] = json!({"N": "2"});
        image["ad_ra_tpm"] = json!({"N": "7000000"});
        image["ad_pre_tpm"] = json!({"N": "1000000"});
    }
    record.to_string()
}

#[tokio::test]
async fn past_the_cap_an_entity_is_left_out_and_counted() {
    let agg = Aggregator::new(full_demand_table(), settings());
    let outcome = agg
        .process(&[admitted(0, "heavy", (0, 100), 0)], "p", MINUTE_S, None)
        .await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(
        (outcome.stats.demand_listed, outcome.stats.demand_overflow),
        (0, 1)
    );
    let d = demand(agg.store());
    assert!(d.entities.is_empty() && d.overflow == 1, "{d:?}");
}

/// An entity left out is counted once by this instance, and a later batch
/// of its minute costs it one call; a newcomer to a minute known full skips
/// the transaction. An earlier version made three calls per entity and
/// batch, and counted the overflow per batch.
#[tokio::test]
async fn past_the_cap_an_entity_is_counted_once_and_costs_one_call_a_batch() {
    let agg = Aggregator::new(Counted::new(full_demand_table()), settings());
    let first = [admitted(0, "heavy", (0, 100), 0)];
    let outcome = agg.process(&first, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.demand_overflow, 1, "{:?}", outcome.errors);
    agg.store().reset();
    let second = [
        admitted(1, "heavy", (100, 200), 0),
        admitted(2, "newcomer", (0, 100), 0),
    ];
    let outcome = agg.process(&second, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(outcome.stats.demand_overflow, 1, "the newcomer only");
    let counts = agg.store().counts();
    assert_eq!(counts.get("TransactWriteItems"), None, "{counts:?}");
    let d = demand(agg.store().inner());
    assert!(d.entities.is_empty() && d.overflow == 2, "{d:?}");
}

/// A raised entity (an allocation of the controller's behind its stamp)
/// is listed whenever it is used, outside the cap, and
/// takes no newcomer's place: an earlier version left it out past the cap,
/// and the controller then held every unlisted raise, idle or deleted ones
/// included, for as long as the resource overflowed.
#[tokio::test]
async fn past_the_cap_a_raised_entity_is_listed_all_the_same() {
    let table = full_demand_table();
    let allocation = zae_test_support::adaptive::raised("raised", 7, 2);
    table
        .update(&allocation.write("ns"), Returns::Nothing)
        .await
        .unwrap();
    let agg = Aggregator::new(table, settings());
    let records = [raised_admitted(0, "raised", (0, 100), 5_000)];
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(
        (outcome.stats.demand_listed, outcome.stats.demand_overflow),
        (1, 0)
    );
    let d = demand(agg.store());
    assert_eq!(d.entities["raised"].used, 100_000, "{d:?}");
    assert_eq!(d.overflow, 0, "{d:?}");
    let header = agg
        .store()
        .item(
            &keys::pk_adaptive("ns"),
            &keys::sk_adaptive_demand(MINUTE_S * 1000, "r", ""),
        )
        .unwrap();
    let count = header[zae_table::adaptive::demand::COUNT].as_int();
    assert_eq!(
        count,
        Some(zae_table::adaptive::demand::ENTITIES_KEPT),
        "no slot taken"
    );
}

/// A record of `entity`'s bucket at `at_s`, 100 admitted and nothing left
/// (short), its image carrying a 7x stamp record the client wrote itself:
/// the acquire policy lets it write any attribute of its own bucket, the
/// controller's `ad_g`/`ad_ra`/`ad_pre` included.
fn forged(n: usize, entity: &str, at_s: i64) -> String {
    let mut record: Value = serde_json::from_str(&raised_admitted(n, entity, (0, 100), 0)).unwrap();
    record["dynamodb"]["ApproximateCreationDateTime"] = json!(at_s);
    for image in ["NewImage", "OldImage"] {
        record["dynamodb"][image]["rf"] = json!({"N": (at_s * 1000).to_string()});
    }
    record.to_string()
}

/// The controller's tick at `now_ms`, its canaries sensed (one shard).
async fn control_tick(store: &MemoryStore, now_ms: i64) {
    let indices: Vec<u32> = (0..4).collect();
    store
        .update(&canary::sense(now_ms, &indices), Returns::Nothing)
        .await
        .unwrap();
    let controller = crate::control::Controller {
        store,
        shards: &crate::control::stream_shards::Fixed(1),
        stop_at: None,
        wait: None,
    };
    let tick = controller.tick_all(now_ms).await.unwrap();
    assert!(tick.failed.is_empty(), "{tick:?}");
}

/// A client forges the controller's stamp record on the buckets of many
/// entities, none of which the controller raised, in a minute whose listing
/// is full. Before, "raised" was read from those fields alone: every forged
/// entity was listed outside the cap (the listing grew past it), as
/// saturated, and the next tick drew each an allocation of spare capacity.
/// "Raised" now needs an allocation the controller wrote: the forged
/// entities meet the cap like any other, and nothing is allocated.
#[tokio::test]
async fn a_forged_stamp_record_neither_grows_the_listing_nor_draws_an_allocation() {
    let store = zae_test_support::adaptive::table("ns", 5);
    zae_test_support::adaptive::share_by_demand(&store, "ns").await;
    let minute_ms = |m: i64| MINUTE_S * 1000 + m * 60_000;
    // The target's minutes begin: tick `m` then evaluates minute `m - 1`.
    for m in 0..3 {
        control_tick(&store, minute_ms(m) + 5_000).await;
    }
    let mut full = Item::new();
    full.insert("PK".into(), Attr::s(keys::pk_adaptive("ns")));
    let header = keys::sk_adaptive_demand(minute_ms(3), "r", "");
    full.insert("SK".into(), Attr::s(&header));
    let cap = zae_table::adaptive::demand::ENTITIES_KEPT;
    full.insert(zae_table::adaptive::demand::COUNT.into(), Attr::n(cap));
    store.insert(full);
    let records: Vec<String> = (0..5)
        .map(|i| forged(i, &format!("e{i}"), MINUTE_S + 181 + i as i64))
        .collect();
    let agg = Aggregator::new(store, settings());
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    let store = agg.store();
    let listed = store
        .items()
        .into_iter()
        .filter(|i| {
            i.get("SK")
                .and_then(Attr::as_s)
                .is_some_and(|sk| sk.starts_with(&header) && sk.len() > header.len())
        })
        .count();
    assert_eq!(listed, 0, "the listing grew past its cap of {cap}");
    assert_eq!(outcome.stats.demand_overflow, 5, "{:?}", outcome.stats);
    control_tick(store, minute_ms(4) + 5_000).await;
    let allocated = zae_table::adaptive::allocation::Allocated::read(store, "ns", "r", "tpm")
        .await
        .unwrap();
    assert!(allocated.is_empty(), "allocations drawn: {allocated:?}");
}

/// `adaptive_table`, shared by demand, with `e` raised to 7x.
async fn raised_table(ticked_at: i64, ra: i64) -> (MemoryStore, Vec<String>) {
    raised_under(ticked_at, ra, 2).await
}

/// `raised_table` with `e`'s allocation under `generation` (the target's is 1).
async fn raised_under(ticked_at: i64, ra: i64, generation: i64) -> (MemoryStore, Vec<String>) {
    let (store, records) = adaptive_table(ticked_at, 10_000_000, ra).await;
    zae_test_support::adaptive::share_by_demand(&store, "ns").await;
    let raised = zae_test_support::adaptive::raised("e", 7, generation);
    store
        .update(&raised.write("ns"), Returns::Nothing)
        .await
        .unwrap();
    (store, records)
}

/// A shard the client creates at base (or an admin sync) is stamped with
/// its entity's allocation, not the target's factor.
#[tokio::test]
async fn a_raised_entitys_bucket_seen_at_base_gets_its_allocation() {
    let (store, records) = raised_table(ten_past() - 60_000, 1_000_000).await;
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(7_000_000));
    let bucket = agg.store().item("ns/BUCKET#e#r#0", "#STATE").unwrap();
    assert_eq!(
        bucket["ad_g_tpm"],
        Attr::n(2),
        "under the allocation's generation"
    );
}

#[tokio::test]
async fn with_the_controller_stopped_a_raised_entity_goes_back_to_base() {
    let stopped = ten_past() - repair::STOPPED_AFTER_MS - 1;
    let (store, records) = raised_table(stopped, 1_000_000).await;
    // Its bucket carries the allocation's stamp.
    let record = carrying_the_raise(&store, &records[0], 2);
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&[record], "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(1_000_000));
}

/// A lap since the allocation (a declaration change) stamped the entity
/// under the target's newer generation; an admin sync then wrote base over
/// it. The repair stamps the allocation again, under the target's generation
/// (under the allocation's older one, the bucket's record would refuse it).
#[tokio::test]
async fn a_raised_entity_synced_after_a_lap_gets_its_allocation_back() {
    let (store, records) = raised_under(ten_past() - 60_000, 1_000_000, 0).await;
    let mut image: Value = serde_json::from_str(&records[0]).unwrap();
    for side in ["NewImage", "OldImage"] {
        let i = &mut image["dynamodb"][side];
        i["ad_g_tpm"] = json!({"N": "1"});
        i["ad_ra_tpm"] = json!({"N": "7000000"});
        i["ad_pre_tpm"] = json!({"N": "1000000"});
    }
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&[image.to_string()], "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(7_000_000));
}

/// `image`'s bucket and its record carrying `e`'s 7x raise under `generation`.
fn carrying_the_raise(store: &MemoryStore, record: &str, generation: i64) -> String {
    carrying(store, record, 7_000_000, generation)
}

/// `image`'s bucket and its record carrying a stamp of `ra` under `generation`.
fn carrying(store: &MemoryStore, record: &str, ra: i64, generation: i64) -> String {
    let mut bucket = store.item("ns/BUCKET#e#r#0", "#STATE").unwrap();
    let stamp = [
        ("b_tpm_ra", ra),
        ("ad_g_tpm", generation),
        ("ad_ra_tpm", ra),
        ("ad_pre_tpm", 1_000_000),
    ];
    for (name, value) in stamp {
        bucket.insert(name.to_owned(), Attr::n(value));
    }
    store.insert(bucket);
    let mut image: Value = serde_json::from_str(record).unwrap();
    for side in ["NewImage", "OldImage"] {
        for (name, value) in stamp {
            image["dynamodb"][side][name] = json!({"N": value.to_string()});
        }
    }
    image.to_string()
}

/// The controller withdraws `e`'s raise (its allocation rewritten at base
/// under a newer generation before its stamps) while an aggregator's cache
/// still holds the raise; a shard the client creates meanwhile, at base,
/// reaches that aggregator. Its repair's transaction checks the allocation
/// it read, so the withdrawn raise is never stamped, and the next read sees
/// the withdrawal. An earlier repair checked the target alone and stamped
/// the new shard 7x, which nothing then reached.
#[tokio::test]
async fn a_withdrawn_raise_is_never_stamped_from_the_repairs_cache() {
    let (store, records) = raised_table(ten_past() - 60_000, 1_000_000).await;
    let at_base = store.item("ns/BUCKET#e#r#0", "#STATE").unwrap();
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    // Warms the cache with the raise (and stamps it).
    agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(tpm_ra(agg.store()), Attr::n(7_000_000));
    let mut withdrawn = zae_test_support::adaptive::raised("e", 1, 3);
    withdrawn.pending = true;
    agg.store()
        .update(&withdrawn.write("ns"), Returns::Nothing)
        .await
        .unwrap();
    // The new shard, at base, as the client creates it.
    agg.store().insert(at_base);
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 0, "{:?}", outcome.stats);
    assert_eq!(
        tpm_ra(agg.store()),
        Attr::n(1_000_000),
        "never the withdrawn raise"
    );
}

/// A shard cloned from shard 0 after the controller's lap read the shard
/// count carries the raise its lap withdrew from the others, and no
/// allocation stands behind it any more. Its repair takes it back to the
/// target's factor (5x in this table), under the stamp's own generation (the
/// transaction checks there is still no allocation). An earlier repair
/// stamped under the target's older generation, which the orphan's record
/// refused: it kept the raise for good.
#[tokio::test]
async fn an_orphaned_raise_goes_back_to_the_targets_factor() {
    let (store, records) = raised_table(ten_past() - 60_000, 7_000_000).await;
    let record = carrying_the_raise(&store, &records[0], 2);
    let raised = zae_test_support::adaptive::raised("e", 7, 2);
    raised.remove(&store, "ns").await.unwrap();
    let agg = Aggregator::new(store, settings()).with_clock(ten_past);
    let outcome = agg.process(&[record], "p", MINUTE_S, None).await;
    assert_eq!(outcome.stats.stamps_repaired, 1, "{:?}", outcome.stats);
    assert_eq!(tpm_ra(agg.store()), Attr::n(5_000_000), "the target's 5x");
}

/// Reads of the namespace's declaration fail.
struct DeclarationFails;
impl Faults for DeclarationFails {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        match call {
            Call::Get { sk, .. } if *sk == keys::SK_ADAPTIVE_DECLARATION => {
                Some(StoreError::Retryable {
                    operation: "GetItem",
                    key: "ns/ADAPTIVE#".into(),
                    message: "injected".into(),
                })
            }
            _ => None,
        }
    }
}

/// The sensor's runs are keyed by bucket, not in stream order: `a`'s run
/// comes first although `b`'s record is the batch's first. A declaration
/// that cannot be read is reported from the earliest record it left
/// unsensed, so that the canary between them waits for the redelivery
/// instead of completing a minute without `b`'s use.
#[tokio::test]
async fn a_declaration_that_cannot_be_read_redelivers_from_the_earliest_unsensed_record() {
    let table = MemoryStore::new();
    table.insert(declaration("r"));
    let agg = Aggregator::new(
        Injected {
            inner: table,
            faults: DeclarationFails,
        },
        settings(),
    );
    let mut batch = Batch::new();
    batch
        .debit("b", None, 5)
        .canary(9_000, 0)
        .debit("a", None, 5);
    let outcome = agg.process(&batch.records, "p", MINUTE_S, None).await;
    assert_eq!(
        outcome.first_failure.map(|s| s.as_stream().to_owned()),
        Some("1000".to_owned())
    );
    assert_eq!(outcome.stats.canaries_sensed, 0);
}

/// A principal's own bucket under an entity id of 1,100 characters, short
/// on a `share: demand` resource: its listing's sort key
/// (`#DEMAND#{minute}#{resource}#{entity}`) would pass 1,024 bytes, which
/// the twin refuses as DynamoDB does. Past the client's cap (256), its
/// records are skipped and counted; the batch completes and the genuine
/// entity is listed.
#[tokio::test]
async fn an_entity_past_the_clients_cap_lists_no_demand_and_fails_no_batch() {
    let long = "h".repeat(1_100);
    let agg = Aggregator::new(demand_table(), settings());
    let records = vec![
        admitted(0, &long, (0, 100), 40),
        admitted(1, "heavy", (0, 100), 40),
    ];
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!((outcome.stats.skipped, outcome.stats.demand_listed), (1, 1));
    let d = demand(agg.store());
    assert_eq!(d.entities.keys().collect::<Vec<_>>(), ["heavy"]);
}

/// Demand listings and usage items DynamoDB refuses as invalid.
struct ListingsRefused;
impl Faults for ListingsRefused {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let (Call::Update(zae_table::store::Update { pk, sk, .. })
        | Call::Transact(
            [
                zae_table::store::TxWrite::Update(zae_table::store::Update { pk, sk, .. }),
                ..,
            ],
        )) = call
        else {
            return None;
        };
        let refused = [keys::SK_ADAPTIVE_DEMAND, keys::SK_ADAPTIVE_USAGE];
        refused
            .iter()
            .any(|p| sk.starts_with(p))
            .then(|| StoreError::Rejected {
                operation: "UpdateItem",
                key: pk.clone(),
                message: "ValidationException: Size limit exceeded".into(),
            })
    }
}

/// One admitted record on a `share: demand` resource, through a table
/// that refuses the sensor's listing and usage writes as invalid; the
/// batch must still complete.
async fn a_batch_whose_sensor_writes_are_refused() -> crate::write::BatchOutcome {
    let agg = Aggregator::new(
        Injected {
            inner: demand_table(),
            faults: ListingsRefused,
        },
        settings(),
    );
    let records = vec![admitted(0, "heavy", (0, 100), 40)];
    let outcome = agg.process(&records, "p", MINUTE_S, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    outcome
}

/// A write of the sensor that DynamoDB refuses as invalid is skipped and
/// counted, never a batch failure. Injected at the store seam: within the
/// client's caps no key the sensor builds passes DynamoDB's limits, so
/// neither the twin nor moto can show it.
#[tokio::test]
async fn a_demand_listing_or_usage_write_dynamodb_refuses_is_skipped_and_counted() {
    let outcome = a_batch_whose_sensor_writes_are_refused().await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(
        outcome.stats.writes_refused, 2,
        "the listing and the usage item"
    );
}

/// A log capture for one test's thread (a current-thread runtime).
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut logs) = self.0.lock() {
            logs.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn lines(&self) -> Vec<String> {
        let logs = self.0.lock().map(|l| l.clone()).unwrap_or_default();
        String::from_utf8_lossy(&logs)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// A refused usage write loses the batch's use of the resource in that
/// minute for every entity, not one record: its log line names the
/// resource and the minute (the listing's, the entity too), and both are
/// counted in `WritesRefused`. Injected at the store seam, as above.
#[tokio::test]
async fn a_refused_usage_or_listing_write_names_its_resource_and_minute_and_counts() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let outcome = a_batch_whose_sensor_writes_are_refused().await;
    // Quotes aside: the JSON logs of Lambda quote every string.
    let refused: Vec<_> = (logs.lines().into_iter())
        .filter(|l| l.contains("refused as invalid"))
        .map(|l| l.replace('"', ""))
        .collect();
    assert_eq!(refused.len(), 2, "{refused:#?}");
    for line in &refused {
        assert!(line.contains("resource=r"), "{line}");
        assert!(line.contains("minute=2026-11-30T10:00:00Z"), "{line}");
    }
    let usage = refused.iter().find(|l| l.contains("adaptive usage"));
    assert!(
        usage.is_some_and(|l| l.contains("every entity")),
        "{refused:#?}"
    );
    let listing = refused.iter().find(|l| l.contains("demand listing"));
    assert!(
        listing.is_some_and(|l| l.contains("entity=heavy")),
        "{refused:#?}"
    );
    let counted = outcome.metrics.iter().find_map(|m| match m {
        crate::metrics::MetricEvent::Count { name, count, .. }
            if *name == crate::metrics::WRITES_REFUSED =>
        {
            Some(*count)
        }
        _ => None,
    });
    assert_eq!(counted, Some(2));
}
