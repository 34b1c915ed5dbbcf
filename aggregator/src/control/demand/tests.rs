//! The demand share on the in-memory twin: the sensor's demand items written
//! as the aggregator writes them, the controller's clock injected.

use super::super::stream_shards::Fixed;
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
    sized(11, CAPACITY)
}

/// `e0` .. `e{n-1}` at base, `r` sized for `capacity` tokens a minute and
/// shared by demand.
fn sized(n: usize, capacity: i64) -> MemoryStore {
    let store = zae_test_support::adaptive::table(NS, n);
    let (pk, sk) = (
        zae_table::keys::pk_adaptive(NS),
        zae_table::keys::SK_ADAPTIVE_DECLARATION.to_owned(),
    );
    let mut d = Declaration::from_item(&store.item(&pk, &sk).unwrap()).unwrap();
    d.capacity
        .get_mut("r")
        .unwrap()
        .insert("tpm".into(), capacity);
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
    tick_of(store, now, blind).await.unwrap()
}

/// A tick at `now` (its canaries sensed unless blind): the namespace's
/// report, `None` when nothing in it is adaptive any more.
async fn tick_of(store: &impl Store, now: i64, blind: bool) -> Option<NamespaceTick> {
    if !blind {
        sensed(store, now).await;
    }
    let tick = stopping(store, None).tick_all(now).await.unwrap();
    assert!(tick.failed.is_empty(), "{tick:?}");
    tick.namespaces.into_iter().next()
}

/// What the aggregator does on reading every canary of the tick at `now`.
async fn sensed(store: &impl Store, now: i64) {
    let indices: Vec<u32> = (0..4).collect();
    store
        .update(&canary::sense(now, &indices), Returns::Nothing)
        .await
        .unwrap();
}

/// A controller on a one-shard stream that starts nothing past `stop_at`.
fn stopping<S: Store>(
    store: &S,
    stop_at: Option<tokio::time::Instant>,
) -> Controller<'_, S, Fixed> {
    Controller {
        store,
        shards: &Fixed(1),
        stop_at,
        wait: None,
    }
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

/// Past the cap, the header says some entities were left out; a raised one
/// is never among them (it is listed outside the cap whenever it is used),
/// so one not listed is idle and eases down. An earlier version held every
/// unlisted raise while the resource overflowed: an idle or deleted entity
/// kept its allocation for good.
#[tokio::test]
async fn past_the_cap_an_unlisted_raised_entity_is_idle_and_eases_down() {
    let store = table();
    heavy_raised(&store).await;
    // Minute 4: e0 is not listed and the header says the cap left some out.
    minute(&store, at(4), &[], 5_000).await;
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
    assert_eq!(ra(&store, "e0"), 4_000_000, "halfway to base");
    minute(&store, at(5), &[], 5_000).await;
    tick(&store, at(6) + 5_000, false).await;
    assert_eq!(ra(&store, "e0"), 2_500_000, "halfway again");
}

/// `system` of the table's levels, `r` sized as in `table`, as a manifest
/// (`adaptive` and `share` added by the caller).
fn manifest(system: &str, resource: &str) -> zae_provisioner::manifest::Manifest {
    let yaml = format!(
        "namespace: default
system:
  limits:
    tpm: {{capacity: 10000, refill_amount: 1000, refill_period: 60{system}}}
resources:
  r:
{resource}"
    );
    zae_provisioner::manifest::Manifest::from_yaml(&yaml).unwrap()
}

async fn apply(store: &MemoryStore, manifest: &zae_provisioner::manifest::Manifest) {
    use zae_provisioner::apply::{Caller, Provisioner};
    let provisioner = Provisioner {
        store,
        namespace: NS,
    };
    let report = provisioner
        .apply(manifest, false, &Caller::local("test"))
        .await
        .unwrap();
    assert_eq!(report.errors, Some(vec![]), "{report:?}");
}

async fn allocations(store: &MemoryStore) -> Vec<Allocated> {
    Allocated::read(store, NS, "r", "tpm").await.unwrap()
}

