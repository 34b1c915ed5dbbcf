//! The controller on the in-memory twin of the table, with its clock
//! injected: usage minutes written as the sensor writes them, canaries
//! marked sensed as the aggregator marks them.

use super::stream_shards::Fixed;
use super::*;
use std::collections::BTreeMap;
use zae_table::adaptive::stamp;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::tick::Written;
use zae_table::adaptive::usage::{self, MINUTE_MS};
use zae_table::adaptive::{AdaptiveLevel, Declaration, Factor, canary};
use zae_table::store::{Counted, Returns};
use zae_table::{Attr, Item, Level};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

const NS: &str = "ns";
/// A minute start.
const T0: i64 = 1_796_032_800_000;
use zae_test_support::adaptive::CAPACITY_TPM as CAPACITY;

/// Canaries per tick on a one-shard stream.
const ONE_SHARD: u32 = 4;

fn table(buckets: usize) -> MemoryStore {
    zae_test_support::adaptive::table(NS, buckets)
}

fn bucket(entity: &str, cp: i64, ra: i64) -> Item {
    zae_test_support::adaptive::bucket(NS, entity, cp, ra)
}

fn ra_in(store: &MemoryStore, namespace: &str, entity: &str) -> i64 {
    store
        .item(&format!("{namespace}/BUCKET#{entity}#r#0"), "#STATE")
        .unwrap()["b_tpm_ra"]
        .as_int()
        .unwrap()
}

fn ra(store: &MemoryStore, entity: &str) -> i64 {
    ra_in(store, NS, entity)
}

fn target(store: &MemoryStore, namespace: &str) -> Target {
    let (pk, sk) = Target::key(namespace, "r", "tpm");
    Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap()
}

/// The sensor's minute: `tokens` of tpm used in the minute starting at `minute`.
async fn used(store: &impl Store, minute: i64, tokens: i64) {
    let used = BTreeMap::from([("tpm".to_owned(), tokens * 1000)]);
    store
        .update(&usage::add(NS, "r", minute, &used), Returns::Nothing)
        .await
        .unwrap();
}

/// What the aggregator does on reading every canary of the tick at `at`
/// (one shard).
async fn sense(store: &impl Store, at: i64) {
    let indices: Vec<u32> = (0..ONE_SHARD).collect();
    store
        .update(&canary::sense(at, &indices), Returns::Nothing)
        .await
        .unwrap();
}

fn controller<S: Store>(store: &S) -> Controller<'_, S, Fixed> {
    Controller {
        store,
        shards: &Fixed(1),
        stop_at: None,
        wait: None,
    }
}

/// One tick at `now`: the report of namespace `ns`.
async fn tick(store: &MemoryStore, now: i64) -> NamespaceTick {
    let tick = controller(store).tick_all(now).await.unwrap();
    assert!(tick.failed.is_empty(), "{tick:?}");
    tick.namespaces
        .into_iter()
        .next()
        .expect("namespace ns ticked")
}

/// Ticks 5 s into each of `minutes` (counted from `T0`), `load(m)` tokens
/// used in minute `m`, each tick's canaries sensed as soon as written (what
/// the Lambda's wait for them gives): tick `m` evaluates minute `m - 1`.
/// A new target's first minute is the third after its first tick, so the
/// first tick that evaluates is tick 3.
async fn run(
    store: &MemoryStore,
    minutes: std::ops::Range<i64>,
    load: impl Fn(i64) -> i64,
) -> Vec<f64> {
    run_from(store, T0, minutes, load).await
}

/// `run` on a controller clock whose minute 0 starts at `start`.
async fn run_from(
    store: &MemoryStore,
    start: i64,
    minutes: std::ops::Range<i64>,
    load: impl Fn(i64) -> i64,
) -> Vec<f64> {
    let mut path = Vec::new();
    for m in minutes {
        let now = start + m * MINUTE_MS + 5_000;
        used(store, start + (m - 1) * MINUTE_MS, load(m - 1)).await;
        sense(store, now).await;
        path.push(tick(store, now).await.targets[0].factor);
    }
    path
}

