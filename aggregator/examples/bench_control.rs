//! The adaptive controller's cost, on the in-memory twin of the table with
//! DynamoDB's latency modelled (every call takes a fixed time on tokio's clock,
//! which is paused: the times are what that latency gives, with the calls
//! overlapped as the controller overlaps them, not this machine's speed).
//!
//! 1. Calls and time per tick at 1, 10 and 100 namespaces (one target of 10
//!    buckets each), steady and with every factor moving.
//! 2. A move on a resource of 100,000 buckets, at 10 ms a call so that a lap
//!    needs more than one tick: the ticks (each stopped 57 s into a 60 s
//!    invocation, after a 15 s canary wait) until every bucket carries the
//!    newest factor, when the factor moves again during the lap.
//!
//! 3. Writes per move at 1,000 and 100,000 entities with 20 saturated,
//!    `share: base` against `share: demand`, and what the buckets carry in
//!    all against the resource's capacity (the over-commit).
//! 4. The demand tick at 10,000 and 100,000 entities with 1,000 saturated
//!    (the listing's cap): calls, time within one invocation's deadline, and
//!    the target item's size.
//!
//! Run: `cargo run --release -p zae-aggregator --example bench_control`.

use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;
use zae_aggregator::control::Controller;
use zae_aggregator::control::stream_shards::Fixed;
use zae_table::adaptive::canary;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::usage::{self, MINUTE_MS};
use zae_table::store::{Counted, Returns, Store};
use zae_test_support::adaptive::{add_namespace, bucket};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

const T0: i64 = 1_796_032_800_000;
/// A DynamoDB call's round trip from a Lambda in the same region.
const LATENCY: Duration = Duration::from_millis(5);
/// A slow one: the 100,000-bucket lap then needs more than one tick.
const SLOW: Duration = Duration::from_millis(10);

struct Latency(Duration);
impl Faults for Latency {
    fn delay(&self, _: &Call<'_>) -> Option<Duration> {
        Some(self.0)
    }
}

type Table = Counted<Injected<MemoryStore, Latency>>;

fn table(namespaces: usize, buckets: usize, latency: Duration) -> Table {
    let store = MemoryStore::with_page_items(1_000);
    for n in 0..namespaces {
        add_namespace(&store, &format!("ns{n:03}"), buckets);
    }
    Counted::new(Injected {
        inner: store,
        faults: Latency(latency),
    })
}

fn controller(store: &Table, stop: Option<Instant>) -> Controller<'_, Table, Fixed> {
    Controller {
        store,
        shards: &Fixed(1),
        stop_at: stop,
        wait: None,
    }
}

/// What the aggregator would have written by tick `m`: minute `m - 1`'s
/// usage of `tokens` on every namespace's resource, and the tick's canaries
/// sensed. Returns the tick's time.
async fn sense(store: &Table, namespaces: usize, m: i64, tokens: i64) -> i64 {
    let used = BTreeMap::from([("tpm".to_owned(), tokens * 1000)]);
    for n in 0..namespaces {
        let update = usage::add(&format!("ns{n:03}"), "r", T0 + (m - 1) * MINUTE_MS, &used);
        store.update(&update, Returns::Nothing).await.unwrap();
    }
    let now = T0 + m * MINUTE_MS + 5_000;
    let all: Vec<u32> = (0..canary::count_for(1)).collect();
    store
        .update(&canary::sense(now, &all), Returns::Nothing)
        .await
        .unwrap();
    now
}

/// Minute `m` sensed, then the tick: `(moved targets, modelled time)`.
async fn tick(store: &Table, namespaces: usize, m: i64, tokens: i64) -> (usize, Duration) {
    let now = sense(store, namespaces, m, tokens).await;
    store.reset();
    let started = Instant::now();
    let tick = controller(store, None).tick_all(now).await.unwrap();
    let moved = tick
        .namespaces
        .iter()
        .filter(|n| n.targets.iter().any(|t| t.moved))
        .count();
    (moved, started.elapsed())
}

fn calls(counts: &BTreeMap<&'static str, u64>) -> String {
    let total: u64 = counts.values().sum();
    let parts: Vec<String> = counts.iter().map(|(op, n)| format!("{op} {n}")).collect();
    format!("{total} ({})", parts.join(", "))
}