/// The apply that drops `adaptive` and `estimated_capacity` returns an
/// entity the share raised to base in the apply itself, and forgets its
/// allocation and the target, with no tick after. An earlier apply skipped
/// its stamp as a newer generation's, deleted the target, and nothing
/// reached the bucket again: it stayed raised for good.
#[tokio::test]
async fn an_apply_that_drops_adaptive_returns_the_raised_entities_to_base() {
    let store = table();
    heavy_raised(&store).await;
    apply(&store, &manifest("", "    limits: {}\n")).await;
    assert_eq!(ra(&store, "e0"), 1_000_000);
    assert!(allocations(&store).await.is_empty());
    let targets = zae_table::adaptive::target::Target::read_all(&store, NS).await;
    assert!(targets.unwrap().is_empty());
}

/// A switch from `share: demand` to `share: base` while no controller
/// ticks (the stack's schedule disabled): the apply's own lap takes the
/// raised entity to the target's factor, and forgets its allocation, so
/// that neither the repair nor a later lap stamps it again.
#[tokio::test]
async fn a_switch_to_share_base_reaches_the_raised_entities_without_a_tick() {
    let store = table();
    heavy_raised(&store).await;
    let sized = "    estimated_capacity: {tpm: 12000}\n";
    apply(&store, &manifest(", adaptive: utilization", sized)).await;
    assert_eq!(ra(&store, "e0"), 1_000_000, "the target's factor: one");
    assert!(allocations(&store).await.is_empty());
}

/// `zae-limits adaptive reset` from an operator whose clock is a day behind
/// the controller that raised an entity: the reset's generation is above
/// the raise's all the same, and its lap returns the bucket to base. An
/// earlier reset took its generation from the operator's clock and skipped
/// the bucket as a newer stamp's.
#[tokio::test]
async fn a_reset_from_a_clock_behind_the_controllers_returns_the_raised_entities_to_base() {
    use zae_table::adaptive::stamp::generation_attr;
    let store = table();
    heavy_raised(&store).await;
    // What a controller a day ahead of this machine's clock leaves.
    let ahead = chrono::Utc::now().timestamp_millis() + 24 * 60 * MINUTE_MS;
    let mut raised = allocations(&store).await.remove(0);
    raised.generation = ahead;
    store
        .update(&raised.write(NS), Returns::Nothing)
        .await
        .unwrap();
    let pk = format!("{NS}/BUCKET#e0#r#0");
    let mut bucket = store.item(&pk, "#STATE").unwrap();
    bucket.insert(generation_attr("tpm"), zae_table::value::Attr::n(ahead));
    store.insert(bucket);
    let reset = zae_adaptive::reset::reset(&store, NS).await.unwrap();
    assert_eq!(reset[0].stamps_lost, 0, "{reset:?}");
    assert_eq!(ra(&store, "e0"), 1_000_000, "{reset:?}");
    assert!(allocations(&store).await.is_empty());
}

