//! Quota conservation across shard doublings (§7 of the reference): a
//! quota's allowance is split over shards, and a shard pre-created by the
//! propagation is funded by a debit on a shard that holds the allowance,
//! in the same transaction, never minted. A randomized interleaving of
//! client consumption on any shard, doublings of shard 0's count, and our
//! propagation of raises (some processed late, after a later doubling), on
//! the in-memory twin of the table, which evaluates every condition. Through
//! all of it, what the shards hold plus what they consumed is the quota's
//! allowance: nothing created, nothing lost.

use proptest::prelude::*;
use std::sync::Arc;
use zae_aggregator::plan::shard::Raise;
use zae_aggregator::write::{Aggregator, RetryPolicy, Settings};
use zae_table::keys::BucketKey;
use zae_table::store::{Returns, Store, UpdateBuilder};
use zae_table::{Attr, Item, Window};
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
    let mut item = Item::new();
    for (k, v) in [("PK", Attr::s(key(0).pk())), ("SK", Attr::s("#STATE"))] {
        item.insert(k.into(), v);
    }
    for (k, v) in [
        ("rf", NOW - 60_000),
        ("shard_count", 1),
        ("b_q_tk", ALLOWANCE),
        ("b_q_tc", 0),
        ("b_q_cp", ALLOWANCE),
        ("b_q_ra", 0),
        ("b_q_rp", 3_600_000),
        ("b_q_rsa", 3_600),
        ("b_q_ws", NOW - 60_000),
        ("b_q_wa", NOW - 60_000),
        ("b_q_gc", 1),
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..16, 1i64..200_000).prop_map(|(shard, amount)| Op::Consume { shard, amount }),
        1 => Just(Op::Double),
        2 => (0usize..6).prop_map(Op::Propagate),
    ]
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

fn aggregator(table: &Arc<MemoryStore>) -> Aggregator<Arc<MemoryStore>> {
    let settings = Settings {
        windows: vec![Window::Hourly],
        snapshot_ttl_days: 90,
        concurrency: 1,
        retry: RetryPolicy::default(),
        refill: true,
    };
    Aggregator::new(Arc::clone(table), settings)
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
            for op in ops {
                match op {
                    Op::Consume { shard, amount } => consume(&table, shard, amount).await,
                    Op::Double => doublings.extend(double(&table).await),
                    Op::Propagate(nth) => {
                        if let Some(&(from, to)) = doublings.get(nth) {
                            let done = agg.propagate(&Raise { key: key(0), from, to }, NOW, None).await;
                            assert!(!done.failed, "{done:?}");
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
}
