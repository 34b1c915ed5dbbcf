//! Every item a client may write, through the whole batch path (issue 28,
//! item 10). The 0.17.0 acquire policy lets any principal put or update any
//! item whose partition key matches `*/BUCKET#*`, with any sort key and any
//! attribute of any type. A generator draws such items (numbers at 0, -1,
//! `i64::MIN`/`MAX`, non-canonical and enormous; strings of any length;
//! every other type) as INSERT, MODIFY and REMOVE records, written to the
//! table as the client would have written them, and mixes them with genuine
//! traffic of two other entities on an adaptive namespace whose target is
//! raised. The batch goes through plan, snapshots, overdraw, refill,
//! doubling, propagation, archive, sensing and repair on the in-memory twin
//! (which holds DynamoDB's item-size and transaction rules).
//!
//! Properties: no panic; the batch completes, or fails only from an error
//! the next delivery (from the reported record, as Lambda redelivers)
//! completes; each genuine entity's usage snapshots are exactly its
//! consumption; nothing is archived.

use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use zae_aggregator::write::archive::Archive;
use zae_aggregator::write::{Aggregator, Settings};
use zae_table::bucket::field;
use zae_table::store::{Returns, Store, StoreError, UpdateBuilder};
use zae_table::{Attr, Item, Window};
use zae_test_support::adaptive::{add_namespace, five_times, table};
use zae_test_support::fuzz_cases;
use zae_test_support::memory::MemoryStore;
use zae_test_support::stream::{attr, image};

const NS: &str = "ns";
/// 2026-11-29T16:00:00Z, in seconds: every record falls in this hour.
const HOUR_S: i64 = 1_795_968_000;
const GENUINE: [&str; 2] = ["e0", "e1"];
/// A namespace no step writes to: it must come out as it went in.
const OTHER_NS: &str = "ns2";
/// The hostile principal's own buckets, there from the start.
const OWN: [&str; 4] = [
    "ns/BUCKET#h0#r#0",
    "ns/BUCKET#h0#r#1",
    "ns/BUCKET#h1#r#0",
    "ns/BUCKET#h1#s#0",
];

fn now_ms() -> i64 {
    (HOUR_S + 1_800) * 1000
}

/// A number as a client may write it: edge values, non-canonical forms,
/// and enormous ones DynamoDB accepts (38 digits, exponents to 125).
fn number() -> impl Strategy<Value = String> {
    let edge = prop::sample::select(vec![0, -1, 1, 2, 32, 33, i64::MIN, i64::MAX, i64::MIN + 1]);
    let odd = prop::sample::select(vec![
        "9223372036854775808",
        "-9223372036854775809",
        "99999999999999999999999999999999999999",
        "-1E+125",
        "1e125",
        "0.5",
        "-0",
        "00012",
        "1E3",
    ]);
    prop_oneof![
        8 => edge.prop_map(|n| n.to_string()),
        4 => odd.prop_map(str::to_owned),
        2 => (-2_000_000i64..2_000_000).prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        2 => (now_ms() - 120_000..now_ms() + 120_000).prop_map(|n| n.to_string()),
    ]
}

/// Any attribute value, of any type.
fn value() -> impl Strategy<Value = Attr> {
    prop_oneof![
        12 => number().prop_map(Attr::N),
        1 => Just(Attr::s("")),
        1 => prop_oneof![
            Just("1m0h0".to_owned()),
            Just("-".to_owned()),
            Just("Europe/Berlin".to_owned()),
            Just("Mars/Olympus".to_owned()),
            Just("e0".to_owned()),
            "[ -~]{0,24}",
        ]
        .prop_map(Attr::S),
        1 => (1usize..6_000).prop_map(|n| Attr::S("x".repeat(n))),
        1 => any::<bool>().prop_map(Attr::Bool),
        1 => Just(Attr::Null),
        1 => Just(Attr::L(vec![Attr::n(1)])),
        1 => Just(Attr::M(Item::from([("x".into(), Attr::n(1))]))),
        1 => Just(Attr::Ss(["a".to_owned()].into())),
    ]
}

