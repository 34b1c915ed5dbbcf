//! `acquire_many` (several resources in one acquire) on the in-memory
//! twin, where the differential cannot reach: a cancelled shared
//! transaction and a refund that fails are faults neither moto nor
//! DynamoDB Local shows, so they are injected at the store seam and say
//! so. The answers themselves are compared with the Python client's in
//! `differential` (`also.json`).

use crate::memory::{NS, T0, limit, n, options, set, table};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zae_client::{Error, ManualClock, Options, RateLimiter};
use zae_table::keys;
use zae_table::level::Level;
use zae_table::store::StoreError;
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// `gpt` (rpm 100) and `img` and `doc` (pics 10) on one table.
fn three_resources() -> MemoryStore {
    let store = table(vec![limit("rpm", 100, false)]);
    for resource in ["img", "doc"] {
        let level = Level::Resource(resource.into());
        set(&store, &level, vec![limit("pics", 10, false)]);
    }
    store
}

fn pk(entity: &str, resource: &str) -> String {
    keys::BucketKey {
        namespace: NS.into(),
        entity: entity.into(),
        resource: resource.into(),
        shard: 0,
    }
    .pk()
}

fn tokens(store: &MemoryStore, resource: &str, limit: &str) -> Option<i64> {
    let item = store.item(&pk("u1", resource), keys::SK_STATE)?;
    Some(n(&item, &format!("b_{limit}_tk")))
}

/// No rejection cache: every acquire below writes.
fn uncached(clock: &ManualClock) -> Options {
    Options {
        rejection_cache_ttl: std::time::Duration::ZERO,
        ..options(clock)
    }
}

/// Injected: the next `n` transactions are cancelled (another writer
/// moved a lock between the read and the write), each one counted.
#[derive(Default)]
struct Cancelled {
    left: AtomicUsize,
    sent: AtomicUsize,
}

impl Faults for Cancelled {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Transact(writes) = call else {
            return None;
        };
        self.sent.fetch_add(1, Ordering::SeqCst);
        let take = |left: usize| left.checked_sub(1);
        self.left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
            .ok()
            .map(|_| StoreError::Cancelled {
                operation: "TransactWriteItems",
                key: writes.first().map(|w| w.key_text()).unwrap_or_default(),
                message: "ConditionalCheckFailed (injected)".into(),
            })
    }
}

/// `gpt` warm (the fast path admits it), `img` and `doc` new (their slow
/// passes share one transaction).
async fn warm_gpt(
    store: Arc<Injected<MemoryStore, Cancelled>>,
    clock: &ManualClock,
) -> RateLimiter<Arc<Injected<MemoryStore, Cancelled>>> {
    let limiter = RateLimiter::on_store(store, NS, uncached(clock))
        .await
        .expect("open");
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("gpt");
    lease.commit().await.expect("commit");
    limiter
}

const PARTS: [(&str, &[(&str, i64)]); 3] = [
    ("gpt", &[("rpm", 1)]),
    ("img", &[("pics", 2)]),
    ("doc", &[("pics", 3)]),
];

#[tokio::test]
async fn a_shared_transaction_cancelled_once_is_planned_again_and_admits_every_resource() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Injected {
        inner: three_resources(),
        faults: Cancelled::default(),
    });
    let limiter = warm_gpt(Arc::clone(&store), &clock).await;
    store.faults.sent.store(0, Ordering::SeqCst);
    store.faults.left.store(1, Ordering::SeqCst);
    let lease = limiter
        .acquire_many("u1", &PARTS, None)
        .await
        .expect("admitted on the second pass");
    assert_eq!(lease.resources(), ["gpt", "img", "doc"]);
    lease.commit().await.expect("commit");
    assert_eq!(
        store.faults.sent.load(Ordering::SeqCst),
        2,
        "one transaction per pass"
    );
    assert_eq!(tokens(&store.inner, "gpt", "rpm"), Some(98_000));
    assert_eq!(tokens(&store.inner, "img", "pics"), Some(8_000));
    assert_eq!(tokens(&store.inner, "doc", "pics"), Some(7_000));
}

#[tokio::test]
async fn a_shared_transaction_cancelled_on_every_pass_is_contended_and_refunds_the_fast_debit() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Injected {
        inner: three_resources(),
        faults: Cancelled::default(),
    });
    let limiter = warm_gpt(Arc::clone(&store), &clock).await;
    store.faults.sent.store(0, Ordering::SeqCst);
    store.faults.left.store(usize::MAX, Ordering::SeqCst);
    let err = limiter
        .acquire_many("u1", &PARTS, None)
        .await
        .expect_err("nothing lands");
    let Error::RateLimitExceeded(rejection) = err else {
        panic!("a contended rejection, got {err:?}");
    };
    assert!(rejection.contended, "other writers, not a violation");
    assert!(rejection.statuses.iter().all(|s| !s.exceeded));
    let resources: Vec<&str> = rejection
        .statuses
        .iter()
        .map(|s| s.resource.as_str())
        .collect();
    assert_eq!(
        resources,
        ["img", "doc", "gpt"],
        "the planned ones, then the admitted"
    );
    assert_eq!(
        store.faults.sent.load(Ordering::SeqCst),
        2,
        "two passes, then no more"
    );
    // gpt's fast-path debit came back; nothing was created.
    assert_eq!(tokens(&store.inner, "gpt", "rpm"), Some(99_000));
    assert_eq!(tokens(&store.inner, "img", "pics"), None);
    assert_eq!(tokens(&store.inner, "doc", "pics"), None);
}