#[tokio::test]
async fn a_steady_fifth_of_capacity_reaches_five_at_the_first_evaluating_tick() {
    let store = table(3);
    let path = run(&store, 0..7, |_| 20_000).await;
    assert_eq!(
        &path[..3],
        &[1.0, 1.0, 1.0],
        "nothing evaluated before tick 3"
    );
    assert!((path[3] - 5.0).abs() <= 0.05, "ticks 3, 4, 5: {path:?}");
    for e in ["e0", "e1", "e2"] {
        assert_eq!(ra(&store, e), (1_000_000.0 * path[6]).round() as i64, "{e}");
    }
    let t = target(&store, NS);
    assert_eq!(t.history.last().map(|m| m.reason.as_str()), Some("raise"));
}

#[tokio::test]
async fn the_target_utilization_is_what_the_law_aims_at() {
    let store = table(1);
    let mut declaration = Declaration::from_item(
        &store
            .item(&keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION)
            .unwrap(),
    )
    .unwrap();
    declaration.target = BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), 800_000)]))]);
    store.insert(declaration.to_item(NS));
    let path = run(&store, 0..6, |_| 20_000).await;
    assert!((path[5] - 4.0).abs() <= 0.05, "0.8 / 0.2 = 4: {path:?}");
}

#[tokio::test]
async fn a_surge_goes_to_base_at_the_tick_its_first_minute_is_complete() {
    let store = table(2);
    let path = run(&store, 0..7, |_| 20_000).await;
    assert!(path[6] > 4.0, "{path:?}");
    // Minute 7 surges to 150% of the estimated capacity: complete at tick 8.
    let surge = run(&store, 7..9, |m| if m >= 7 { 150_000 } else { 20_000 }).await;
    assert!(
        surge[0] > 4.0,
        "minute 7 is not complete at tick 7: {surge:?}"
    );
    assert_eq!(surge[1], 1.0, "{surge:?}");
    let bucket = store
        .item(&format!("{NS}/BUCKET#e0#r#0"), "#STATE")
        .unwrap();
    assert_eq!(bucket["b_tpm_ra"], Attr::n(1_000_000));
    assert_eq!(
        bucket["vu"],
        Attr::n(0),
        "a cut voids the pins of older images"
    );
    assert_eq!(target(&store, NS).history.last().unwrap().reason, "surge");
}

#[tokio::test]
async fn blind_for_two_ticks_goes_to_base_and_an_idle_sensed_minute_scales_up() {
    let store = table(1);
    // Idle but sensed: utilization 0 scales up.
    let path = run(&store, 0..5, |_| 0).await;
    assert!(path[4] > 5.0, "{path:?}");
    // The stream stalls: canaries written, never sensed.
    let mut stalled = Vec::new();
    for m in 5..9 {
        let now = T0 + m * MINUTE_MS + 5_000;
        let tick = controller(&store).tick_all(now).await.unwrap();
        stalled.push((tick.blind, tick.namespaces[0].targets[0].factor));
    }
    assert_eq!(
        stalled[1].1, path[4],
        "one unsensed tick is not blindness: {stalled:?}"
    );
    assert!(stalled[2].0 && stalled[2].1 == 1.0, "{stalled:?}");
    assert_eq!(ra(&store, "e0"), 1_000_000);
}

#[tokio::test]
async fn calling_again_within_the_minute_changes_nothing() {
    let store = table(1);
    run(&store, 0..5, |_| 20_000).await;
    let now = T0 + 4 * MINUTE_MS + 5_000;
    controller(&store).tick_all(now + 1_000).await.unwrap();
    let before = store.items();
    let again = controller(&store).tick_all(now + 2_000).await.unwrap();
    assert!(again.namespaces[0].targets[0].minutes.is_empty() && again.canaries_written == 0);
    // Only the records of when it ran move: the table's tick and each
    // target's `ticked_at`.
    let ticks = |items: Vec<Item>| -> Vec<Item> {
        items
            .into_iter()
            .filter(|i| i["SK"] != Attr::s(keys::SK_ADAPTIVE_TICK))
            .map(|mut i| {
                i.remove(zae_table::adaptive::target::TICKED_AT);
                i
            })
            .collect()
    };
    assert_eq!(ticks(before), ticks(store.items()));
}

