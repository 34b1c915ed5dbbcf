//! The demand share on the in-memory twin: the sensor's demand items written
//! as the aggregator writes them, the controller's clock injected.

use super::super::shards::Fixed;
use super::super::{Controller, NamespaceTick};
use std::collections::{BTreeMap, BTreeSet};
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::demand::{Listing, Seen};
use zae_table::adaptive::usage::{self, MINUTE_MS};
use zae_table::adaptive::{Declaration, canary};
use zae_table::store::{Counted, Returns, Store};
use zae_test_support::memory::MemoryStore;

const NS: &str = "ns";
const T0: i64 = 1_796_032_800_000;
/// Sized for the heavy entity's base (1,000 a minute) and 7,000 more.
const CAPACITY: i64 = 12_000;
const LIGHT: [&str; 10] = ["e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10"];

/// `e0` .. `e10` at base (1,000 a minute, burst 10,000: at most 10x), `r`
/// shared by demand.
fn table() -> MemoryStore {
    let store = zae_test_support::adaptive::table(NS, 11);
    let (pk, sk) = (
        zae_table::keys::pk_adaptive(NS),
        zae_table::keys::SK_ADAPTIVE_DECLARATION.to_owned(),
    );
    let mut d = Declaration::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
    d.capacity
        .get_mut("r")
        .unwrap()
        .insert("tpm".into(), CAPACITY);
    d.demand = BTreeSet::from(["r".to_owned()]);
    store.insert(d.to_item(NS));
    store
}

fn ra(store: &MemoryStore, entity: &str) -> i64 {
    store
        .item(&format!("{NS}/BUCKET#{entity}#r#0"), "#STATE")
        .unwrap()["b_tpm_ra"]
        .as_int()
        .unwrap()
}

/// What the aggregator writes for a minute: the resource's use, and each
/// listed entity's use and whether its one shard was short.
async fn minute(store: &impl Store, minute: i64, entities: &[(&str, i64, bool)], unlisted: i64) {
    let total: i64 = entities.iter().map(|e| e.1).sum::<i64>() + unlisted;
    let used = BTreeMap::from([("tpm".to_owned(), total * 1000)]);
    store
        .update(&usage::add(NS, "r", minute, &used), Returns::Nothing)
        .await
        .unwrap();
    for (entity, tokens, short) in entities {
        let listing = Listing {
            namespace: NS,
            resource: "r",
            minute_ms: minute,
            entity,
        };
        let seen = Seen {
            used: BTreeMap::from([("tpm".to_owned(), tokens * 1000)]),
            short: match short {
                true => BTreeMap::from([("tpm".to_owned(), BTreeSet::from([0]))]),
                false => BTreeMap::new(),
            },
            shards: 1,
        };
        store.transact(&listing.admit(&seen)).await.unwrap();
    }
}

async fn tick(store: &impl Store, now: i64, blind: bool) -> NamespaceTick {
    if !blind {
        let indices: Vec<u32> = (0..4).collect();
        store
            .update(&canary::sense(now, &indices), Returns::Nothing)
            .await
            .unwrap();
    }
    let controller = Controller {
        store,
        shards: &Fixed(1),
        stop_at: None,
        wait: None,
    };
    let tick = controller.tick_all(now).await.unwrap();
    assert!(tick.failed.is_empty(), "{tick:?}");
    tick.namespaces.into_iter().next().unwrap()
}

/// Ticks 5 s into minutes `0..3` with nothing sensed, so that the target's
/// minutes have begun: tick `m` then evaluates minute `m - 1`.
async fn started(store: &impl Store) {
    for m in 0..3 {
        tick(store, T0 + m * MINUTE_MS + 5_000, false).await;
    }
}

/// Started, then minute 3 with `e0` saturated at its base and the light
/// ones at half theirs: tick 4 raises `e0` to what is left, 7x.
async fn heavy_raised(store: &MemoryStore) {
    started(store).await;
    minute(store, at(3), &[("e0", 1_000, true)], 5_000).await;
    tick(store, at(4) + 5_000, false).await;
    assert_eq!(ra(store, "e0"), 7_000_000);
}

fn at(m: i64) -> i64 {
    T0 + m * MINUTE_MS
}

fn light(tokens: i64, short: bool) -> Vec<(&'static str, i64, bool)> {
    LIGHT.iter().map(|e| (*e, tokens, short)).collect()
}

