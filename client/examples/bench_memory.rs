//! zae-client's own cost per acquire, with the table in memory (the
//! in-memory twin of `tests/support`): no network, no moto. N acquires and
//! commits of `rpm=1,tpm=10` over K entities on one task; prints one JSON
//! line with acquires per second and CPU seconds per 1,000 acquires, for
//! `scripts/bench_client.sh` and docs/benchmarks.md.
//!
//!     cargo run --release -p zae-client --example bench_memory -- [N] [K]

use std::sync::Arc;
use std::time::Instant;
use zae_client::{Options, RateLimiter};
use zae_table::config::{LevelConfig, LimitConfig, build_item};
use zae_table::level::Level;
use zae_test_support::memory::MemoryStore;

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after `)`.
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let requests = args.next().and_then(Result::ok).unwrap_or(100_000);
    let entities = args.next().and_then(Result::ok).unwrap_or(100).max(1);
    let store = Arc::new(MemoryStore::new());
    store.register_namespace("default");
    let big = |name: &str| LimitConfig::drip(name, 1_000_000_000, 1_000_000_000, 1);
    let config = LevelConfig {
        limits: vec![big("rpm"), big("tpm")],
        ..LevelConfig::default()
    };
    store.insert(build_item(
        "default",
        &Level::Resource("api".into()),
        &config,
    ));
    let limiter = RateLimiter::on_store(Arc::clone(&store), "default", Options::default())
        .await
        .expect("open");
    let names: Vec<String> = (0..entities).map(|i| format!("user-{i}")).collect();
    let (cpu0, wall0) = (cpu_seconds(), Instant::now());
    let mut admitted = 0usize;
    for i in 0..requests {
        let entity = &names[i % entities];
        if let Ok(lease) = limiter
            .acquire(entity, "api", &[("rpm", 1), ("tpm", 10)])
            .await
        {
            lease.commit().await.expect("commit");
            admitted += 1;
        }
    }
    let (wall, cpu) = (wall0.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
    println!(
        "{}",
        serde_json::json!({
            "admitted": admitted,
            "acquires_per_s": (admitted as f64 / wall).round(),
            "cpu_s_per_1000": cpu * 1000.0 / admitted.max(1) as f64,
            "wall_s": wall,
        })
    );
}