#[tokio::test]
async fn buckets_on_other_parameters_are_left_alone() {
    let store = table(1);
    // Created by acquire(limits=...) with its own capacity.
    store.insert(bucket("own", 7_000_000, 700_000));
    run(&store, 0..5, |_| 20_000).await;
    assert!(ra(&store, "e0") > 1_000_000);
    assert_eq!(ra(&store, "own"), 700_000);
}

#[tokio::test]
async fn a_pass_cut_short_goes_on_from_its_cursor() {
    let store = table(3);
    run(&store, 0..3, |_| 20_000).await;
    // The next tick decides a move but has no time for buckets.
    used(&store, T0 + 2 * MINUTE_MS, 20_000).await;
    let now = T0 + 3 * MINUTE_MS + 5_000;
    sense(&store, now).await;
    let late = Controller {
        stop_at: Some(tokio::time::Instant::now()),
        ..controller(&store)
    };
    let _ = late.tick_all(now).await.unwrap();
    let t = target(&store, NS);
    assert!(t.stamped < t.generation, "{t:?}");
    sense(&store, now + MINUTE_MS).await;
    let tick = tick(&store, now + MINUTE_MS).await;
    let t = target(&store, NS);
    assert_eq!(t.stamped, t.generation, "{tick:?}");
    assert!(ra(&store, "e2") > 1_000_000);
}

#[tokio::test]
async fn a_tick_that_changes_no_factor_reads_the_same_for_one_bucket_or_a_hundred() {
    let mut calls = Vec::new();
    for buckets in [1, 100] {
        let store = table(buckets);
        run(&store, 0..10, |_| 20_000).await;
        used(&store, T0 + 9 * MINUTE_MS, 20_000).await;
        sense(&store, T0 + 10 * MINUTE_MS + 5_000).await;
        let counted = Counted::new(store);
        let tick = controller(&counted)
            .tick_all(T0 + 10 * MINUTE_MS + 5_000)
            .await
            .unwrap();
        assert!(!tick.namespaces[0].targets[0].moved, "{tick:?}");
        calls.push(counted.counts());
    }
    assert_eq!(calls[0], calls[1]);
}

/// The stack enables the controller by default, so its tick must cost next to
/// nothing where no namespace declares an adaptive limit (docs/costs.md):
/// the registry's query, two reads per namespace, and one write (the tick
/// record's mark that it ran): no canary, no wait for one. A namespace with
/// limits but no declaration is the common case.
#[tokio::test]
async fn a_tick_with_nothing_adaptive_reads_each_namespace_and_writes_only_its_mark() {
    let store = MemoryStore::new();
    for namespace in ["a", "b", "c"] {
        store.register_namespace(namespace);
        let config = zae_table::config::LevelConfig {
            limits: vec![zae_table::config::LimitConfig::drip(
                "tpm", 10_000, 1_000, 60,
            )],
            ..zae_table::config::LevelConfig::default()
        };
        store.insert(zae_table::config::build_item(
            namespace,
            &Level::System,
            &config,
        ));
    }
    let counted = Counted::new(store);
    let waiting = Controller {
        wait: Some(std::time::Duration::from_secs(15)),
        ..controller(&counted)
    };
    let tick = waiting.tick_all(T0 + 5_000).await.unwrap();
    assert!(
        tick.namespaces.is_empty() && tick.failed.is_empty(),
        "{tick:?}"
    );
    assert_eq!(tick.canaries_written, 0);
    let calls = counted.counts();
    assert_eq!(
        calls,
        BTreeMap::from([("GetItem", 3), ("Query", 4), ("UpdateItem", 1)]),
        "the registry's query, each namespace's declaration and targets, the tick's mark"
    );
}