/// Injected: every UpdateItem after the first `after` fails (a throttle
/// that outlived the SDK's retries), so the refunds of a rejected
/// multi-resource acquire fail.
struct UpdatesFailAfter {
    after: AtomicUsize,
    seen: AtomicUsize,
}

impl Faults for UpdatesFailAfter {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Update(update) = call else {
            return None;
        };
        let seen = self.seen.fetch_add(1, Ordering::SeqCst);
        (seen >= self.after.load(Ordering::SeqCst)).then(|| StoreError::Retryable {
            operation: "UpdateItem",
            key: update.pk.clone(),
            message: "ProvisionedThroughputExceeded (injected)".into(),
        })
    }
}

#[tokio::test]
async fn a_refund_that_fails_leaves_the_rejection_standing_and_the_call_returns() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Injected {
        inner: three_resources(),
        faults: UpdatesFailAfter {
            after: AtomicUsize::new(usize::MAX),
            seen: AtomicUsize::new(0),
        },
    });
    let limiter = RateLimiter::on_store(Arc::clone(&store), NS, uncached(&clock))
        .await
        .expect("open");
    let parts: [(&str, &[(&str, i64)]); 2] = [("gpt", &[("rpm", 1)]), ("img", &[("pics", 9)])];
    let lease = limiter
        .acquire_many("u1", &parts, None)
        .await
        .expect("both created");
    lease.commit().await.expect("commit");
    // Now gpt admits on the fast path and img (1 left) refuses 9; the
    // refund of gpt's debit, the third UpdateItem, fails.
    let seen = store.faults.seen.load(Ordering::SeqCst);
    store.faults.after.store(seen + 2, Ordering::SeqCst);
    let err = limiter
        .acquire_many("u1", &parts, None)
        .await
        .expect_err("img is short");
    let Error::RateLimitExceeded(rejection) = err else {
        panic!("the rejection, not the refund's failure: {err:?}");
    };
    assert!(!rejection.contended);
    let exceeded: Vec<&str> = rejection
        .statuses
        .iter()
        .filter(|s| s.exceeded)
        .map(|s| s.resource.as_str())
        .collect();
    assert_eq!(exceeded, ["img"]);
    assert!(
        rejection
            .statuses
            .iter()
            .any(|s| s.resource == "gpt" && !s.exceeded)
    );
    assert_eq!(
        store.faults.seen.load(Ordering::SeqCst),
        seen + 3,
        "the refund was tried"
    );
    // Best effort, as the Python client's: the debit the refund could
    // not take back stays (logged), and nothing else changed.
    assert_eq!(tokens(&store.inner, "gpt", "rpm"), Some(98_000));
    assert_eq!(tokens(&store.inner, "img", "pics"), Some(1_000));
}

#[tokio::test]
async fn a_disabled_resource_refunds_the_others_and_outranks_a_rejection() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(three_resources());
    let level = Level::Resource("doc".into());
    let config = zae_table::config::LevelConfig {
        limits: vec![limit("pics", 10, false)],
        disabled: Some(zae_table::config::Disabled::Yes),
        ..Default::default()
    };
    store.insert(zae_table::config::build_item(NS, &level, &config));
    let limiter = RateLimiter::on_store(Arc::clone(&store), NS, uncached(&clock))
        .await
        .expect("open");
    let warm = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("gpt");
    warm.commit().await.expect("commit");
    let parts: [(&str, &[(&str, i64)]); 3] = [
        ("gpt", &[("rpm", 1)]),
        ("img", &[("pics", 11)]),
        ("doc", &[("pics", 1)]),
    ];
    let err = limiter
        .acquire_many("u1", &parts, None)
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::ResourceDisabled { resource, .. } if resource == "doc"),
        "{err:?}"
    );
    assert_eq!(tokens(&store, "gpt", "rpm"), Some(99_000), "gpt refunded");
    assert_eq!(tokens(&store, "doc", "pics"), None);
}

#[tokio::test]
async fn a_lease_adjusts_the_primary_and_reaches_the_others_by_name() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(three_resources());
    let limiter = RateLimiter::on_store(Arc::clone(&store), NS, uncached(&clock))
        .await
        .expect("open");
    let parts: [(&str, &[(&str, i64)]); 2] = [("img", &[("pics", 1)]), ("doc", &[("pics", 1)])];
    let mut lease = limiter
        .acquire_many("u1", &parts, None)
        .await
        .expect("admitted");
    // Both declare `pics`: the lease's own calls are the primary's.
    lease.adjust(&[("pics", 2)]);
    lease.resource("doc").expect("doc").adjust(&[("pics", 4)]);
    assert!(matches!(lease.resource("gpt"), Err(Error::Validation(_))));
    let short = lease.resource("doc").expect("doc").consume(&[("pics", 6)]);
    assert!(
        matches!(short, Err(Error::RateLimitExceeded(_))),
        "5 left of 10 after 1 + 4"
    );
    lease.commit().await.expect("commit");
    assert_eq!(tokens(&store, "img", "pics"), Some(7_000));
    assert_eq!(tokens(&store, "doc", "pics"), Some(5_000));
}
