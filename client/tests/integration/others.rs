//! Buckets other writers shaped, on the in-memory twin: an operator's
//! bypass stamp, another client's quota, a child moved to a new parent,
//! amounts from a careless caller, and a lost lock on a soft limit in debt.

use crate::memory::{
    NS, T0, bucket, bucket_pk, daily_quota, limit, n, next_midnight, open, options, table,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zae_client::{Error, ManualClock, RateLimiter};
use zae_table::keys;
use zae_table::store::StoreError;
use zae_table::{Attr, Item};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

pub(crate) fn stamp(store: &MemoryStore, entity: &str, attr: &str, value: Attr) {
    let mut item = bucket(store, entity);
    item.insert(attr.to_owned(), value);
    store.insert(item);
}

async fn acquired(limiter: &RateLimiter<Arc<MemoryStore>>, entity: &str) {
    let lease = limiter
        .acquire(entity, "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    lease.commit().await.expect("commit");
}

#[tokio::test]
async fn a_bypassed_bucket_keeps_its_tokens_and_counts_every_request_once() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    let limiter = open(Arc::clone(&store), &clock).await;
    acquired(&limiter, "u1").await;
    stamp(&store, "u1", "bypass", Attr::n(T0 + 30_000));
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 5)])
        .await
        .expect("bypassed");
    assert!(lease.is_bypassed());
    lease.commit().await.expect("commit");
    let item = bucket(&store, "u1");
    assert_eq!(
        n(&item, "b_rpm_tk"),
        99_000,
        "the bypassed debit's tokens went back"
    );
    assert_eq!(n(&item, "b_rpm_tc"), 6_000, "and it was counted");
    // A failing body under bypass takes back the count alone.
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 3)])
        .await
        .expect("bypassed");
    lease.rollback().await;
    let item = bucket(&store, "u1");
    assert_eq!(
        (n(&item, "b_rpm_tk"), n(&item, "b_rpm_tc")),
        (99_000, 6_000)
    );
}

#[tokio::test]
async fn an_expired_bypass_stamp_is_removed_by_the_slow_path() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    let limiter = open(Arc::clone(&store), &clock).await;
    acquired(&limiter, "u1").await;
    stamp(&store, "u1", "bypass", Attr::n(T0 - 1));
    acquired(&limiter, "u1").await;
    assert!(
        !bucket(&store, "u1").contains_key("bypass"),
        "else every acquire takes the slow path"
    );
}

#[tokio::test]
async fn a_quota_credit_lands_in_its_period_and_is_dropped_after_a_reset() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![daily_quota("rpd", 100)]));
    let limiter = open(Arc::clone(&store), &clock).await;
    let mut lease = limiter
        .acquire("u1", "gpt", &[("rpd", 2)])
        .await
        .expect("admitted");
    lease.release(&[("rpd", 1)]);
    lease.commit().await.expect("committed");
    let item = bucket(&store, "u1");
    assert_eq!(n(&item, "b_rpd_tk"), 99_000, "the credit lands in its day");
    assert_eq!(n(&item, "b_rpd_gc"), 1, "granted at the item's count");
    let mut lease = limiter
        .acquire("u1", "gpt", &[("rpd", 1)])
        .await
        .expect("admitted on the fast path");
    // Another writer applied the next midnight's reset meanwhile: its `rf`
    // is past the edge, so the debit being returned was the day before's.
    stamp(&store, "u1", "rf", Attr::n(next_midnight(T0) + 1));
    lease.release(&[("rpd", 1)]);
    lease.commit().await.expect("a dropped credit is no error");
    assert_eq!(
        n(&bucket(&store, "u1"), "b_rpd_tk"),
        98_000,
        "no refund into the next day"
    );
}

/// An entity's META as `create_entity` leaves it, cascading when it has a parent.
pub(crate) fn meta(id: &str, parent: Option<&str>) -> Item {
    let mut item: Item = [
        ("PK".to_owned(), Attr::s(keys::pk_entity(NS, id))),
        ("SK".to_owned(), Attr::s(keys::SK_META)),
        ("cascade".to_owned(), Attr::Bool(parent.is_some())),
    ]
    .into();
    if let Some(p) = parent {
        item.insert("parent_id".into(), Attr::s(p));
    }
    item
}

#[tokio::test]
async fn a_debit_sent_to_a_parent_the_child_no_longer_names_is_refunded() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    for (id, parent) in [("old", None), ("new", None), ("kid", Some("old"))] {
        store.insert(meta(id, parent));
    }
    let limiter = open(Arc::clone(&store), &clock).await;
    acquired(&limiter, "kid").await;
    assert_eq!(n(&bucket(&store, "old"), "b_rpm_tc"), 1000);
    // Moved to `new`: the child's bucket is restamped (as a slow pass of
    // another process would), while this process still writes `old` too.
    stamp(&store, "kid", "parent_id", Attr::s("new"));
    store.insert(meta("kid", Some("new")));
    acquired(&limiter, "kid").await;
    assert_eq!(
        n(&bucket(&store, "old"), "b_rpm_tc"),
        1000,
        "the old parent's debit went back"
    );
    assert_eq!(
        n(&bucket(&store, "new"), "b_rpm_tc"),
        1000,
        "the new parent was debited"
    );
}

#[tokio::test]
async fn careless_amounts_on_a_lease_are_refused_or_ignored_never_wrapped() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    let limiter = open(Arc::clone(&store), &clock).await;
    let mut lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    assert!(matches!(
        lease.consume(&[("rpm", i64::MAX)]),
        Err(Error::Validation(_))
    ));
    lease.adjust(&[("rpm", i64::MAX)]);
    lease.release(&[("rpm", i64::MIN)]);
    lease
        .consume(&[("rpm", -5)])
        .expect("a negative consume takes nothing");
    lease.adjust(&[("rpm", 2)]);
    lease.commit().await.expect("commit");
    let item = bucket(&store, "u1");
    assert_eq!(
        (n(&item, "b_rpm_tk"), n(&item, "b_rpm_tc")),
        (97_000, 3_000)
    );
}

/// The first rf-locked write fails its condition: another writer moved
/// `rf` in between.
#[derive(Default)]
struct LostLock(AtomicBool);

impl Faults for LostLock {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Update(u) = call else { return None };
        let locked = u.expression.starts_with("SET") && u.names.values().any(|v| v == "rf");
        (locked && !self.0.swap(true, Ordering::SeqCst)).then(|| StoreError::ConditionFailed {
            operation: "UpdateItem",
            key: u.pk.clone(),
        })
    }
}

#[tokio::test]
async fn after_a_lost_lock_a_soft_limit_in_debt_with_an_expired_stamp_still_admits() {
    let clock = ManualClock::new(T0);
    let inner = table(vec![limit("rpm", 100, false), limit("tpm", 10, true)]);
    let store = Arc::new(Injected {
        inner,
        faults: LostLock::default(),
    });
    let limiter = RateLimiter::on_store(Arc::clone(&store), NS, options(&clock))
        .await
        .expect("open");
    limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 50)])
        .await
        .expect("soft")
        .commit()
        .await
        .expect("commit");
    store.faults.0.store(false, Ordering::SeqCst);
    clock.set(T0 + 120_000);
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 50)])
        .await;
    assert!(lease.is_ok(), "a soft limit never rejects: {lease:?}");
    let item = store
        .inner
        .item(&bucket_pk("u1", 0), keys::SK_STATE)
        .expect("bucket");
    assert_eq!(n(&item, "b_tpm_tc"), 100_000);
}