#[tokio::test]
async fn dropping_the_opt_in_returns_every_bucket_to_base_and_retires_the_target() {
    let store = table(2);
    let path = run(&store, 0..7, |_| 20_000).await;
    assert!(ra(&store, "e0") > 4_000_000, "{path:?}");
    // The manifest keeps the estimated capacity, drops `adaptive`.
    let kept = Declaration {
        capacity: BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), CAPACITY)]))]),
        ..Declaration::default()
    };
    store.insert(kept.to_item(NS));
    let t = tick(&store, T0 + 7 * MINUTE_MS + 5_000).await;
    assert!(t.targets[0].retired, "{t:?}");
    for e in ["e0", "e1"] {
        assert_eq!(ra(&store, e), 1_000_000, "{e}");
    }
    let (pk, sk) = Target::key(NS, "r", "tpm");
    assert!(store.item(&pk, &sk).is_none());
    // With no declaration at all, there is nothing left to tick.
    store
        .delete(&keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION, None)
        .await
        .unwrap();
    let last = controller(&store)
        .tick_all(T0 + 8 * MINUTE_MS)
        .await
        .unwrap();
    assert!(!last.adaptive(), "{last:?}");
}

/// A controller whose clock runs a day ahead raises the buckets, and the
/// opt-in is dropped: the retire takes them back to base under its
/// generation. The opt-in comes back, and a controller on the right clock
/// makes the target again: its generation comes from the namespace's
/// counter, above every one taken before, so its lap raises them again. A
/// generation read off the clock was a day below the retire's, and every
/// bucket stayed at base for that day.
#[tokio::test]
async fn a_target_made_again_after_a_retire_raises_its_buckets_whatever_the_clock() {
    const DAY: i64 = 86_400_000;
    let store = table(2);
    let (pk, sk) = (keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION);
    let declared = store.item(&pk, sk).unwrap();
    run_from(&store, T0 + DAY, 0..7, |_| 20_000).await;
    assert!(ra(&store, "e0") > 4_000_000);
    let kept = Declaration {
        capacity: BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), CAPACITY)]))]),
        ..Declaration::default()
    };
    store.insert(kept.to_item(NS));
    assert!(tick(&store, T0 + DAY + 7 * MINUTE_MS + 5_000).await.targets[0].retired);
    assert_eq!(ra(&store, "e0"), 1_000_000);
    store.insert(declared);
    let path = run_from(&store, T0 + 20 * MINUTE_MS, 0..7, |_| 20_000).await;
    assert!(path[6] > 4.0, "{path:?}");
    for e in ["e0", "e1"] {
        assert_eq!(ra(&store, e), (1_000_000.0 * path[6]).round() as i64, "{e}");
    }
}