#[tokio::test]
async fn the_heavy_entity_gets_what_the_light_ones_leave_and_falls_back_when_they_surge() {
    let store = Counted::new(table());
    started(&store).await;
    // Minute 3: the light ones use half their base, the heavy one all of its.
    minute(&store, at(3), &[("e0", 1_000, true)], 5_000).await;
    store.reset();
    let t = tick(&store, at(4) + 5_000, false).await;
    let share = t.targets[0].share.clone().expect("a demand share");
    assert_eq!(
        (share.to_share, share.others, share.left),
        (12_000.0, 5_000.0, 7_000.0)
    );
    assert_eq!(ra(store.inner(), "e0"), 7_000_000, "{share:?}");
    assert!(LIGHT.iter().all(|e| ra(store.inner(), e) == 1_000_000));
    // One bucket written: the heavy one's (its allocation, twice, aside).
    assert_eq!(
        store.counts().get("TransactWriteItems"),
        Some(&1),
        "{:?}",
        store.counts()
    );
    assert_eq!(
        t.targets[0].factor, 1.0,
        "the target's own factor stays at one"
    );
    // Minute 4: the heavy one takes its 7,000; the light ones now want all
    // they get too.
    let mut surge = light(1_000, true);
    surge.push(("e0", 7_000, true));
    minute(&store, at(4), &surge, 0).await;
    let t = tick(&store, at(5) + 5_000, false).await;
    let share = t.targets[0].share.clone().unwrap();
    // Everyone saturated: 12,000 over eleven bases of 1,000.
    assert!((share.lambda - 12.0 / 11.0).abs() < 1e-9, "{share:?}");
    assert_eq!(ra(store.inner(), "e0"), 1_090_909, "{share:?}");
    assert!(LIGHT.iter().all(|e| ra(store.inner(), e) == 1_090_909));
}

#[tokio::test]
async fn blindness_and_a_removal_from_the_manifest_send_every_raised_entity_to_base() {
    let store = table();
    heavy_raised(&store).await;
    assert_eq!(
        Allocated::read(&store, NS, "r", "tpm").await.unwrap().len(),
        1
    );
    // Nothing sensed for long enough: blind.
    let mut blind = false;
    for m in 5..9 {
        let t = tick(&store, at(m) + 5_000, true).await;
        blind |= t.targets[0]
            .share
            .as_ref()
            .is_some_and(|s| s.entities.iter().any(|e| e.why == "blind"));
    }
    assert!(blind, "a blind tick");
    assert_eq!(ra(&store, "e0"), 1_000_000);
    assert!(
        Allocated::read(&store, NS, "r", "tpm")
            .await
            .unwrap()
            .is_empty()
    );
    // Raised again, then the manifest drops adaptive limits altogether.
    minute(&store, at(9), &[("e0", 1_000, true)], 5_000).await;
    tick(&store, at(10) + 5_000, false).await;
    assert_eq!(ra(&store, "e0"), 7_000_000);
    let mut d = Declaration::read(&store, NS, true)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    d.levels.clear();
    store.insert(d.to_item(NS));
    let t = tick(&store, at(11) + 5_000, false).await;
    assert!(t.targets[0].retired, "{t:?}");
    assert_eq!(ra(&store, "e0"), 1_000_000);
    assert!(
        Allocated::read(&store, NS, "r", "tpm")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn shadow_reports_the_share_and_stamps_nothing() {
    let store = table();
    let mut d = Declaration::read(&store, NS, true)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    d.levels[0].shadow = true;
    store.insert(d.to_item(NS));
    started(&store).await;
    minute(&store, at(3), &[("e0", 1_000, true)], 5_000).await;
    let t = tick(&store, at(4) + 5_000, false).await;
    assert_eq!(ra(&store, "e0"), 1_000_000, "nothing stamped in shadow");
    let share = t.targets[0].share.clone().unwrap();
    let heavy = &share.entities[0];
    assert_eq!(
        (heavy.allocation, heavy.shadow),
        (7_000.0, true),
        "{share:?}"
    );
    assert_eq!(ra(&store, "e0"), 1_000_000, "nothing stamped in shadow");
}

#[tokio::test]
async fn past_the_cap_an_unlisted_entity_holds_its_allocation() {
    let store = table();
    heavy_raised(&store).await;
    // Minute 4: e0 is not listed and the header says the cap left some out.
    minute(&store, at(4), &[], 12_000).await;
    let header = Listing {
        namespace: NS,
        resource: "r",
        minute_ms: at(4),
        entity: "",
    };
    store
        .update(&header.overflow(), Returns::Nothing)
        .await
        .unwrap();
    tick(&store, at(5) + 5_000, false).await;
    assert_eq!(ra(&store, "e0"), 7_000_000, "held");
    // Minute 5: listed nowhere and no overflow: idle, it eases down.
    minute(&store, at(5), &[], 5_000).await;
    tick(&store, at(6) + 5_000, false).await;
    assert_eq!(ra(&store, "e0"), 4_000_000, "halfway to base");
}