/// A number attribute the server side reads.
fn read_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "shard_count",
        "rf",
        "b_tpm_tc",
        "b_tpm_tk",
        "b_tpm_cp",
        "b_tpm_ra",
        "b_tpm_rp",
        "b_wcu_tc",
        "b_wcu_tk",
        "b_wcu_cp",
        "b_wcu_ra",
        "b_wcu_rp",
        "ad_g_tpm",
        "ad_ra_tpm",
        "ad_pre_tpm",
        "vu",
        "pgen",
    ])
    .prop_map(str::to_owned)
}

/// An attribute name the server side reads, or any other.
fn name() -> impl Strategy<Value = String> {
    let limits = prop::sample::select(vec!["tpm", "rpm", "wcu", "q", "tok_in"]);
    let fields = prop::sample::select(field::ALL.to_vec());
    prop_oneof![
        6 => read_name(),
        4 => (limits.clone(), fields).prop_map(|(l, f)| format!("b_{l}_{f}")),
        2 => prop::sample::select(vec![
            "vu", "ttl", "disabled", "bypass", "cascade", "parent_id",
            "pgen", "pinc", "sched", "rsched", "sched_tz", "GSI2PK", "GSI2SK", "total_events",
        ])
        .prop_map(str::to_owned),
        1 => (prop::sample::select(vec!["ad_g_", "ad_ra_", "ad_pre_"]), limits)
            .prop_map(|(p, l)| format!("{p}{l}")),
        1 => "[a-z_#]{1,12}",
    ]
}

/// A name up to and past DynamoDB's key limits: about `bytes` bytes of
/// one-, two-, three- or four-byte characters, around the client's caps
/// (64 and 256), the index sort key's 1,024 and the partition key's 2,048.
fn long_name() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(vec!["x", "x", "é", "€", "𝄞"]);
    let bytes = prop::sample::select(vec![
        64usize, 65, 256, 257, 1000, 1010, 1024, 1025, 1100, 2000, 2030, 2040,
    ]);
    (unit, bytes).prop_map(|(unit, bytes)| unit.repeat(bytes.div_ceil(unit.len())))
}

/// A bucket key whose namespace, entity or resource is long: the item's
/// own keys may fit while a key derived from them does not.
fn long_bucket_key() -> impl Strategy<Value = String> {
    let ns = prop_oneof![4 => Just(NS.to_owned()), 1 => long_name()];
    let entity = prop_oneof![1 => Just("h0".to_owned()), 3 => long_name()];
    let resource = prop_oneof![3 => Just("r".to_owned()), 1 => long_name()];
    let shard = prop::sample::select(vec!["0", "0", "1"]);
    (ns, entity, resource, shard).prop_map(|(n, e, r, t)| format!("{n}/BUCKET#{e}#{r}#{t}"))
}

/// A partition key the acquire policy allows: anything around `/BUCKET#`.
fn partition_key() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec![
        "ns",
        "ns",
        "ns",
        "ns",
        "ns/AUDIT#e0",
        "other",
        "",
        "a/b",
    ]);
    let rest = prop_oneof![
        4 => (
            prop::sample::select(vec!["h0", "h1", "e0#x"]),
            prop::sample::select(vec!["r", "s"]),
            prop::sample::select(vec!["0", "0", "0", "0", "1", "2", "-1", "x", "", "99999999999999999999"]),
        )
            .prop_map(|(e, r, s)| format!("{e}#{r}#{s}")),
        1 => "[ -~]{0,16}",
    ];
    (prefix, rest).prop_map(|(p, r)| format!("{p}/BUCKET#{r}"))
}

fn sort_key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("#STATE".to_owned()),
        1 => Just("#STATE#x".to_owned()),
        1 => Just("#AUDIT#1".to_owned()),
        1 => "[ -~]{1,12}",
    ]
}

/// A bucket as the client writes it (a `tpm` limit, a `wcu` limit, a
/// refill due), some of whose attributes the client then overwrites with
/// anything; or any attributes at all.
fn attributes() -> impl Strategy<Value = Item> {
    let written = prop::collection::btree_map(name(), value(), 0..8);
    prop_oneof![
        3 => written.prop_map(|over| {
            let mut item = bucket();
            item.extend(over);
            item
        }),
        1 => prop::collection::btree_map(name(), value(), 0..14),
    ]
}