/// Fifty namespaces, each with three buckets stamped at 5x; the stream
/// stalled three minutes ago, so the canaries written then never came
/// through. One invocation with a minute's deadline (time paused: the
/// 15-second wait for this tick's canaries passes at once) makes the table
/// blind and puts every governed bucket of every namespace at base.
#[tokio::test(start_paused = true)]
async fn one_tick_under_a_minute_blinds_fifty_namespaces_whose_stream_stalled() {
    let store = MemoryStore::new();
    let names: Vec<String> = (0..50).map(|i| format!("ns{i:02}")).collect();
    for ns in &names {
        zae_test_support::adaptive::add_namespace(&store, ns, 0);
        zae_test_support::adaptive::five_times(&store, ns, 1).await;
        for e in ["a", "b", "c"] {
            store.insert(zae_test_support::adaptive::stamped(
                ns, e, 10_000_000, 5_000_000, 1,
            ));
        }
    }
    let now = T0 + 10 * MINUTE_MS;
    let mut record = zae_table::adaptive::tick::Tick::default();
    for back in [4, 3] {
        let at = now - back * MINUTE_MS;
        record.ticked(
            at,
            Some(Written {
                at_ms: at,
                count: ONE_SHARD,
            }),
        );
    }
    sense(&store, now - 4 * MINUTE_MS).await;
    store
        .update(&record.write(), Returns::Nothing)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let lambda = Controller {
        stop_at: Some(started + std::time::Duration::from_secs(57)),
        wait: Some(std::time::Duration::from_secs(15)),
        ..controller(&store)
    };
    let tick = lambda.tick_all(now).await.unwrap();
    assert!(tick.blind && tick.failed.is_empty(), "{tick:?}");
    assert_eq!(tick.namespaces.len(), 50);
    assert!(started.elapsed() <= std::time::Duration::from_secs(57));
    for ns in &names {
        assert_eq!(target(&store, ns).factor, Factor::ONE, "{ns}");
        for e in ["a", "b", "c"] {
            assert_eq!(ra_in(&store, ns, e), 1_000_000, "{ns} {e}");
        }
    }
    let events = metrics(&tick);
    let blind = events
        .iter()
        .find(|e| e.name() == crate::metrics::CONTROLLER_BLIND);
    assert_eq!(blind.map(|e| e.value()), Some(1.0));
}