/// Four thousand entities raised over four minutes of a thousand listed
/// each (the listing's cap), the earlier ones easing down at every tick: the
/// fourth tick decides all four thousand. The share on record keeps the
/// largest `KEPT_ON_RECORD`, so the target item stays far below DynamoDB's
/// 400 KB (which the in-memory table enforces), every entity is stamped,
/// and the record says which were. An earlier tick wrote every decided
/// entity into the target before stamping any: past about 2,300 the write
/// was refused, and every tick of the namespace failed from then on.
#[tokio::test]
async fn a_share_of_thousands_of_entities_keeps_the_target_under_the_item_limit() {
    use zae_adaptive::share::{KEPT_ON_RECORD, ShareTick};
    use zae_table::adaptive::target::Target;
    use zae_table::value::{MAX_ITEM_BYTES, item_size};
    const N: usize = 4_000;
    // Room for every one at its ceiling: nobody's raise waits on another's.
    let store = sized(N, 20 * N as i64 * 1_000);
    started(&store).await;
    let names: Vec<String> = (0..N).map(|i| format!("e{i}")).collect();
    let mut last = None;
    for (m, batch) in names.chunks(1_000).enumerate() {
        let m = m as i64 + 3;
        let listed: Vec<(&str, i64, bool)> =
            batch.iter().map(|e| (e.as_str(), 1_000, true)).collect();
        minute(&store, at(m), &listed, 0).await;
        last = Some(tick(&store, at(m + 1) + 5_000, false).await);
    }
    let share = last.unwrap().targets[0].share.clone().unwrap();
    assert_eq!(
        share.entities.len(),
        N,
        "every entity decided at the last tick"
    );
    assert!(
        share.entities.iter().all(|e| e.stamped),
        "every one stamped"
    );
    assert_eq!(
        ra(&store, &names[N - 1]),
        10_000_000,
        "the newest at its ceiling"
    );
    let (tpk, tsk) = Target::key(NS, "r", "tpm");
    let item = store.item(&tpk, &tsk).unwrap();
    assert!(
        item_size(&item) < MAX_ITEM_BYTES / 4,
        "{} bytes",
        item_size(&item)
    );
    let target = Target::from_item(&item).unwrap();
    let recorded: ShareTick = serde_json::from_str(target.shared.as_deref().unwrap()).unwrap();
    assert_eq!(recorded.entities.len(), KEPT_ON_RECORD);
    assert_eq!(recorded.omitted, N - KEPT_ON_RECORD);
    assert!(
        recorded.entities.iter().all(|e| e.stamped),
        "recorded as stamped"
    );
}

/// One step of a generated history of a `share: demand` namespace.
#[derive(Debug, Clone)]
enum Step {
    /// A minute of use (`e0`..`e3` saturated at what they hold when set,
    /// `light` thousand tokens of unlisted use) and the tick after it, on a
    /// controller clock off by `skew_ms`.
    Tick {
        saturated: [bool; 4],
        light: i64,
        skew_ms: i64,
    },
    /// The manifest without `adaptive` or `estimated_capacity`.
    Drop,
    /// The manifest with `adaptive` and `share: demand`, or `share: base`.
    Apply { demand: bool },
    /// `zae-limits adaptive reset`, from this machine's clock (days ahead of
    /// the controller's or behind it, as the steps' skew puts it).
    Reset,
    /// The client's admin sync of one entity: its level's amount written
    /// over whatever stamp it carries.
    Sync(usize),
    /// One entity's bucket doubled to two shards, shard 1 cloned from shard
    /// 0's whole item, stamp included (as the aggregator's propagation
    /// clones it).
    Clone(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (any::<[bool; 4]>(), 0..=10i64, -20_000..=20_000i64)
            .prop_map(|(saturated, light, skew_ms)| Step::Tick { saturated, light, skew_ms }),
        1 => Just(Step::Drop),
        2 => any::<bool>().prop_map(|demand| Step::Apply { demand }),
        1 => Just(Step::Reset),
        1 => (0..4usize).prop_map(Step::Sync),
        1 => (0..4usize).prop_map(Step::Clone),
    ]
}

/// Every shard's `ra` of `r`'s `tpm`.
fn every_ra(store: &MemoryStore) -> Vec<i64> {
    store
        .items()
        .iter()
        .filter(|i| i["PK"].as_s().is_some_and(|pk| pk.contains("/BUCKET#")))
        .filter_map(|i| i.get("b_tpm_ra").and_then(zae_table::value::Attr::as_int))
        .collect()
}

/// Doubles `e{i}`'s bucket: the count on shard 0, then shard 1 cloned
/// from it.
fn clone_shard(store: &MemoryStore, i: usize) {
    use zae_table::value::Attr;
    let pk = format!("{NS}/BUCKET#e{i}#r#0");
    let mut first = store.item(&pk, "#STATE").unwrap();
    if first.contains_key(zae_table::bucket::SHARD_COUNT) {
        return;
    }
    first.insert(zae_table::bucket::SHARD_COUNT.into(), Attr::n(2));
    store.insert(first.clone());
    let mut clone = first;
    clone.insert("PK".into(), Attr::s(format!("{NS}/BUCKET#e{i}#r#1")));
    clone.insert("GSI2SK".into(), Attr::s(format!("BUCKET#e{i}#1")));
    store.insert(clone);
}

