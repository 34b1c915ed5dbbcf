//! Config bypass (`disabled: "bypass"`) on the in-memory twin: what the
//! differential (`client_diff/bypass.json`) cannot show: the requests a
//! known-bypassed pair costs (counted at the store seam), a stamp and a
//! config that disagree (an operator's fan-out that missed a bucket, or a
//! stamp left behind), and a bypass lifted between a pass's config read and
//! its write (injected at the store seam).

use crate::memory::{NS, T0, bucket, limit, n, options, table};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zae_client::{Error, ManualClock, RateLimiter};
use zae_table::Attr;
use zae_table::config::{Disabled, LevelConfig, build_item};
use zae_table::level::Level;
use zae_table::store::{Counted, StoreError};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// Resource `gpt` with `rpm` (capacity 100), bypassed when `bypassed`.
fn bypass_table(bypassed: bool) -> MemoryStore {
    let store = table(vec![limit("rpm", 100, false)]);
    set_bypass(&store, bypassed);
    store
}

fn set_bypass(store: &MemoryStore, bypassed: bool) {
    let config = LevelConfig {
        limits: vec![limit("rpm", 100, false)],
        disabled: bypassed.then_some(Disabled::Bypass),
        ..LevelConfig::default()
    };
    store.insert(build_item(NS, &Level::Resource("gpt".into()), &config));
}

/// A limiter whose stamps' deadlines are drawn at 0.9 of the TTL.
async fn open<S: zae_table::store::Store + 'static>(
    store: S,
    clock: &ManualClock,
    speculative_writes: bool,
) -> RateLimiter<S> {
    let options = zae_client::Options {
        speculative_writes,
        stamp_draw: Some(0.9),
        ..options(clock)
    };
    RateLimiter::on_store(store, NS, options)
        .await
        .expect("open")
}

async fn slow_only(store: Arc<MemoryStore>, clock: &ManualClock) -> RateLimiter<Arc<MemoryStore>> {
    open(store, clock, false).await
}

#[tokio::test]
async fn a_bypassed_pair_once_learnt_costs_one_counting_write_and_no_refund() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Counted::new(bypass_table(true)));
    let limiter = open(Arc::clone(&store), &clock, true).await;
    // Created under bypass: stamped, funded, counted, nothing debited.
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 500)]).await;
    let lease = lease.expect("config bypass admits");
    assert!(lease.is_bypassed());
    lease.commit().await.expect("commit");
    let item = bucket(store.inner(), "u1");
    assert_eq!(
        (n(&item, "b_rpm_tk"), n(&item, "b_rpm_tc")),
        (100_000, 500_000)
    );
    assert_eq!(n(&item, "bypass"), T0 + 54_000, "stamped at 0.9 of the TTL");
    // The first fast write is the ordinary one: admitted on the stamp and
    // refunded; the pair is learnt.
    store.reset();
    limiter
        .acquire("u1", "gpt", &[("rpm", 500)])
        .await
        .expect("bypassed");
    assert_eq!(
        store.counts().get("UpdateItem"),
        Some(&2),
        "debit and refund"
    );
    // Learnt: one bypass-shaped write, no refund, no read.
    store.reset();
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 500)]).await;
    assert!(lease.expect("bypassed").is_bypassed());
    let counts = store.counts();
    assert_eq!(counts.get("UpdateItem"), Some(&1), "{counts:?}");
    assert_eq!(counts.len(), 1, "{counts:?}");
    let item = bucket(store.inner(), "u1");
    assert_eq!(
        (n(&item, "b_rpm_tk"), n(&item, "b_rpm_tc")),
        (100_000, 1_500_000)
    );
    assert_eq!(n(&item, "b_wcu_tc"), 2_000, "each fast write spent a unit");
}

#[tokio::test]
async fn a_stamp_config_no_longer_backs_is_removed_and_the_acquire_enforced() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(bypass_table(false));
    let limiter = slow_only(Arc::clone(&store), &clock).await;
    limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("created");
    let mut item = bucket(&store, "u1");
    item.insert("bypass".into(), Attr::n(T0 + 30_000));
    store.insert(item);
    let Err(Error::RateLimitExceeded(e)) = limiter.acquire("u1", "gpt", &[("rpm", 200)]).await
    else {
        panic!("a live stamp without config behind it admits nothing beyond the limit");
    };
    assert!(e.statuses.iter().any(|s| s.exceeded), "{e:?}");
    assert!(
        !bucket(&store, "u1").contains_key("bypass"),
        "the stamp went"
    );
}

#[tokio::test]
async fn config_bypass_on_an_unstamped_bucket_is_enforced_once_and_stamps_it() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(bypass_table(false));
    let limiter = slow_only(Arc::clone(&store), &clock).await;
    limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("created");
    // Bypassed in config, and the fan-out missed the bucket.
    set_bypass(&store, true);
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 2)]).await;
    assert!(
        !lease.expect("enforced").is_bypassed(),
        "no stamp: enforced"
    );
    let item = bucket(&store, "u1");
    assert_eq!(n(&item, "b_rpm_tk"), 97_000, "debited");
    assert_eq!(n(&item, "bypass"), T0 + 54_000, "and stamped");
    // Config and stamp agree now: counted only.
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 500)]).await;
    assert!(lease.expect("bypassed").is_bypassed());
    let item = bucket(&store, "u1");
    assert_eq!(
        (n(&item, "b_rpm_tk"), n(&item, "b_rpm_tc")),
        (97_000, 503_000)
    );
}

/// Lifts the bypass (config and stamp) just before the first counted
/// write of a bypassed bucket: an operator's clear landing between a slow
/// pass's config read and its write.
struct LiftedMidPass {
    store: Arc<MemoryStore>,
    done: AtomicBool,
}

impl Faults for LiftedMidPass {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Update(u) = call else { return None };
        let counted = u
            .condition
            .as_deref()
            .unwrap_or_default()
            .contains("attribute_exists(#");
        if counted && u.assigned("bypass").is_some() && !self.done.swap(true, Ordering::SeqCst) {
            set_bypass(&self.store, false);
            let mut item = bucket(&self.store, "u1");
            item.remove("bypass");
            self.store.insert(item);
        }
        None
    }
}

#[tokio::test]
async fn a_bypass_lifted_between_the_config_read_and_the_write_is_planned_again_enforced() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(bypass_table(true));
    let faults = LiftedMidPass {
        store: Arc::clone(&store),
        done: AtomicBool::new(false),
    };
    let injected = Injected {
        inner: Arc::clone(&store),
        faults,
    };
    let limiter = slow_only(Arc::clone(&store), &clock).await;
    limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("created bypassed");
    let limiter2 = open(injected, &clock, false).await;
    let Err(Error::RateLimitExceeded(_)) = limiter2.acquire("u1", "gpt", &[("rpm", 200)]).await
    else {
        panic!("the second pass reads the bypass gone and enforces");
    };
    let lease = limiter2.acquire("u1", "gpt", &[("rpm", 5)]).await;
    assert!(!lease.expect("enforced").is_bypassed());
    let item = bucket(&store, "u1");
    assert_eq!(n(&item, "b_rpm_tk"), 95_000, "debited once, enforced");
    assert_eq!(
        n(&item, "b_rpm_tc"),
        6_000,
        "the lost counted write added nothing"
    );
    drop(limiter);
}
