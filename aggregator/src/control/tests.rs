//! The controller on the in-memory twin of the table, with its clock
//! injected: usage minutes written as the sensor writes them, canaries
//! marked sensed as the aggregator marks them.

use super::*;
use std::collections::BTreeMap;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::usage::{self, MINUTE_MS};
use zae_table::adaptive::{Declaration, canary};
use zae_table::store::{Counted, Returns};
use zae_table::{Attr, Item};
use zae_test_support::memory::MemoryStore;

const NS: &str = "ns";
/// A minute start.
const T0: i64 = 1_796_032_800_000;
use zae_test_support::adaptive::CAPACITY_TPM as CAPACITY;

fn table(buckets: usize) -> MemoryStore {
    zae_test_support::adaptive::table(NS, buckets)
}

fn bucket(entity: &str, cp: i64, ra: i64) -> Item {
    zae_test_support::adaptive::bucket(NS, entity, cp, ra)
}

fn ra(store: &MemoryStore, entity: &str) -> i64 {
    store
        .item(&format!("{NS}/BUCKET#{entity}#r#0"), "#STATE")
        .unwrap()["b_tpm_ra"]
        .as_int()
        .unwrap()
}

/// The sensor's minute: `tokens` of tpm used in the minute starting at `minute`.
async fn used(store: &MemoryStore, minute: i64, tokens: i64) {
    let used = BTreeMap::from([("tpm".to_owned(), tokens * 1000)]);
    store
        .update(&usage::add(NS, "r", minute, &used), Returns::Nothing)
        .await
        .unwrap();
}

/// What the aggregator does on reading the canaries written at `at`.
async fn sense(store: &MemoryStore, at: i64) {
    for k in 0..canary::CANARIES {
        let _ = store
            .update(&canary::sense(NS, k, at), Returns::Nothing)
            .await;
    }
}

fn controller(store: &MemoryStore) -> Controller<'_, MemoryStore> {
    Controller {
        store,
        stop_at: None,
        wait: None,
    }
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
    let mut path = Vec::new();
    for m in minutes {
        let now = T0 + m * MINUTE_MS + 5_000;
        used(store, T0 + (m - 1) * MINUTE_MS, load(m - 1)).await;
        sense(store, now).await;
        let tick = controller(store).tick(NS, now).await.unwrap().unwrap();
        path.push(tick.targets[0].factor);
    }
    path
}

#[tokio::test]
async fn a_steady_fifth_of_capacity_reaches_five_within_three_evaluating_ticks() {
    let store = table(3);
    let path = run(&store, 0..7, |_| 20_000).await;
    assert_eq!(
        &path[..3],
        &[1.0, 1.0, 1.0],
        "nothing evaluated before tick 3"
    );
    assert!((path[5] - 5.0).abs() <= 0.5, "ticks 3, 4, 5: {path:?}");
    for e in ["e0", "e1", "e2"] {
        let stamped = ra(&store, e);
        assert_eq!(stamped, (1_000_000.0 * path[6]).floor() as i64, "{e}");
    }
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
        let tick = controller(&store).tick(NS, now).await.unwrap().unwrap();
        stalled.push((tick.blind, tick.targets[0].factor));
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
    controller(&store).tick(NS, now + 1_000).await.unwrap();
    let before = store.items();
    let again = controller(&store)
        .tick(NS, now + 2_000)
        .await
        .unwrap()
        .unwrap();
    assert!(again.targets[0].minutes.is_empty() && !again.canaries_written);
    let after: Vec<Item> = store
        .items()
        .into_iter()
        .filter(|i| i["SK"] != Attr::s(keys::SK_ADAPTIVE_TICK))
        .collect();
    let before: Vec<Item> = before
        .into_iter()
        .filter(|i| i["SK"] != Attr::s(keys::SK_ADAPTIVE_TICK))
        .collect();
    assert_eq!(before, after);
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
        store: &store,
        stop_at: Some(std::time::Instant::now()),
        wait: None,
    };
    let _ = late.tick(NS, now).await.unwrap();
    let (pk, sk) = Target::key(NS, "r", "tpm");
    let target = Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
    assert!(target.stamped < target.generation, "{target:?}");
    sense(&store, now + MINUTE_MS).await;
    let tick = controller(&store)
        .tick(NS, now + MINUTE_MS)
        .await
        .unwrap()
        .unwrap();
    let target = Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
    assert_eq!(target.stamped, target.generation, "{tick:?}");
    assert!(ra(&store, "e2") > 1_000_000);
}

#[tokio::test]
async fn a_tick_that_changes_no_factor_reads_the_same_for_one_bucket_or_a_hundred() {
    let mut reads = Vec::new();
    for buckets in [1, 100] {
        let store = table(buckets);
        run(&store, 0..10, |_| 20_000).await;
        used(&store, T0 + 9 * MINUTE_MS, 20_000).await;
        sense(&store, T0 + 10 * MINUTE_MS + 5_000).await;
        let counted = Counted::new(store);
        let tick = Controller {
            store: &counted,
            stop_at: None,
            wait: None,
        }
        .tick(NS, T0 + 10 * MINUTE_MS + 5_000)
        .await
        .unwrap()
        .unwrap();
        assert!(!tick.targets[0].moved, "{tick:?}");
        reads.push(counted.counts());
    }
    assert_eq!(reads[0], reads[1]);
}

#[tokio::test]
async fn dropping_the_opt_in_returns_every_bucket_to_base_and_retires_the_target() {
    let store = table(2);
    let path = run(&store, 0..7, |_| 20_000).await;
    assert!(ra(&store, "e0") > 4_000_000, "{path:?}");
    // The manifest keeps the estimated capacity, drops `adaptive`.
    let kept = Declaration {
        capacity: BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), CAPACITY)]))]),
        levels: Vec::new(),
        ..Declaration::default()
    };
    store.insert(kept.to_item(NS));
    let tick = controller(&store)
        .tick(NS, T0 + 7 * MINUTE_MS + 5_000)
        .await
        .unwrap()
        .unwrap();
    assert!(tick.targets[0].retired, "{tick:?}");
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
    assert!(
        controller(&store)
            .tick(NS, T0 + 8 * MINUTE_MS)
            .await
            .unwrap()
            .is_none()
    );
}
