//! DynamoDB calls per controller tick, with and without a factor change,
//! for 1, 100 and 10,000 buckets on the resource. The table is the in-memory
//! twin, counting calls by operation as DynamoDB would bill them (a query
//! page holds up to 1 MB on DynamoDB, here everything: a 10,000-bucket pass
//! is about 3 pages of GSI2 in DynamoDB, counted here as 1 query).
//! Run: `cargo run --release -p zae-aggregator --example bench_control`.

use std::collections::BTreeMap;
use zae_aggregator::control::Controller;
use zae_table::adaptive::usage::{self, MINUTE_MS};
use zae_table::adaptive::{AdaptiveLevel, Declaration, Factor, canary};
use zae_table::config::{LevelConfig, LimitConfig, build_item};
use zae_table::store::{Counted, Returns, Store};
use zae_table::{Attr, Item, Level, keys};
use zae_test_support::memory::MemoryStore;

const NS: &str = "ns";
const T0: i64 = 1_796_032_800_000;

fn table(buckets: usize) -> MemoryStore {
    let store = MemoryStore::new();
    let limit = LimitConfig {
        name: "tpm".into(),
        capacity: 10_000,
        refill_amount: 1_000,
        refill_period: 60,
        sched: None,
        rsched: None,
        reset_after_seconds: None,
        soft: false,
    };
    let config = LevelConfig {
        limits: vec![limit],
        ..LevelConfig::default()
    };
    store.insert(build_item(NS, &Level::System, &config));
    let declaration = Declaration {
        capacity: BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), 100_000)]))]),
        levels: vec![AdaptiveLevel {
            level: Level::System,
            limit: "tpm".into(),
            max_scale: None,
            max_factor: Factor::from_ppm(10_000_000),
        }],
    };
    store.insert(declaration.to_item(NS));
    for i in 0..buckets {
        let entity = format!("e{i}");
        store.insert(Item::from([
            ("PK".into(), Attr::s(format!("{NS}/BUCKET#{entity}#r#0"))),
            ("SK".into(), Attr::s("#STATE")),
            ("GSI2PK".into(), Attr::s(keys::pk_resource(NS, "r"))),
            ("GSI2SK".into(), Attr::s(format!("BUCKET#{entity}#0"))),
            ("b_tpm_cp".into(), Attr::n(10_000_000)),
            ("b_tpm_ra".into(), Attr::n(1_000_000)),
        ]));
    }
    store
}

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
        let store = table(buckets);
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