/// Runs one step; what it leaves to check.
async fn run_step(
    store: &MemoryStore,
    step: &Step,
    m: &mut i64,
    shared: &mut bool,
) -> Option<NamespaceTick> {
    let sized = "    estimated_capacity: {tpm: 12000}\n";
    match step {
        Step::Tick {
            saturated,
            light,
            skew_ms,
        } => {
            let held: Vec<(String, i64)> = (0..4)
                .filter(|i| saturated[*i])
                .map(|i| (format!("e{i}"), ra(store, &format!("e{i}")) / 1000))
                .collect();
            let listed: Vec<(&str, i64, bool)> =
                held.iter().map(|(e, t)| (e.as_str(), *t, true)).collect();
            minute(store, at(*m), &listed, light * 1000).await;
            *m += 1;
            return tick_of(store, at(*m) + 5_000 + skew_ms, false).await;
        }
        Step::Drop => {
            apply(store, &manifest("", "    limits: {}\n")).await;
            *shared = false;
        }
        Step::Apply { demand } => {
            let share = if *demand { "    share: demand\n" } else { "" };
            apply(
                store,
                &manifest(", adaptive: utilization", &format!("{sized}{share}")),
            )
            .await;
            *shared = *demand;
        }
        Step::Reset => {
            let done = zae_adaptive::reset::reset(store, NS).await.unwrap();
            assert!(
                done.iter().all(|r| r.stamps_lost == 0 && !r.superseded),
                "{done:?}"
            );
        }
        Step::Clone(i) => clone_shard(store, *i),
        Step::Sync(i) => {
            let pk = format!("{NS}/BUCKET#e{i}#r#0");
            let mut bucket = store.item(&pk, "#STATE").unwrap();
            bucket.insert("b_tpm_ra".into(), zae_table::value::Attr::n(1_000_000));
            store.insert(bucket);
        }
    }
    None
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
        std::env::var("ZAE_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(24)
    ))]

    /// Generated histories of ticks, applies (dropping adaptive, switching
    /// the share), resets, client syncs and shard clones (every shard
    /// checked), on controller clocks skewed by
    /// up to 20 s and an operator's clock days ahead: every bucket stays
    /// within [base, burst] at every step; the apply that drops adaptive and
    /// a reset leave every bucket at base and no allocation behind (at
    /// once: no tick needed), a switch from `share: demand` to `share:
    /// base` leaves one factor on every bucket and no allocation; while adaptive is dropped no tick
    /// raises anyone; and every demand tick's allocations of the entities
    /// raised or asking, with the others' use, are within the capacity
    /// unless the bases are.
    #[test]
    fn no_history_mints_leaks_or_freezes_a_raise(steps in proptest::collection::vec(step(), 1..10)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let store = table();
            started(&store).await;
            let (mut m, mut shared, mut dropped) = (3, true, false);
            for (i, step) in steps.iter().enumerate() {
                let switched = shared && matches!(step, Step::Apply { demand: false });
                let tick = run_step(&store, step, &mut m, &mut shared).await;
                let all = every_ra(&store);
                let at = format!("step {i} {step:?}: {all:?}");
                assert!(all.iter().all(|ra| (1_000_000..=10_000_000).contains(ra)), "{at}");
                match step {
                    Step::Drop => dropped = true,
                    Step::Apply { .. } => dropped = false,
                    _ => {}
                }
                let at_base = all.iter().all(|ra| *ra == 1_000_000);
                let client_side = matches!(step, Step::Sync(_) | Step::Clone(_));
                if matches!(step, Step::Drop | Step::Reset) || (dropped && !client_side) {
                    assert!(at_base, "{at}");
                    assert!(allocations(&store).await.is_empty(), "{at}");
                }
                // An apply that changes nothing restamps nothing: a synced
                // bucket waits for the repair, as it would anyway.
                if switched {
                    assert!(all.iter().all(|ra| *ra == all[0]), "one factor: {at}");
                    assert!(allocations(&store).await.is_empty(), "{at}");
                }
                let share = tick.and_then(|t| t.targets.into_iter().find_map(|t| t.share));
                if let Some(share) = share.filter(|s| s.lambda > 1.0) {
                    let given: f64 = share.entities.iter()
                        .filter(|e| e.allocation > e.base)
                        .map(|e| e.allocation)
                        .sum();
                    assert!(given <= share.left * (1.0 + 1e-9) + 1e-6, "{given} > {}: {at}", share.left);
                }
            }
        });
    }
}

