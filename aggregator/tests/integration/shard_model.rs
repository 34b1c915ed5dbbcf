//! Quota conservation across shard doublings (§7 of the reference): a
//! quota's allowance is split over shards, and a shard pre-created by the
//! propagation is funded by a debit on a shard that holds the allowance,
//! in the same transaction, never minted. A randomized interleaving of
//! client consumption on any shard, doublings of shard 0's count, and our
//! propagation of raises (some processed late, after a later doubling), on
//! the in-memory twin of the table, which evaluates every condition. Through
//! all of it, what the shards hold plus what they consumed is the quota's
//! allowance: nothing created, nothing lost. Faults moto cannot show are
//! injected at the store seam: sibling reads that fail, a sibling a client
//! wrote unparseable, and a doubling that lands between our read of shard 0
//! and our clone's write. A second model, for a bucket without quotas, checks
//! that every clone lands under the shard count in force, with that count's
//! share: a late raise never mints.

use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zae_aggregator::plan::shard::Raise;
use zae_aggregator::write::{Aggregator, RetryPolicy, Settings};
use zae_table::keys::BucketKey;
use zae_table::store::{Returns, Store, StoreError, TxWrite, UpdateBuilder};
use zae_table::{Attr, Item, SequenceNumber, Window};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::fuzz_cases;
use zae_test_support::memory::MemoryStore;

const NOW: i64 = 1_780_000_000_000;
const ALLOWANCE: i64 = 1_000_000;

fn key(shard: u32) -> BucketKey {
    BucketKey {
        namespace: "ns".into(),
        entity: "e".into(),
        resource: "r".into(),
        shard,
    }
}

/// Shard 0 of a session quota `q` (an hour's window, current) and an rps limit.
fn shard_zero() -> Item {
    let mut item = rps_only();
    for (k, v) in [
        ("b_q_tk", ALLOWANCE),
        ("b_q_tc", 0),
        ("b_q_cp", ALLOWANCE),
        ("b_q_ra", 0),
        ("b_q_rp", 3_600_000),
        ("b_q_rsa", 3_600),
        ("b_q_ws", NOW - 60_000),
        ("b_q_wa", NOW - 60_000),
        ("b_q_gc", 1),
    ] {
        item.insert(k.into(), Attr::n(v));
    }
    item
}

/// Shard 0 of a bucket without quotas: an rps limit alone.
fn rps_only() -> Item {
    let mut item = Item::new();
    for (k, v) in [("PK", Attr::s(key(0).pk())), ("SK", Attr::s("#STATE"))] {
        item.insert(k.into(), v);
    }
    for (k, v) in [
        ("rf", NOW - 60_000),
        ("shard_count", 1),
        ("b_rps_tk", 10_000),
        ("b_rps_tc", 0),
        ("b_rps_cp", 10_000),
        ("b_rps_ra", 1_000),
        ("b_rps_rp", 1_000),
    ] {
        item.insert(k.into(), Attr::n(v));
    }
    item
}

fn n(item: &Item, attr: &str) -> i64 {
    item.get(attr).and_then(Attr::as_int).unwrap_or(0)
}

#[derive(Debug, Clone)]
enum Op {
    Consume {
        shard: u32,
        amount: i64,
    },
    Double,
    /// Propagate the `nth` doubling so far (late ones included).
    Propagate(usize),
    /// The same, with every sibling read failing (throttled).
    PropagateUnread(usize),
    /// The same, with a doubling landing before each clone is written.
    PropagateRaced(usize),
    /// A client writes shard `n` unparseable (`rf` as text).
    Corrupt(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..16, 1i64..200_000).prop_map(|(shard, amount)| Op::Consume { shard, amount }),
        1 => Just(Op::Double),
        2 => (0usize..6).prop_map(Op::Propagate),
        1 => (0usize..6).prop_map(Op::PropagateUnread),
        1 => (0usize..6).prop_map(Op::PropagateRaced),
        1 => (1u32..4).prop_map(Op::Corrupt),
    ]
}

/// Faults at the store seam: sibling reads refused, or a doubling of shard
/// 0 made in the table just before a transaction (a clone) applies.
struct Seam {
    table: Arc<MemoryStore>,
    unread: AtomicBool,
    race: AtomicBool,
}

