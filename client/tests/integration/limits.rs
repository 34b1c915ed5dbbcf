//! `acquire_with_limits` (the Python client's `limits=`) on the in-memory
//! twin, requests counted at the store seam: what the differential
//! (`client_diff/limits.json`) does not count, and the caller's errors.

use crate::memory::{NS, T0, bucket, limit, n, options, table};
use std::sync::Arc;
use std::time::Duration;
use zae_client::{Error, LimitConfig, ManualClock, RateLimiter};
use zae_table::store::Counted;
use zae_test_support::memory::MemoryStore;

type Store_ = Arc<Counted<MemoryStore>>;

async fn open(clock: &ManualClock) -> (Store_, RateLimiter<Store_>) {
    let store = Arc::new(Counted::new(table(vec![limit("rpm", 2, false)])));
    let options = zae_client::Options {
        rejection_cache_ttl: Duration::from_secs(60),
        ..options(clock)
    };
    let limiter = RateLimiter::on_store(Arc::clone(&store), NS, options)
        .await
        .expect("open");
    (store, limiter)
}

fn soft(name: &str, capacity: i64) -> LimitConfig {
    LimitConfig {
        soft: true,
        ..LimitConfig::drip(name, capacity, capacity, 60)
    }
}

#[tokio::test]
async fn an_override_is_not_refused_from_the_rejection_cache() {
    let clock = ManualClock::new(T0);
    let (store, limiter) = open(&clock).await;
    let lease = limiter.acquire("u1", "gpt", &[("rpm", 2)]).await;
    lease.expect("admitted").commit().await.expect("commit");
    assert!(limiter.acquire("u1", "gpt", &[("rpm", 1)]).await.is_err());
    store.reset();
    // The cache holds the stored limits' image; the override asks the table
    // (and its soft rpm admits into debt, on the slow path: no fast write).
    let over = [soft("rpm", 1)];
    let lease = limiter
        .acquire_with_limits("u1", "gpt", &[("rpm", 1)], &over)
        .await;
    assert_eq!(lease.expect("soft").overdrawn(), ["rpm"]);
    let counts = store.counts();
    assert_eq!(counts.get("BatchGetItem"), Some(&2), "{counts:?}");
    assert_eq!(
        counts.get("UpdateItem"),
        Some(&1),
        "the slow write only: {counts:?}"
    );
    let item = bucket(store.inner(), "u1");
    assert_eq!(n(&item, "b_rpm_tk"), -1000, "stored parameters, into debt");
    assert!(!item.contains_key("b_rpm_soft"), "stamped on nothing");
}

#[tokio::test]
async fn bad_override_limits_are_refused_before_any_request() {
    let clock = ManualClock::new(T0);
    let (store, limiter) = open(&clock).await;
    store.reset();
    let cases: [(&[LimitConfig], &str); 4] = [
        (&[], "at least one"),
        (&[LimitConfig::drip("wcu", 1, 1, 60)], "'wcu'"),
        (&[limit("rpm", 1, false), limit("rpm", 2, false)], "twice"),
        (&[LimitConfig::drip("rpm", 1, 1, 0)], "period"),
    ];
    for (limits, says) in cases {
        match limiter
            .acquire_with_limits("u1", "gpt", &[("rpm", 1)], limits)
            .await
        {
            Err(Error::Validation(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{limits:?}: {other:?}"),
        }
    }
    assert!(store.counts().is_empty(), "{:?}", store.counts());
}
