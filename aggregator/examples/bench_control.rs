//! DynamoDB calls per controller tick, with and without a factor change,
//! for 1, 100 and 10,000 buckets on the resource. The table is the in-memory
//! twin, counting calls by operation as DynamoDB would bill them (a query
//! page holds up to 1 MB on DynamoDB, here everything: a 10,000-bucket pass
//! is about 3 pages of GSI2 in DynamoDB, counted here as 1 query).
//! Run: `cargo run --release -p zae-aggregator --example bench_control`.

use std::collections::BTreeMap;
use zae_aggregator::control::Controller;
use zae_table::adaptive::canary;
use zae_table::adaptive::usage::{self, MINUTE_MS};
use zae_table::store::{Counted, Returns, Store};
use zae_test_support::adaptive::table;

const NS: &str = "ns";
const T0: i64 = 1_796_032_800_000;

/// Minute `m`'s usage written and its tick's canaries sensed, then tick `m`.
async fn tick<S: Store>(store: &S, m: i64, tokens: i64) -> bool {
    let used = BTreeMap::from([("tpm".to_owned(), tokens * 1000)]);
    let minute = T0 + (m - 1) * MINUTE_MS;
    store
        .update(&usage::add(NS, "r", minute, &used), Returns::Nothing)
        .await
        .unwrap();
    let now = T0 + m * MINUTE_MS + 5_000;
    for k in 0..canary::CANARIES {
        let _ = store
            .update(&canary::sense(NS, k, now), Returns::Nothing)
            .await;
    }
    let controller = Controller {
        store,
        stop_at: None,
        wait: None,
    };
    let report = controller.tick(NS, now).await.unwrap().unwrap();
    report.targets[0].moved
}

fn calls(counts: &BTreeMap<&'static str, u64>) -> String {
    let total: u64 = counts.values().sum();
    let parts: Vec<String> = counts.iter().map(|(op, n)| format!("{op} {n}")).collect();
    format!("{total} ({})", parts.join(", "))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("| buckets | tick without a change | tick with a change |");
    println!("|---|---|---|");
    for buckets in [1usize, 100, 10_000] {
        let store = table(NS, buckets);
        for m in 0..10 {
            tick(&store, m, 20_000).await;
        }
        let counted = Counted::new(store);
        assert!(!tick(&counted, 10, 20_000).await, "steady");
        let steady = counted.counts();
        counted.reset();
        assert!(tick(&counted, 11, 150_000).await, "a surge moves");
        let change = counted.counts();
        println!("| {buckets} | {} | {} |", calls(&steady), calls(&change));
    }
}