fn bucket() -> Item {
    let mut item = Item::new();
    for (name, n) in [
        ("b_tpm_tc", 5_000),
        ("b_tpm_tk", -1_000),
        ("b_tpm_cp", 10_000_000),
        ("b_tpm_ra", 1_000_000),
        ("b_tpm_rp", 60_000),
        ("b_wcu_tc", 1_000),
        ("b_wcu_tk", 0),
        ("b_wcu_cp", 1_000_000),
        ("b_wcu_ra", 1_000_000),
        ("b_wcu_rp", 1_000),
        ("rf", now_ms() - 90_000),
        ("shard_count", 1),
    ] {
        item.insert(name.into(), Attr::n(n));
    }
    item.insert("b_tpm_soft".into(), Attr::Bool(true));
    item
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Insert,
    Modify,
    Remove,
}

/// A client's write. Its record is what DynamoDB's stream makes of it
/// (`OldImage` is the item before, `NewImage` after): a client writes
/// items, never records.
#[derive(Debug, Clone)]
enum Write {
    /// `PutItem` of a whole item.
    Put(Item),
    /// `UpdateItem` setting these attributes.
    Set(Item),
    /// One attribute the server side reads, written several times in a
    /// row (a count of -1 then 0, say), one record each.
    Again(String, Vec<String>),
    /// A delete: by the client, or (`true`) by the table's TTL.
    Remove(bool),
}

#[derive(Debug, Clone)]
enum Step {
    /// A genuine request: `tokens` of `tpm` from a genuine entity.
    Take { entity: usize, tokens: i64 },
    /// A client's own write on the item of this key.
    Hostile {
        pk: String,
        sk: String,
        write: Write,
    },
}

fn write() -> impl Strategy<Value = Write> {
    let again = (read_name(), prop::collection::vec(number(), 1..4));
    prop_oneof![
        2 => attributes().prop_map(Write::Put),
        2 => prop::collection::btree_map(name(), value(), 1..4).prop_map(Write::Set),
        3 => again.prop_map(|(name, values)| Write::Again(name, values)),
        1 => any::<bool>().prop_map(Write::Remove),
    ]
}

/// A few keys written again and again, and some of any shape.
fn key() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        4 => prop::sample::select(OWN.to_vec()).prop_map(|pk| (pk.to_owned(), "#STATE".to_owned())),
        1 => (partition_key(), sort_key()),
        1 => long_bucket_key().prop_map(|pk| (pk, "#STATE".to_owned())),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0..GENUINE.len(), 1i64..100).prop_map(|(entity, tokens)| Step::Take { entity, tokens }),
        2 => (key(), write()).prop_map(|((pk, sk), write)| Step::Hostile { pk, sk, write }),
    ]
}

/// One stream record in the Lambda event's shape.
fn record(sequence: usize, old: Option<&Item>, new: Option<&Item>, by_ttl: bool) -> String {
    let keys = new.or(old).expect("a record has an image");
    let mut change = serde_json::json!({
        "ApproximateCreationDateTime": HOUR_S + 60 + sequence as i64,
        "SequenceNumber": format!("{:021}", 1000 + sequence),
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    });
    change["Keys"] = serde_json::json!({"PK": attr(&keys["PK"]), "SK": attr(&keys["SK"])});
    let event = match (old, new) {
        (None, _) => Event::Insert,
        (Some(_), Some(_)) => Event::Modify,
        (Some(_), None) => Event::Remove,
    };
    if let Some(new) = new {
        change["NewImage"] = image(new);
    }
    if let Some(old) = old {
        change["OldImage"] = image(old);
    }
    let name = match event {
        Event::Insert => "INSERT",
        Event::Modify => "MODIFY",
        Event::Remove => "REMOVE",
    };
    let mut record =
        serde_json::json!({"eventName": name, "eventSource": "aws:dynamodb", "dynamodb": change});
    if by_ttl {
        record["userIdentity"] =
            serde_json::json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    }
    record.to_string()
}

/// The item a client's write leaves, from the item before it.
fn written(pk: &str, sk: &str, before: Option<&Item>, set: Item) -> Item {
    let mut item = before.cloned().unwrap_or_default();
    item.extend(set);
    item.insert("PK".into(), Attr::s(pk));
    item.insert("SK".into(), Attr::s(sk));
    item
}