impl Faults for Seam {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        match call {
            Call::Get { pk, .. } if self.unread.load(Ordering::SeqCst) && *pk != key(0).pk() => {
                Some(StoreError::Retryable {
                    operation: "GetItem",
                    key: (*pk).to_owned(),
                    message: "throttled (injected)".into(),
                })
            }
            Call::Transact(writes) if self.race.load(Ordering::SeqCst) => {
                if writes.iter().any(|w| matches!(w, TxWrite::Put { .. })) {
                    double_now(&self.table);
                }
                None
            }
            _ => None,
        }
    }
}

/// A client's doubling of shard 0, applied directly (the seam runs
/// synchronously, inside the call it precedes).
fn double_now(table: &MemoryStore) {
    if let Some(mut item) = table.item(&key(0).pk(), "#STATE") {
        let count = n(&item, "shard_count");
        if count < 16 {
            item.insert("shard_count".into(), Attr::n(count * 2));
            table.insert(item);
        }
    }
}

fn corrupt(table: &MemoryStore, shard: u32) {
    if let Some(mut item) = table.item(&key(shard).pk(), "#STATE") {
        item.insert("rf".into(), Attr::s("not a number"));
        table.insert(item);
    }
}

/// Runs one propagation through the seam, with the faults `op` asks for.
async fn propagate(
    agg: &Aggregator<Injected<Arc<MemoryStore>, Seam>>,
    op: &Op,
    doublings: &[(i64, i64)],
) -> Option<zae_aggregator::write::shard::Propagated> {
    let (Op::Propagate(nth) | Op::PropagateUnread(nth) | Op::PropagateRaced(nth)) = op else {
        return None;
    };
    let &(from, to) = doublings.get(*nth)?;
    let seam = &agg.store().faults;
    seam.unread
        .store(matches!(op, Op::PropagateUnread(_)), Ordering::SeqCst);
    seam.race
        .store(matches!(op, Op::PropagateRaced(_)), Ordering::SeqCst);
    let sequence = SequenceNumber::parse("1").expect("a sequence number");
    let raise = Raise {
        key: key(0),
        from,
        to,
        sequence,
    };
    let done = agg.propagate(&raise, NOW, None).await;
    seam.unread.store(false, Ordering::SeqCst);
    seam.race.store(false, Ordering::SeqCst);
    Some(done)
}

async fn consume(table: &MemoryStore, shard: u32, amount: i64) {
    let mut b = UpdateBuilder::new();
    b.add("b_q_tk", Attr::n(-amount));
    b.add("b_q_tc", Attr::n(amount));
    let tk = b.name("b_q_tk");
    let need = b.value(Attr::n(amount));
    let update = b.build(
        &key(shard).pk(),
        "#STATE",
        Some(format!("attribute_exists(PK) AND {tk} >= {need}")),
    );
    let _ = table.update(&update, Returns::Nothing).await;
}

async fn double(table: &MemoryStore) -> Option<(i64, i64)> {
    let count = n(&table.item(&key(0).pk(), "#STATE")?, "shard_count");
    if count >= 16 {
        return None;
    }
    let mut b = UpdateBuilder::new();
    b.set("shard_count", Attr::n(count * 2));
    let sc = b.name("shard_count");
    let read = b.value(Attr::n(count));
    let update = b.build(&key(0).pk(), "#STATE", Some(format!("{sc} = {read}")));
    table
        .update(&update, Returns::Nothing)
        .await
        .ok()
        .map(|_| (count, count * 2))
}

fn held(table: &MemoryStore) -> i64 {
    table
        .items()
        .iter()
        .filter(|i| {
            i.get("PK")
                .and_then(Attr::as_s)
                .is_some_and(|pk| pk.starts_with("ns/BUCKET#"))
        })
        .map(|i| n(i, "b_q_tk") + n(i, "b_q_tc"))
        .sum()
}

fn aggregator(table: &Arc<MemoryStore>) -> Aggregator<Injected<Arc<MemoryStore>, Seam>> {
    let settings = Settings {
        windows: vec![Window::Hourly],
        snapshot_ttl_days: 90,
        concurrency: 1,
        retry: RetryPolicy::default(),
        refill: true,
    };
    let seam = Seam {
        table: Arc::clone(table),
        unread: AtomicBool::new(false),
        race: AtomicBool::new(false),
    };
    let store = Injected {
        inner: Arc::clone(table),
        faults: seam,
    };
    Aggregator::new(store, settings)
}

fn shards(table: &MemoryStore) -> Vec<Item> {
    table
        .items()
        .into_iter()
        .filter(|i| {
            i.get("PK")
                .and_then(Attr::as_s)
                .is_some_and(|pk| pk.starts_with("ns/BUCKET#"))
        })
        .collect()
}