/// While a tick waits for its canaries (here the stream is stalled, so the
/// whole 15 s), it reads only the sensed sets of the ticks it remembers.
/// It queried every sensed set each 500 ms, and the table keeps a day of
/// them: 1,440 items a poll, with consistent reads.
#[tokio::test(start_paused = true)]
async fn a_tick_waiting_for_its_canaries_reads_only_the_ticks_it_remembers() {
    #[derive(Default)]
    struct Reads {
        sensed_queries: std::sync::atomic::AtomicUsize,
        sensed_gets: std::sync::atomic::AtomicUsize,
    }
    impl Faults for Reads {
        fn before(&self, call: &Call<'_>) -> Option<StoreError> {
            use std::sync::atomic::Ordering::SeqCst;
            match call {
                Call::Query(q) if q.sk_prefix.starts_with(keys::SK_ADAPTIVE_SENSED) => {
                    self.sensed_queries.fetch_add(1, SeqCst);
                }
                Call::Get { sk, .. } if sk.starts_with(keys::SK_ADAPTIVE_SENSED) => {
                    self.sensed_gets.fetch_add(1, SeqCst);
                }
                _ => {}
            }
            None
        }
    }
    let store = MemoryStore::new();
    zae_test_support::adaptive::add_namespace(&store, "ns", 0);
    let now = T0 + 2 * 86_400_000;
    for back in 1..=1_440 {
        sense(&store, now - back * MINUTE_MS).await;
    }
    let store = Injected {
        inner: store,
        faults: Reads::default(),
    };
    let waiting = Controller {
        wait: Some(std::time::Duration::from_secs(15)),
        ..controller(&store)
    };
    waiting.tick_all(now).await.unwrap();
    let reads = &store.faults;
    assert_eq!(
        reads
            .sensed_queries
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    let gets = reads.sensed_gets.load(std::sync::atomic::Ordering::SeqCst);
    // 31 polls of the one tick it remembers (its first).
    assert!((1..=40).contains(&gets), "{gets} reads of sensed sets");
}

/// The declaration read of one namespace fails every time: that namespace
/// is reported failed, the others tick, and the tick's metrics say so.
#[tokio::test]
async fn a_namespace_that_fails_is_counted_and_the_others_tick() {
    struct Broken;
    impl Faults for Broken {
        fn before(&self, call: &Call<'_>) -> Option<StoreError> {
            match call {
                Call::Get { pk, sk }
                    if pk.starts_with("bad/") && *sk == keys::SK_ADAPTIVE_DECLARATION =>
                {
                    Some(StoreError::Fatal {
                        operation: "GetItem",
                        key: pk.to_string(),
                        message: "denied".into(),
                    })
                }
                _ => None,
            }
        }
    }
    let inner = table(1);
    zae_test_support::adaptive::add_namespace(&inner, "bad", 1);
    let store = Injected {
        inner,
        faults: Broken,
    };
    sense(&store, T0 + 5_000).await;
    let tick = controller(&store).tick_all(T0 + 5_000).await.unwrap();
    assert_eq!(tick.namespaces.len(), 1, "{tick:?}");
    assert_eq!(tick.failed.len(), 1);
    assert_eq!(tick.failed[0].0, "bad");
    let events = metrics(&tick);
    let failed = events
        .iter()
        .find(|e| e.name() == crate::metrics::NAMESPACE_TICKS_FAILED)
        .map(|e| e.value());
    assert_eq!(failed, Some(1.0));
    assert!(
        events
            .iter()
            .any(|e| e.name() == crate::metrics::CONTROLLER_TICKS)
    );
}

/// With nothing adaptive anywhere, a tick still records when it ran (one
/// write of the tick record, no canaries): the operator's smoke test reads
/// it. A tick whose only namespace failed records nothing.
#[tokio::test]
async fn a_tick_with_nothing_adaptive_records_only_that_it_ran() {
    let store = Counted::new(MemoryStore::new());
    store.inner().register_namespace(NS);
    let tick = controller(&store).tick_all(T0 + 5_000).await.unwrap();
    assert!(!tick.adaptive() && tick.canaries_written == 0, "{tick:?}");
    let recorded = Tick::read(store.inner(), true).await.unwrap();
    assert_eq!(recorded.ticked_at_ms, T0 + 5_000);
    assert!(recorded.canaries.is_empty(), "{recorded:?}");
    // The registry, the namespace's declaration and targets, the record.
    let counts: Vec<_> = store.counts().into_iter().collect();
    assert_eq!(
        counts,
        [("GetItem", 1), ("Query", 2), ("UpdateItem", 1)],
        "{counts:?}"
    );

    struct Unreadable;
    impl Faults for Unreadable {
        fn before(&self, call: &Call<'_>) -> Option<StoreError> {
            match call {
                Call::Get { pk, sk } if *sk == keys::SK_ADAPTIVE_DECLARATION => {
                    Some(StoreError::Fatal {
                        operation: "GetItem",
                        key: pk.to_string(),
                        message: "denied".into(),
                    })
                }
                _ => None,
            }
        }
    }
    let inner = MemoryStore::new();
    inner.register_namespace(NS);
    let store = Injected {
        inner,
        faults: Unreadable,
    };
    let tick = controller(&store).tick_all(T0 + 5_000).await.unwrap();
    assert_eq!(tick.failed.len(), 1, "{tick:?}");
    let recorded = Tick::read(&store.inner, true).await.unwrap();
    assert_eq!(recorded.ticked_at_ms, 0, "{recorded:?}");
}

/// One target, two levels: the system's `tpm` scales, entity `k`'s own
/// `tpm` on `r` is in shadow. The factor is computed and reported for both;
/// only the system's buckets are stamped. Switched to `utilization`, `k`'s
/// bucket gets the factor at the next tick.
#[tokio::test]
async fn levels_in_shadow_stay_at_base_until_switched_to_utilization() {
    let store = table(1);
    let k_level = Level::Entity {
        entity: "k".into(),
        resource: "r".into(),
    };
    let config = zae_table::config::LevelConfig {
        limits: vec![zae_table::config::LimitConfig::drip(
            "tpm", 20_000, 2_000, 60,
        )],
        ..zae_table::config::LevelConfig::default()
    };
    store.insert(zae_table::config::build_item(NS, &k_level, &config));
    store.insert(bucket("k", 20_000_000, 2_000_000));
    let declared = |shadow: bool| {
        let mut d = Declaration::from_item(
            &store
                .item(&keys::pk_adaptive(NS), keys::SK_ADAPTIVE_DECLARATION)
                .unwrap(),
        )
        .unwrap();
        d.levels.retain(|l| l.level == Level::System);
        d.levels.push(AdaptiveLevel {
            level: k_level.clone(),
            limit: "tpm".into(),
            max_scale: None,
            max_factor: Factor::from_ppm(10_000_000),
            shadow,
        });
        d.levels.sort();
        d.to_item(NS)
    };
    store.insert(declared(true));
    let path = run(&store, 0..6, |_| 20_000).await;
    assert!((path[5] - 5.0).abs() < 0.05, "{path:?}");
    assert_eq!(ra(&store, "e0"), 5_000_000);
    assert_eq!(ra(&store, "k"), 2_000_000, "in shadow: at base");
    store.insert(declared(false));
    run(&store, 6..7, |_| 20_000).await;
    assert_eq!(ra(&store, "k"), 10_000_000, "switched: 5x of 2,000");
}

/// A system default's capacity moved after the bucket was stamped (the
/// client leaves existing buckets as they are): the next lap puts it back
/// to the amount it had before its first stamp, not to the new base.
#[tokio::test]
async fn a_stamp_whose_capacity_moved_goes_back_to_the_amount_before_it() {
    let store = table(2);
    run(&store, 0..5, |_| 20_000).await;
    assert_eq!(ra(&store, "e0"), 5_000_000);
    let config = zae_table::config::LevelConfig {
        limits: vec![zae_table::config::LimitConfig::drip(
            "tpm", 20_000, 2_000, 60,
        )],
        ..zae_table::config::LevelConfig::default()
    };
    store.insert(zae_table::config::build_item(NS, &Level::System, &config));
    // A surge moves the factor: its lap meets the bucket.
    run(&store, 5..7, |m| if m >= 5 { 150_000 } else { 20_000 }).await;
    let e0 = store
        .item(&format!("{NS}/BUCKET#e0#r#0"), "#STATE")
        .unwrap();
    assert_eq!(e0["b_tpm_ra"], Attr::n(1_000_000));
    assert!(!e0.contains_key(&stamp::generation_attr("tpm")));
}

/// A write's round trip slow enough that a lap of ten thousand buckets
/// takes three ticks: 16 writes in flight at 200 ms each, 80 a second, in
/// the 42 s a minute-long invocation leaves after its canary wait.
struct Slow;
impl Faults for Slow {
    fn delay(&self, call: &Call<'_>) -> Option<std::time::Duration> {
        matches!(call, Call::Update(u) if u.pk.contains("/BUCKET#"))
            .then_some(std::time::Duration::from_millis(200))
    }
}

/// Laps of three ticks: settled at 10x, then the factor moving every other
/// tick (as often as it can: the minute after a move is under two factors)
/// between 1 and 5. Each lap goes on from where the last one was with the
/// newest factor, so every bucket is written at least once every three
/// ticks and carries a move of the last three; once the factor holds, every
/// bucket has it within three ticks and the lap is through. Laps that
/// started over at each move would leave the last third at 10x.
/// (docs/benchmarks.md has a move on 100,000 buckets.)
#[tokio::test(start_paused = true)]
async fn laps_longer_than_a_tick_reach_every_bucket_while_the_factor_keeps_moving() {
    const BUCKETS: usize = 10_000;
    let inner = MemoryStore::with_page_items(1_000);
    zae_test_support::adaptive::add_namespace(&inner, NS, 0);
    for i in 0..BUCKETS {
        inner.insert(bucket(&format!("e{i:05}"), 10_000_000, 1_000_000));
    }
    let store = Injected {
        inner,
        faults: Slow,
    };
    let budget = std::time::Duration::from_secs(42);
    let mut m = 0;
    let mut step = |tokens: i64| {
        m += 1;
        let store = &store;
        async move {
            used(store, T0 + (m - 1) * MINUTE_MS, tokens).await;
            let now = T0 + m * MINUTE_MS + 5_000;
            sense(store, now).await;
            let lambda = Controller {
                stop_at: Some(tokio::time::Instant::now() + budget),
                ..controller(store)
            };
            let tick = lambda.tick_all(now).await.unwrap();
            tick.namespaces[0].targets[0].clone()
        }
    };
    // Buckets whose amount is none of `factors`.
    let stale = |factors: &[f64]| {
        (0..BUCKETS)
            .filter(|i| {
                let ra = ra(&store.inner, &format!("e{i:05}"));
                !factors
                    .iter()
                    .any(|f| (f * 1_000_000.0).round() as i64 == ra)
            })
            .count()
    };
    // Idle at 10%: raised to 10x, and the lap goes through.
    for _ in 0..8 {
        step(10_000).await;
    }
    assert_eq!(stale(&[10.0]), 0);
    // Then surges (cut to 1) and minutes at 20% (raised to 5) two by two.
    let mut moves: Vec<(usize, f64)> = Vec::new();
    let usage = [
        150_000, 150_000, 20_000, 20_000, 150_000, 150_000, 20_000, 20_000,
    ];
    for (k, tokens) in usage.into_iter().enumerate() {
        let t = step(tokens).await;
        if t.moved {
            moves.push((k, t.factor));
        }
        assert!(t.pass_unfinished, "a lap cannot finish in two ticks: {t:?}");
        if k >= 3 {
            let recent: Vec<f64> = moves
                .iter()
                .filter(|(at, _)| *at + 3 >= k)
                .map(|m| m.1)
                .collect();
            assert_eq!(stale(&recent), 0, "tick {k}, moves {moves:?}");
        }
    }
    let factors: Vec<f64> = moves.iter().map(|m| m.1).collect();
    assert_eq!(factors, [1.0, 5.0, 1.0, 5.0], "{moves:?}");
    // The factor holds at 5: every bucket there within three ticks.
    let at_five = || stale(&[5.0]) == 0;
    let mut after = Vec::new();
    while !at_five() && after.len() < 4 {
        after.push(step(20_000).await);
    }
    assert!(at_five() && after.len() <= 3, "{after:?}");
    // The lap comes round to where it began: through, with nothing to write.
    let mut t = target(&store.inner, NS);
    if t.stamped < t.generation {
        let last = step(20_000).await;
        assert_eq!(last.buckets_stamped, 0, "{last:?}");
        t = target(&store.inner, NS);
    }
    assert_eq!(t.stamped, t.generation, "the lap is through: {t:?}");
}

/// Generations come from the namespace's counter: each above every one
/// taken before whatever the taker's clock (the clock only seeds a counter
/// not yet made), a block of them consecutive, and a counter behind what its
/// taker read (a record of an earlier build's, off a clock) moved up to it.
#[tokio::test]
async fn generations_rise_from_one_counter_whatever_the_clocks() {
    use zae_table::adaptive::generation::take;
    const DAY: i64 = 86_400_000;
    let store = MemoryStore::new();
    let first = take(&store, NS, 1, 0, T0 + DAY).await.unwrap();
    assert_eq!(first, T0 + DAY + 1, "seeded by the first taker's clock");
    let behind = take(&store, NS, 1, 0, T0).await.unwrap();
    assert_eq!(behind, first + 1, "a clock a day behind takes the next one");
    let block = take(&store, NS, 3, 0, T0).await.unwrap();
    assert_eq!(block, first + 2);
    let floor = first + 100;
    assert_eq!(take(&store, NS, 2, floor, T0).await.unwrap(), floor);
    assert_eq!(take(&store, NS, 1, 0, T0).await.unwrap(), floor + 2);
    let many = futures::future::join_all((0..20).map(|_| take(&store, NS, 1, 0, T0))).await;
    let many: std::collections::BTreeSet<i64> = many.into_iter().map(Result::unwrap).collect();
    assert_eq!(many.len(), 20, "never the same one twice");
    assert_eq!(
        take(&store, "other", 1, 0, T0).await.unwrap(),
        T0 + 1,
        "one per namespace"
    );
}

mod surge;