async fn per_namespace_count() {
    println!("| namespaces | steady tick: calls | time | tick moving every factor: calls | time |");
    println!("|---|---|---|---|---|");
    for namespaces in [1usize, 10, 100] {
        let store = table(namespaces, 10, LATENCY);
        for m in 0..8 {
            tick(&store, namespaces, m, 20_000).await;
        }
        let (moved, steady_time) = tick(&store, namespaces, 8, 20_000).await;
        assert_eq!(moved, 0, "steady");
        let steady = store.counts();
        let (moved, move_time) = tick(&store, namespaces, 9, 150_000).await;
        assert_eq!(moved, namespaces, "a surge moves every factor");
        let change = store.counts();
        println!(
            "| {namespaces} | {} | {:.2} s | {} | {:.2} s |",
            calls(&steady),
            steady_time.as_secs_f64(),
            calls(&change),
            move_time.as_secs_f64()
        );
    }
}

/// Every bucket of `ns000`'s resource at `factor` x base.
fn all_at(store: &Table, factor: i64) -> usize {
    store
        .inner()
        .inner
        .items()
        .iter()
        .filter(|i| i.get("b_tpm_ra").and_then(|a| a.as_int()) == Some(factor * 1_000_000))
        .count()
}

async fn hundred_thousand() {
    const BUCKETS: usize = 100_000;
    let store = table(1, 0, SLOW);
    for i in 0..BUCKETS {
        store
            .inner()
            .inner
            .insert(bucket("ns000", &format!("e{i:06}"), 10_000_000, 1_000_000));
    }
    // A 60 s invocation: 15 s for canaries, stopped 3 s before its end.
    let budget = Duration::from_secs(42);
    let mut m = 0;
    let mut run = |tokens: i64| {
        m += 1;
        let store = &store;
        async move {
            let now = sense(store, 1, m, tokens).await;
            let stop = Instant::now() + budget;
            let tick = controller(store, Some(stop)).tick_all(now).await.unwrap();
            tick.namespaces[0].targets[0].clone()
        }
    };
    // Three ticks to the first evaluated minute, at 10% of capacity (x10).
    let mut ticks = Vec::new();
    for _ in 0..3 {
        ticks.push(run(10_000).await);
    }
    let started = Instant::now();
    let writes_before = store.counts().get("UpdateItem").copied().unwrap_or(0);
    ticks.push(run(10_000).await);
    // A surge in the next minute: a cut while the raise's lap is under way.
    ticks.push(run(150_000).await);
    let cut_at = ticks.len();
    while all_at(&store, 1) < BUCKETS && ticks.len() < 20 {
        ticks.push(run(150_000).await);
    }
    let target = Target::from_item(
        &store
            .inner()
            .inner
            .item("ns000/ADAPTIVE#", "#TARGET#r#tpm")
            .unwrap(),
    )
    .unwrap();
    let writes = store.counts().get("UpdateItem").copied().unwrap_or(0) - writes_before;
    println!("| tick | factor | moved | buckets stamped | lap through |");
    println!("|---|---|---|---|---|");
    for (i, t) in ticks.iter().enumerate().skip(3) {
        println!(
            "| {} | {:.2} | {} | {} | {} |",
            i + 1,
            t.factor,
            t.moved,
            t.buckets_stamped,
            !t.pass_unfinished
        );
    }
    println!(
        "\n{BUCKETS} buckets: raised, then cut during the raise's lap; every bucket at base {} \
         tick(s) after the cut; {writes} UpdateItem in all; {:.0} s modelled; lap through: {}",
        ticks.len() - cut_at + 1,
        started.elapsed().as_secs_f64(),
        target.stamped == target.generation
    );
}

/// The table for the share comparison: `entities` buckets of `r` (base
/// 1,000 a minute, at most 10x), `r` sized for all their bases together,
/// shared by demand or by base.
fn share_table(entities: usize, demand: bool) -> Table {
    use zae_table::adaptive::Declaration;
    let store = table(1, 0, LATENCY);
    let inner = &store.inner().inner;
    for i in 0..entities {
        inner.insert(bucket("ns000", &format!("e{i:06}"), 10_000_000, 1_000_000));
    }
    let mut d =
        Declaration::from_item(&inner.item("ns000/ADAPTIVE#", "#DECLARATION").unwrap()).unwrap();
    d.capacity
        .get_mut("r")
        .unwrap()
        .insert("tpm".into(), entities as i64 * 1_000);
    if demand {
        d.demand.insert("r".to_owned());
    }
    inner.insert(d.to_item("ns000"));
    store
}