/// The sequence that would fund a fresh share while the sibling holding the
/// slot's allowance cannot be parsed: shard 1 created and funded from shard
/// 0, shard 0's grant renewed under two shards (as a reset there does), shard
/// 1 written unparseable by a client, then a doubling to 4, whose shard 3 only
/// shard 1 covers. The propagation stops before any write: nothing minted,
/// no count raised with a partial freeze list.
#[test]
fn an_unparseable_sibling_stops_the_propagation_instead_of_minting_a_share() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        let table = Arc::new(MemoryStore::new());
        table.insert(shard_zero());
        let agg = aggregator(&table);
        let first = double(&table).await.expect("1 to 2");
        let done = propagate(&agg, &Op::Propagate(0), &[first]).await.unwrap();
        assert_eq!(done.cloned, 1, "{done:?}");
        let mut zero = table.item(&key(0).pk(), "#STATE").unwrap();
        zero.insert("b_q_gc".into(), Attr::n(2));
        table.insert(zero);
        corrupt(&table, 1);
        let second = double(&table).await.expect("2 to 4");
        let before = held(&table);
        let done = propagate(&agg, &Op::Propagate(1), &[first, second])
            .await
            .unwrap();
        assert_eq!(held(&table), before, "minted: {done:?}");
        assert!(done.failed && !done.retry, "{done:?}");
        assert_eq!((done.raised, done.cloned), (0, 0), "{done:?}");
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases(256)))]
    #[test]
    fn a_quotas_allowance_is_neither_created_nor_lost_across_doublings_and_clones(
        ops in prop::collection::vec(op(), 1..60)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let table = Arc::new(MemoryStore::new());
            table.insert(shard_zero());
            let agg = aggregator(&table);
            let mut doublings = Vec::new();
            let mut cloned = 0;
            let mut corrupted = false;
            for op in ops {
                match op {
                    Op::Consume { shard, amount } => consume(&table, shard, amount).await,
                    Op::Double => doublings.extend(double(&table).await),
                    Op::Corrupt(shard) => {
                        corrupt(&table, shard);
                        corrupted |= table.item(&key(shard).pk(), "#STATE").is_some();
                    }
                    _ => {
                        if let Some(done) = propagate(&agg, &op, &doublings).await {
                            // Only a fault may stop it, and a throttle asks for a retry.
                            let faulted = corrupted || matches!(op, Op::PropagateUnread(_));
                            assert!(!done.failed || faulted, "{op:?}: {done:?}");
                            assert!(!done.retry || matches!(op, Op::PropagateUnread(_)), "{op:?}: {done:?}");
                            cloned += done.cloned;
                        }
                    }
                }
                assert_eq!(held(&table), ALLOWANCE, "after {op:?}: {:#?}", table.items());
            }
            // The allowance is spread, not merely kept on shard 0.
            if cloned > 0 {
                assert!(table.items().len() > 1);
            }
        });
    }

    /// Without quotas: every clone a propagation makes lands under the count
    /// shard 0 holds when it is done (a late raise, or a doubling that
    /// overtook it, included), with that count's share of `rps`: never more.
    #[test]
    fn a_clone_without_quotas_lands_under_the_count_in_force_with_its_share(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let table = Arc::new(MemoryStore::new());
            table.insert(rps_only());
            let agg = aggregator(&table);
            let mut doublings = Vec::new();
            for op in ops {
                match op {
                    Op::Double => doublings.extend(double(&table).await),
                    Op::Consume { .. } | Op::Corrupt(_) => {}
                    _ => {
                        let before: Vec<String> = shards(&table)
                            .iter()
                            .filter_map(|i| i.get("PK").and_then(Attr::as_s).map(str::to_owned))
                            .collect();
                        let Some(done) = propagate(&agg, &op, &doublings).await else { continue };
                        assert!(!done.failed, "{op:?}: {done:?}");
                        let count = n(&table.item(&key(0).pk(), "#STATE").unwrap(), "shard_count");
                        for clone in shards(&table) {
                            let pk = clone.get("PK").and_then(Attr::as_s).unwrap_or_default();
                            if before.iter().any(|b| b == pk) {
                                continue;
                            }
                            assert_eq!(n(&clone, "shard_count"), count, "{op:?}: {pk}");
                            assert_eq!(n(&clone, "b_rps_tk"), 10_000 / count, "{op:?}: {pk}");
                        }
                    }
                }
            }
        });
    }
}
