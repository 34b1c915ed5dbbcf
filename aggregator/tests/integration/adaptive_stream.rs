//! The controller and the aggregator through a stream, on the in-memory
//! twin: every write to the table becomes the record DynamoDB's stream would
//! carry, on the shard its partition key hashes to
//! (`zae_test_support::stream::Recording`), and each shard's records are
//! handed to the aggregator as the event source mapping hands a shard's
//! batch, or held back.
//!
//! - A shard that lags while the others pass their canaries holds back the
//!   minute it has not been read past, and its use; a shard that stays
//!   stalled makes the table blind.
//! - An aggregator whose repair cache still holds a raised factor, reading
//!   the records of the controller's cut, does not raise the buckets again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use zae_aggregator::control::stream_shards::Fixed;
use zae_aggregator::control::{Controller, TableTick};
use zae_aggregator::write::{Aggregator, Settings};
use zae_table::adaptive::usage::MINUTE_MS;
use zae_table::store::{Returns, Store, UpdateBuilder};
use zae_table::{Attr, Window};
use zae_test_support::adaptive::{bucket, five_times, table};
use zae_test_support::memory::MemoryStore;
use zae_test_support::stream::{Recording, shard_of};

const NS: &str = "ns";
/// A minute start.
const T0: i64 = 1_796_032_800_000;

/// The aggregator's clock (its repair's "controller stopped" test).
static NOW_MS: AtomicI64 = AtomicI64::new(T0);

fn now() -> i64 {
    NOW_MS.load(Ordering::SeqCst)
}

fn settings() -> Settings {
    Settings::for_tests(&[Window::Hourly], 2, false)
}

type Table = Recording<MemoryStore>;

/// A client's request on `entity`'s bucket: `tokens` of tpm taken.
async fn take(store: &Table, entity: &str, tokens: i64) {
    let mut update = UpdateBuilder::new();
    update
        .add("b_tpm_tc", Attr::n(tokens * 1000))
        .add("b_tpm_tk", Attr::n(-tokens * 1000));
    let update = update.build(&format!("{NS}/BUCKET#{entity}#r#0"), "#STATE", None);
    store.update(&update, Returns::Nothing).await.unwrap();
}

/// Hands every shard but `held` to the aggregator, one batch per shard.
async fn deliver(agg: &Aggregator<Arc<Table>>, store: &Table, held: &[usize]) {
    for records in store.drain_all_but(held) {
        if !records.is_empty() {
            let outcome = agg.process(&records, "p", now() / 1000, None).await;
            assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
        }
    }
}

async fn tick(store: &Table, shards: usize, at: i64) -> TableTick {
    NOW_MS.store(at, Ordering::SeqCst);
    store.at(at / 1000);
    let controller = Controller {
        store,
        shards: &Fixed(shards),
        stop_at: None,
        wait: None,
    };
    controller.tick_all(at).await.unwrap()
}

/// The evaluated minutes of namespace ns's only target at a tick.
fn minutes(tick: &TableTick) -> Vec<(i64, f64)> {
    tick.namespaces[0].targets[0].minutes.clone()
}