/// Applies each step to the table as the client would, and returns the
/// records the stream would carry, with each genuine entity's consumption.
async fn traffic(table: &MemoryStore, steps: &[Step]) -> (Vec<String>, [i64; 2]) {
    let mut records = Vec::new();
    let mut consumed = [0; 2];
    for step in steps {
        match step {
            Step::Take { entity, tokens } => {
                let pk = format!("{NS}/BUCKET#{}#r#0", GENUINE[*entity]);
                let old = table.item(&pk, "#STATE");
                let mut update = UpdateBuilder::new();
                update
                    .add("b_tpm_tc", Attr::n(tokens * 1000))
                    .add("b_tpm_tk", Attr::n(-tokens * 1000));
                let update = update.build(&pk, "#STATE", None);
                table.update(&update, Returns::Nothing).await.unwrap();
                let new = table.item(&pk, "#STATE");
                records.push(record(records.len(), old.as_ref(), new.as_ref(), false));
                consumed[*entity] += tokens;
            }
            Step::Hostile { pk, sk, write } => {
                let writes: Vec<Option<Item>> = match write {
                    Write::Put(item) => vec![Some(written(pk, sk, None, item.clone()))],
                    Write::Set(set) => vec![Some(set.clone())],
                    Write::Again(name, values) => values
                        .iter()
                        .map(|v| Some(Item::from([(name.clone(), Attr::N(v.clone()))])))
                        .collect(),
                    Write::Remove(_) => vec![None],
                };
                for set in writes {
                    let old = table.item(pk, sk);
                    let new = set.map(|set| match write {
                        Write::Put(_) => set,
                        _ => written(pk, sk, old.as_ref(), set),
                    });
                    // Through the twin's rules: a write DynamoDB refuses
                    // (a key too long, an index key of the wrong type)
                    // leaves no item and no record.
                    let refused = match &new {
                        Some(item) => table.put(item, None).await.is_err(),
                        None => table.delete(pk, sk, None).await.is_err(),
                    };
                    if refused {
                        continue;
                    }
                    if old.is_some() || new.is_some() {
                        let by_ttl = matches!(write, Write::Remove(true));
                        let r = record(records.len(), old.as_ref(), new.as_ref(), by_ttl);
                        records.push(r);
                    }
                }
            }
        }
    }
    (records, consumed)
}

/// An archive that keeps the keys it is given.
#[derive(Default)]
struct Kept(Mutex<Vec<String>>);

impl Archive for Kept {
    fn put<'a>(
        &'a self,
        key: &'a str,
        _body: Vec<u8>,
    ) -> futures::future::BoxFuture<'a, Result<(), StoreError>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(key.into());
        Box::pin(async { Ok(()) })
    }
}

fn settings() -> Settings {
    Settings::for_tests(&[Window::Hourly, Window::Daily], 3, true)
}

/// Delivers `records` as Lambda does: again from the reported record, at
/// most three times in all. Returns the errors of a batch never completed,
/// or of the delivery that completed it (none expected).
async fn deliver(agg: &Aggregator<Arc<MemoryStore>>, records: &[String]) -> Vec<String> {
    let mut from = 0;
    for _ in 0..3 {
        let outcome = agg
            .process(&records[from..], "p", HOUR_S + 1_800, None)
            .await;
        let Some(failed) = outcome.first_failure else {
            return outcome.errors;
        };
        // Lambda finds the record by the text the stream gave, exactly.
        from = records
            .iter()
            .position(|r| sequence_of(r) == failed.as_stream())
            .unwrap_or_else(|| panic!("the failure {failed} names no record of the batch"));
        if outcome.errors.is_empty() {
            return vec!["a failure with no error".into()];
        }
    }
    vec!["still failing after 3 deliveries".into()]
}

/// A record's `SequenceNumber`, as the stream wrote it.
fn sequence_of(record: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(record).expect("a record is JSON");
    value["dynamodb"]["SequenceNumber"]
        .as_str()
        .expect("every record has a sequence number")
        .to_owned()
}

/// The records of the genuine steps alone, with the numbers and times they
/// had among the hostile ones.
fn genuine_records(steps: &[Step], records: &[String]) -> Vec<String> {
    let takes = steps
        .iter()
        .filter(|s| matches!(s, Step::Take { .. }))
        .count();
    let genuine: Vec<String> = records
        .iter()
        .filter(|r| {
            GENUINE
                .iter()
                .any(|e| r.contains(&format!("\"{NS}/BUCKET#{e}#r#0\"")))
        })
        .cloned()
        .collect();
    assert_eq!(genuine.len(), takes, "one record per genuine step");
    genuine
}