/// Forty entities raised in one tick on a table that takes a second per
/// transaction (a paused clock): the tick starts no stamp past its stop
/// instant, so it ends within one transaction of it, and the entities left
/// keep what they have until the next minute's tick stamps them. An earlier
/// share stamped every decided entity whatever the deadline.
#[tokio::test(start_paused = true)]
async fn a_share_past_the_stop_instant_starts_no_stamp_and_the_next_minute_goes_on() {
    use zae_test_support::faults::{Call, Faults, Injected};
    struct Slow;
    impl Faults for Slow {
        fn delay(&self, call: &Call<'_>) -> Option<std::time::Duration> {
            matches!(call, Call::Transact(_)).then(|| std::time::Duration::from_secs(1))
        }
    }
    const N: usize = 40;
    let store = Injected {
        inner: sized(N, 20 * N as i64 * 1_000),
        faults: Slow,
    };
    started(&store).await;
    let names: Vec<String> = (0..N).map(|i| format!("e{i}")).collect();
    let all: Vec<(&str, i64, bool)> = names.iter().map(|e| (e.as_str(), 1_000, true)).collect();
    minute(&store, at(3), &all, 0).await;
    let now = at(4) + 5_000;
    sensed(&store, now).await;
    let stop = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let first_tick = stopping(&store, Some(stop)).tick_all(now).await.unwrap();
    assert!(first_tick.failed.is_empty(), "{first_tick:?}");
    assert!(tokio::time::Instant::now() <= stop + std::time::Duration::from_secs(1));
    let raised = |store: &MemoryStore| names.iter().filter(|e| ra(store, e) > 1_000_000).count();
    let first = raised(&store.inner);
    assert!(
        first > 0 && first < N,
        "{first} of {N} stamped before the stop"
    );
    minute(&store, at(4), &all, 0).await;
    tick(&store, at(5) + 5_000, false).await;
    assert_eq!(raised(&store.inner), N, "the rest at the next minute");
}

/// A tick whose share cannot read every entity's level before its stop
/// instant moves nobody and leaves the target unmarked: a namespace whose
/// share never has the time stops being ticked for the repair, which takes
/// its buckets back to base, instead of holding its raises for ever while
/// looking ticked. The next tick with the time decides as usual.
#[tokio::test]
async fn a_share_out_of_time_moves_nobody_and_leaves_the_target_unticked() {
    let store = table();
    heavy_raised(&store).await;
    let target = |store: &MemoryStore| {
        let (pk, sk) = zae_table::adaptive::target::Target::key(NS, "r", "tpm");
        zae_table::adaptive::target::Target::from_item(&store.item(&pk, &sk).unwrap()).unwrap()
    };
    let ticked = target(&store).ticked_at_ms;
    assert_eq!(ticked, Some(at(4) + 5_000));
    // Everyone saturated: the raise is withdrawn when there is time.
    let mut all = light(1_000, true);
    all.push(("e0", 7_000, true));
    minute(&store, at(4), &all, 0).await;
    let now = at(5) + 5_000;
    sensed(&store, now).await;
    let late = stopping(&store, Some(tokio::time::Instant::now()));
    late.tick_all(now).await.unwrap();
    assert_eq!(target(&store).ticked_at_ms, ticked, "not marked ticked");
    assert_eq!(ra(&store, "e0"), 7_000_000, "nobody moved");
    minute(&store, at(5), &all, 0).await;
    tick(&store, at(6) + 5_000, false).await;
    assert_eq!(target(&store).ticked_at_ms, Some(at(6) + 5_000));
    assert!(ra(&store, "e0") < 7_000_000, "withdrawn with the time to");
}