#[tokio::test]
async fn a_lagging_shard_holds_back_its_minute_and_a_stalled_one_blinds_the_table() {
    const SHARDS: usize = 4;
    let entities: Vec<String> = (0..16).map(|i| format!("e{i}")).collect();
    let inner = table(NS, 0);
    for e in &entities {
        inner.insert(bucket(NS, e, 10_000_000, 1_000_000));
    }
    let store = Arc::new(Recording::new(inner, SHARDS, T0 / 1000));
    let agg = Aggregator::new(Arc::clone(&store), settings()).with_clock(now);
    let lagging = shard_of(&format!("{NS}/BUCKET#e0#r#0"), SHARDS);
    // Three ticks prime the target; every shard read after each.
    for m in 0..3 {
        tick(&store, SHARDS, T0 + m * MINUTE_MS + 5_000).await;
        deliver(&agg, &store, &[]).await;
    }
    // Minute 3: e0 (on the lagging shard) takes 30,000 tokens, the others 1,000 each.
    store.at((T0 + 3 * MINUTE_MS + 10_000) / 1000);
    for e in &entities {
        take(&store, e, if e == "e0" { 30_000 } else { 1_000 }).await;
    }
    // Tick 4 writes its canaries; every shard but the lagging one is read.
    let at4 = T0 + 4 * MINUTE_MS + 5_000;
    tick(&store, SHARDS, at4).await;
    deliver(&agg, &store, &[lagging]).await;
    let t = tick(&store, SHARDS, at4 + 1_000).await;
    assert!(
        !minutes(&t).iter().any(|(m, _)| *m == T0 + 3 * MINUTE_MS),
        "minute 3 is not complete while a shard lags: {t:?}"
    );
    // The shard catches up: minute 3 is evaluated with all of its use.
    deliver(&agg, &store, &[]).await;
    let t = tick(&store, SHARDS, at4 + 2_000).await;
    let third = minutes(&t)
        .into_iter()
        .find(|(m, _)| *m == T0 + 3 * MINUTE_MS)
        .expect("minute 3 evaluated once every shard passed it");
    assert!(
        (third.1 - 0.45).abs() < 1e-9,
        "45,000 of 100,000: {third:?}"
    );
    // Then the shard stalls for good: blind at the second tick after.
    let mut seen = Vec::new();
    for m in 5..9 {
        let t = tick(&store, SHARDS, T0 + m * MINUTE_MS + 5_000).await;
        deliver(&agg, &store, &[lagging]).await;
        seen.push(t.blind);
    }
    assert_eq!(seen, [false, false, true, true], "{seen:?}");
}

/// The repair's cache holds 10x; the controller cuts to base and stamps
/// every bucket; the aggregator reads those stamps (and then a request on
/// each bucket) with the warm cache: every bucket stays at base.
#[tokio::test]
async fn a_warm_repair_cache_does_not_undo_the_controllers_cut() {
    let inner = table(NS, 4);
    five_times(&inner, NS, 1).await;
    let store = Arc::new(Recording::new(inner, 1, T0 / 1000));
    let agg = Aggregator::new(Arc::clone(&store), settings()).with_clock(now);
    // Idle minutes: the controller raises to the maximum (10x) and stamps.
    for m in 0..6 {
        tick(&store, 1, T0 + m * MINUTE_MS + 5_000).await;
        deliver(&agg, &store, &[]).await;
    }
    let ra = |e: &str| {
        store
            .inner
            .item(&format!("{NS}/BUCKET#{e}#r#0"), "#STATE")
            .unwrap()["b_tpm_ra"]
            .clone()
    };
    assert_eq!(ra("e0"), Attr::n(10_000_000));
    // The repair's cache is warm: a request on e0 reads the targets.
    take(&store, "e0", 1).await;
    deliver(&agg, &store, &[]).await;
    // A surge from usage the target does not govern: the cut.
    let used = BTreeMap::from([("tpm".to_owned(), 150_000_000)]);
    let update = zae_table::adaptive::usage::add(NS, "r", T0 + 6 * MINUTE_MS, &used);
    store.inner.update(&update, Returns::Nothing).await.unwrap();
    // Tick 7's canaries come through, then minute 6 is evaluated.
    tick(&store, 1, T0 + 7 * MINUTE_MS + 5_000).await;
    deliver(&agg, &store, &[]).await;
    let cut = tick(&store, 1, T0 + 7 * MINUTE_MS + 6_000).await;
    assert_eq!(cut.namespaces[0].targets[0].factor, 1.0, "{cut:?}");
    // The stamps' own records, then the clients' next requests.
    deliver(&agg, &store, &[]).await;
    for e in ["e0", "e1", "e2", "e3"] {
        take(&store, e, 1).await;
    }
    deliver(&agg, &store, &[]).await;
    for e in ["e0", "e1", "e2", "e3"] {
        assert_eq!(ra(e), Attr::n(1_000_000), "{e}");
    }
}