/// Items the hostile writes may rightly change: the hostile principal's own
/// (any key it wrote, and what the aggregator derives from a bucket under
/// it: its snapshots and audit events, under keys no genuine run has), and
/// the resource's per-minute use, which counts every bucket of the resource,
/// the hostile principal's own included.
fn hostile_or_shared(item: &Item, genuine_keys: &[(Attr, Attr)]) -> bool {
    let key = (item.get("PK").cloned(), item.get("SK").cloned());
    let genuine = match key {
        (Some(pk), Some(sk)) => genuine_keys.contains(&(pk, sk)),
        _ => false,
    };
    !genuine || zae_table::adaptive::usage::Minute::from_item(item).is_some()
}

/// The table's items, less those [`hostile_or_shared`] names.
fn genuine_items(table: &MemoryStore, genuine_keys: &[(Attr, Attr)]) -> Vec<Item> {
    table
        .items()
        .into_iter()
        .filter(|item| !hostile_or_shared(item, genuine_keys))
        .collect()
}

/// `entity`'s usage of `r`'s `tpm` in the hour's snapshot, in tokens.
fn usage(table: &MemoryStore, entity: &str) -> i64 {
    let item = table
        .item(
            &format!("{NS}/ENTITY#{entity}"),
            "#USAGE#r#2026-11-29T16:00:00Z",
        )
        .unwrap_or_default();
    match item.get("tpm") {
        Some(Attr::N(n)) => n.parse().expect("a usage counter is an integer"),
        _ => 0,
    }
}

/// The adaptive namespace, its raised target, and another namespace beside it.
fn setup() -> MemoryStore {
    let store = table(NS, GENUINE.len());
    add_namespace(&store, OTHER_NS, 1);
    futures::executor::block_on(five_times(&store, NS, 10));
    store
}

/// The key of every item a genuine run leaves: its buckets, snapshots,
/// adaptive state and the other namespace, and whatever the aggregator
/// wrote for them.
fn genuine_keys(alone: &MemoryStore) -> Vec<(Attr, Attr)> {
    alone
        .items()
        .iter()
        .filter_map(|item| Some((item.get("PK")?.clone(), item.get("SK")?.clone())))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases(512)))]
    #[test]
    fn no_item_a_client_writes_stalls_the_batch_or_changes_anothers_usage(
        steps in prop::collection::vec(step(), 1..24)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let table = Arc::new(setup());
            for pk in OWN {
                table.insert(written(pk, "#STATE", None, bucket()));
            }
            let (records, consumed) = traffic(&table, &steps).await;
            let archive = Arc::new(Kept::default());
            let agg = Aggregator::new(table.clone(), settings())
                .with_archive(archive.clone())
                .with_clock(now_ms);
            let errors = deliver(&agg, &records).await;
            assert_eq!(errors, Vec::<String>::new(), "the batch completed with no error counted");
            for (i, entity) in GENUINE.iter().enumerate() {
                assert_eq!(usage(&table, entity), consumed[i], "{entity}'s usage");
            }
            let archived = archive.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
            assert!(archived.is_empty(), "archived {archived:?}");

            // The same genuine steps, without the hostile ones.
            let alone = Arc::new(setup());
            let genuine: Vec<Step> = steps.iter().filter(|s| matches!(s, Step::Take { .. })).cloned().collect();
            traffic(&alone, &genuine).await;
            let agg = Aggregator::new(alone.clone(), settings()).with_clock(now_ms);
            let errors = deliver(&agg, &genuine_records(&steps, &records)).await;
            assert_eq!(errors, Vec::<String>::new(), "the genuine run completed");
            let keys = genuine_keys(&alone);
            let (with, without) = (genuine_items(&table, &keys), genuine_items(&alone, &keys));
            let differ = |a: &[Item], b: &[Item]| -> Vec<Item> {
                a.iter().filter(|i| !b.contains(i)).cloned().collect()
            };
            assert_eq!(
                (differ(&with, &without), differ(&without, &with)),
                (vec![], vec![]),
                "every genuine item as the genuine steps alone leave it \
                 (with the hostile steps, without them)"
            );
        });
    }
}