/// One minute as the sensor writes it: everyone at 20% of base, and
/// `saturated` entities taking all of their base, each listed as saturated.
async fn share_minute(store: &Table, m: i64, entities: usize, saturated: usize) -> i64 {
    use zae_table::adaptive::demand::{Listing, Seen};
    let minute = T0 + (m - 1) * MINUTE_MS;
    let used = (entities - saturated) as i64 * 200 + saturated as i64 * 1_000;
    for i in 0..saturated {
        let entity = format!("e{i:06}");
        let listing = Listing {
            namespace: "ns000",
            resource: "r",
            minute_ms: minute,
            entity: &entity,
        };
        let seen = Seen {
            used: BTreeMap::from([("tpm".to_owned(), 1_000_000)]),
            short: BTreeMap::from([("tpm".to_owned(), [0].into())]),
            shards: 1,
        };
        store.transact(&listing.admit(&seen)).await.unwrap();
    }
    sense(store, 1, m, used).await
}

/// What one move costs under each share, and what it stamps in all.
async fn writes_per_move() {
    println!(
        "| entities | share | writes in the moving tick | buckets stamped | stamped / capacity |"
    );
    println!("|---|---|---|---|---|");
    for entities in [1_000usize, 100_000] {
        for demand in [false, true] {
            let store = share_table(entities, demand);
            let mut now = 0;
            for m in 0..4 {
                now = share_minute(&store, m, entities, 20).await;
                if m < 3 {
                    controller(&store, None).tick_all(now).await.unwrap();
                }
            }
            store.reset();
            let tick = controller(&store, None).tick_all(now).await.unwrap();
            let t = &tick.namespaces[0].targets[0];
            let counts = store.counts();
            let writes: u64 = ["UpdateItem", "TransactWriteItems", "PutItem", "DeleteItem"]
                .iter()
                .filter_map(|op| counts.get(op))
                .sum();
            let stamped: i64 = store
                .inner()
                .inner
                .items()
                .iter()
                .filter_map(|i| i.get("b_tpm_ra").and_then(|a| a.as_int()))
                .sum();
            println!(
                "| {entities} | {} | {writes} ({}) | {} | {:.2} |",
                if demand { "demand" } else { "base" },
                calls(&counts),
                t.buckets_stamped,
                stamped as f64 / 1000.0 / (entities as f64 * 1_000.0),
            );
        }
    }
}

/// The demand tick that raises 1,000 saturated entities of 10,000 and of
/// 100,000, in an invocation stopped 57 s in, as the Lambda's.
async fn demand_at_scale() {
    use zae_table::value::item_size;
    println!(
        "| entities | saturated | calls in the raising tick | time | entities stamped | target item |"
    );
    println!("|---|---|---|---|---|---|");
    for entities in [10_000usize, 100_000] {
        let store = share_table(entities, true);
        let mut now = 0;
        for m in 0..4 {
            now = share_minute(&store, m, entities, 1_000).await;
            if m < 3 {
                controller(&store, None).tick_all(now).await.unwrap();
            }
        }
        store.reset();
        let started = Instant::now();
        let stop = started + Duration::from_secs(57);
        let tick = controller(&store, Some(stop)).tick_all(now).await.unwrap();
        let elapsed = started.elapsed();
        let share = tick.namespaces[0].targets[0]
            .share
            .clone()
            .unwrap_or_default();
        let stamped = share.entities.iter().filter(|e| e.stamped).count();
        let (pk, sk) = Target::key("ns000", "r", "tpm");
        let target = store.inner().inner.item(&pk, &sk).unwrap();
        let counts = store.counts();
        println!(
            "| {entities} | 1,000 | {} | {:.1} s | {stamped} | {:.1} KB |",
            calls(&counts),
            elapsed.as_secs_f64(),
            item_size(&target) as f64 / 1024.0,
        );
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    // `demand`: the fourth part alone.
    if std::env::args().nth(1).as_deref() == Some("demand") {
        demand_at_scale().await;
        return;
    }
    println!(
        "== calls and time per tick, {} ms a call\n",
        LATENCY.as_millis()
    );
    per_namespace_count().await;
    println!(
        "\n== a move on 100,000 buckets, moved again during its lap, {} ms a call\n",
        SLOW.as_millis()
    );
    hundred_thousand().await;
    println!(
        "\n== writes per move, share: base against share: demand, 20 saturated, {} ms a call\n",
        LATENCY.as_millis()
    );
    writes_per_move().await;
    println!(
        "\n== the demand tick at scale, 1,000 saturated, {} ms a call, stopped 57 s in\n",
        LATENCY.as_millis()
    );
    demand_at_scale().await;
}
