//! The rejection cache on the in-memory twin, its requests counted at the
//! store seam (`Counted`): a repeated rejection within its window costs no
//! request, the cache never admits, and each rule that makes it distrust
//! an image (its age, a credit this process wrote, an operator's clear, an
//! off switch). On tokio's paused clock, so the 1 s window passes without
//! waiting for it.

use crate::memory::{NS, T0, bucket, limit, n, options, set, table};
use std::sync::Arc;
use std::time::Duration;
use zae_client::{Error, ManualClock, RateLimitExceeded, RateLimiter};
use zae_table::level::Level;
use zae_table::store::{Counted, Store};
use zae_test_support::memory::MemoryStore;

type Store_ = Arc<Counted<MemoryStore>>;

async fn open(store: &Store_, clock: &ManualClock, ttl: Duration) -> RateLimiter<Store_> {
    let options = zae_client::Options {
        rejection_cache_ttl: ttl,
        ..options(clock)
    };
    RateLimiter::on_store(Arc::clone(store), NS, options)
        .await
        .expect("open")
}

/// `rpm` 2 on `gpt`, spent by `u1`.
async fn spent(clock: &ManualClock, ttl: Duration) -> (Store_, RateLimiter<Store_>) {
    let store = Arc::new(Counted::new(table(vec![limit("rpm", 2, false)])));
    let limiter = open(&store, clock, ttl).await;
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 2)]).await;
    lease.expect("admitted").commit().await.expect("commit");
    (store, limiter)
}

async fn rejected<S: Store + 'static>(limiter: &RateLimiter<S>, entity: &str) -> RateLimitExceeded {
    match limiter.acquire(entity, "gpt", &[("rpm", 1)]).await {
        Err(Error::RateLimitExceeded(e)) => e,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

fn requests(store: &Store_) -> u64 {
    store.counts().values().sum()
}

#[tokio::test(start_paused = true)]
async fn a_repeated_rejection_within_its_window_costs_no_request() {
    let clock = ManualClock::new(T0);
    let (store, limiter) = spent(&clock, Duration::from_secs(1)).await;
    store.reset();
    let first = rejected(&limiter, "u1").await;
    assert_eq!(
        requests(&store),
        1,
        "one failed write: {:?}",
        store.counts()
    );
    store.reset();
    clock.set(T0 + 100);
    let repeat = rejected(&limiter, "u1").await;
    assert_eq!(
        requests(&store),
        0,
        "answered from memory: {:?}",
        store.counts()
    );
    assert_eq!(repeat.statuses.len(), first.statuses.len());
    assert_eq!(repeat.statuses[0].available, 0);
    assert!(
        repeat.retry_after_ms() < first.retry_after_ms(),
        "judged at now"
    );
    // Past the window the table is asked again.
    tokio::time::advance(Duration::from_secs(1)).await;
    rejected(&limiter, "u1").await;
    assert_eq!(requests(&store), 1, "{:?}", store.counts());
}

#[tokio::test(start_paused = true)]
async fn the_cache_never_admits_and_misses_another_writers_refund_for_its_window() {
    let clock = ManualClock::new(T0);
    let (store, limiter) = spent(&clock, Duration::from_secs(1)).await;
    rejected(&limiter, "u1").await;
    // Another process gives the tokens back: unseen until the window ends.
    let mut item = bucket(store.inner(), "u1");
    item.insert("b_rpm_tk".into(), zae_table::Attr::n(2000));
    store.inner().insert(item);
    rejected(&limiter, "u1").await;
    tokio::time::advance(Duration::from_secs(1)).await;
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 1)]).await;
    lease
        .expect("admitted once the window passed")
        .commit()
        .await
        .expect("commit");
    // An image showing room admits nothing by itself: the write decides.
    let mut item = bucket(store.inner(), "u1");
    item.insert("b_rpm_tk".into(), zae_table::Attr::n(0));
    store.inner().insert(item);
    store.reset();
    rejected(&limiter, "u1").await;
    assert_eq!(store.counts().get("UpdateItem"), Some(&1));
}

#[tokio::test(start_paused = true)]
async fn a_credit_this_process_writes_makes_the_cache_forget_the_shard() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Counted::new(table(vec![limit("rpm", 2, false)])));
    let limiter = open(&store, &clock, Duration::from_secs(1)).await;
    let mut held = limiter
        .acquire("u1", "gpt", &[("rpm", 2)])
        .await
        .expect("admitted");
    rejected(&limiter, "u1").await;
    held.release(&[("rpm", 2)]);
    held.commit().await.expect("the credit");
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 1)]).await;
    lease
        .expect("the credit is seen at once")
        .commit()
        .await
        .expect("commit");
    // A rollback is a credit too.
    let held = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    rejected(&limiter, "u1").await;
    held.rollback().await;
    limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("rolled back");
}

#[tokio::test(start_paused = true)]
async fn an_operators_change_is_seen_after_the_cache_is_cleared() {
    let clock = ManualClock::new(T0);
    let (store, limiter) = spent(&clock, Duration::from_secs(1)).await;
    rejected(&limiter, "u1").await;
    // Raised on the table (the slow path seeds nothing new: the item keeps
    // its stored limits), and a refill makes room: the cache still refuses.
    set(
        store.inner(),
        &Level::Resource("gpt".into()),
        vec![limit("rpm", 2, false)],
    );
    let mut item = bucket(store.inner(), "u1");
    item.insert("b_rpm_tk".into(), zae_table::Attr::n(2000));
    store.inner().insert(item);
    rejected(&limiter, "u1").await;
    limiter.clear_rejection_cache();
    limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("asked the table");
}

#[tokio::test(start_paused = true)]
async fn a_zero_ttl_turns_the_cache_off() {
    let clock = ManualClock::new(T0);
    let (store, limiter) = spent(&clock, Duration::ZERO).await;
    rejected(&limiter, "u1").await;
    store.reset();
    rejected(&limiter, "u1").await;
    assert_eq!(
        store.counts().get("UpdateItem"),
        Some(&1),
        "each rejection writes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_spent_cascade_parent_is_refused_from_memory_with_the_childs_statuses_first() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Counted::new(table(vec![limit("rpm", 100, false)])));
    store.inner().insert(crate::others::meta("org", None));
    store
        .inner()
        .insert(crate::others::meta("kid", Some("org")));
    let org = Level::Entity {
        entity: "org".into(),
        resource: "gpt".into(),
    };
    set(store.inner(), &org, vec![limit("rpm", 2, false)]);
    let limiter = open(&store, &clock, Duration::from_secs(1)).await;
    // Created on the slow path, then both fast writes land: their images
    // (the child's naming its parent) are the cache's.
    for _ in 0..2 {
        let lease = limiter.acquire("kid", "gpt", &[("rpm", 1)]).await;
        lease.expect("both buckets").commit().await.expect("commit");
    }
    store.reset();
    let e = rejected(&limiter, "kid").await;
    assert_eq!(requests(&store), 0, "{:?}", store.counts());
    let who: Vec<&str> = e.statuses.iter().map(|s| s.entity.as_str()).collect();
    assert_eq!(who, ["kid", "org"]);
    assert!(e.violations().all(|s| s.entity == "org"));
    assert_eq!(n(&bucket(store.inner(), "kid"), "b_rpm_tc"), 2000);
}
