//! The admission defects of issue 42 and the two shard differences it
//! brought to the Python client's behaviour, each on the in-memory twin
//! (the differential cannot write shards above 1, quotas or bypass stamps
//! yet). Faults neither moto nor DynamoDB Local can show (a lost lock, a
//! transaction conflict) are injected at the store seam, and say so.

use crate::memory::{
    NS, T0, bucket, bucket_pk, daily_quota, limit, n, next_midnight, open, options, set, table,
};
use crate::others::{meta, stamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zae_client::{Error, ManualClock, Options, RateLimiter};
use zae_table::config::{Disabled, LevelConfig, LimitConfig, build_item};
use zae_table::keys;
use zae_table::level::Level;
use zae_table::store::StoreError;
use zae_table::{Attr, Item};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// Shard `shard` of `entity`'s `gpt` bucket, one of `count`, as a slow
/// pass leaves it: `rpm` at `tokens` millitokens of an undivided 100 a
/// minute, a write budget to spare, and `extra` attributes on top.
fn shard(
    store: &MemoryStore,
    (entity, shard, count): (&str, u32, i64),
    tokens: i64,
    extra: &[(&str, Attr)],
) {
    let mut item: Item = [
        ("PK".to_owned(), Attr::s(bucket_pk(entity, shard))),
        ("SK".to_owned(), Attr::s(keys::SK_STATE)),
        ("rf".to_owned(), Attr::n(T0)),
        ("shard_count".to_owned(), Attr::n(count)),
    ]
    .into();
    for (f, v) in [
        ("tk", tokens),
        ("cp", 100_000),
        ("ra", 100_000),
        ("rp", 60_000),
        ("tc", 0),
    ] {
        item.insert(format!("b_rpm_{f}"), Attr::n(v));
    }
    for (f, v) in [
        ("tk", 1_000_000),
        ("cp", 1_000_000),
        ("ra", 1_000_000),
        ("rp", 1000),
        ("tc", 0),
    ] {
        item.insert(format!("b_wcu_{f}"), Attr::n(v));
    }
    for (attr, value) in extra {
        item.insert((*attr).to_owned(), value.clone());
    }
    store.insert(item);
}

fn item(store: &MemoryStore, entity: &str, shard: u32) -> Item {
    store
        .item(&bucket_pk(entity, shard), keys::SK_STATE)
        .unwrap_or_else(|| panic!("shard {shard} of {entity}"))
}

/// `kid` cascades to `boss`, both registered.
fn family(store: &MemoryStore) {
    store.insert(meta("boss", None));
    store.insert(meta("kid", Some("boss")));
}

// Defect 1: a probed shard's own stamp says the bucket cascades.
#[tokio::test]
async fn a_probed_shard_that_cascades_debits_the_parent_too() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    family(&store);
    // Shard 0 predates the cascade (no stamp) and is spent; shard 1 was
    // restamped by a slow pass since, and has room.
    shard(&store, ("kid", 0, 2), 0, &[]);
    let stamps = [
        ("cascade", Attr::Bool(true)),
        ("parent_id", Attr::s("boss")),
    ];
    shard(&store, ("kid", 1, 2), 50_000, &stamps);
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted on shard 1");
    let entities: Vec<&str> = lease
        .entries()
        .iter()
        .map(|e| e.key.entity.as_str())
        .collect();
    assert_eq!(entities, ["kid", "boss"], "the parent is in the lease");
    lease.commit().await.expect("commit");
    assert_eq!(
        n(&bucket(&store, "boss"), "b_rpm_tc"),
        1000,
        "parent debited"
    );
    let probed = item(&store, "kid", 1);
    assert_eq!(
        (n(&probed, "b_rpm_tk"), n(&probed, "b_rpm_tc")),
        (49_000, 1000),
        "the child-only debit went back, the cascade's stayed"
    );
}

// Defect 2: a commit mixing a credit and a debit, where the credit is
// dropped (a quota's refund across its reset: another writer applied the
// next midnight's reset meanwhile). The debit beside it is still written.
#[tokio::test]
async fn a_debit_beside_a_dropped_credit_on_a_quota_bucket_is_still_written() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![
        daily_quota("rpd", 100),
        limit("tpm", 10_000, false),
    ]));
    let limiter = open(Arc::clone(&store), &clock).await;
    let consume = [("rpd", 1), ("tpm", 500)];
    let lease = limiter
        .acquire("u1", "gpt", &consume)
        .await
        .expect("admitted");
    lease.commit().await.expect("commit");
    let mut lease = limiter
        .acquire("u1", "gpt", &consume)
        .await
        .expect("admitted on the fast path");
    // Another writer applied the next midnight's reset meanwhile.
    stamp(&store, "u1", "rf", Attr::n(next_midnight(T0) + 1));
    lease.release(&[("rpd", 1)]);
    lease.adjust(&[("tpm", 300)]);
    lease.commit().await.expect("commit");
    let after = bucket(&store, "u1");
    assert_eq!(n(&after, "b_tpm_tc"), 1_300_000, "the +300 tpm was written");
    assert_eq!(n(&after, "b_tpm_tk"), 8_700_000);
    assert_eq!(
        (n(&after, "b_rpd_tc"), n(&after, "b_rpd_tk")),
        (2000, 98_000),
        "the quota's credit across its reset was dropped"
    );
}

// Defect 3: a limit the in-lease consume does not name is not judged.
#[tokio::test]
async fn an_in_lease_consume_ignores_the_debt_of_a_limit_it_does_not_name() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![
        limit("rpm", 100, false),
        limit("tpm", 100, false),
    ]));
    let limiter = open(Arc::clone(&store), &clock).await;
    let mut lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 10)])
        .await
        .expect("admitted");
    lease.adjust(&[("tpm", 200)]);
    lease
        .consume(&[("rpm", 1)])
        .expect("tpm's debt is no reason to refuse rpm");
    let err = lease
        .consume(&[("rpm", 1), ("tpm", 1)])
        .expect_err("tpm is in debt");
    let Error::RateLimitExceeded(e) = err else {
        panic!("{err}")
    };
    let names: Vec<&str> = e.violations().map(|s| s.limit.as_str()).collect();
    assert_eq!(names, ["tpm"]);
}

fn disabled_level(store: &MemoryStore, limits: Vec<LimitConfig>) {
    let config = LevelConfig {
        limits,
        disabled: Some(Disabled::Yes),
        ..LevelConfig::default()
    };
    store.insert(build_item(NS, &Level::Resource("gpt".into()), &config));
}

// Defect 5: disabled outranks a feature this client refuses.
#[tokio::test]
async fn a_disabled_resource_is_disabled_whatever_its_limits_carry() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![]));
    disabled_level(&store, vec![LimitConfig::drip("rpm", 100, 0, 60)]);
    let limiter = open(Arc::clone(&store), &clock).await;
    let err = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect_err("disabled");
    assert!(matches!(err, Error::ResourceDisabled { .. }), "{err}");
    // A bucket stamped disabled beside another client's quota, read by
    // a slow pass (config enabled again, the stamp not yet cleared).
    set(
        &store,
        &Level::Resource("gpt".into()),
        vec![limit("rpm", 100, false)],
    );
    let extra = [("disabled", Attr::Bool(true)), ("b_rpm_gc", Attr::n(1))];
    shard(&store, ("u2", 0, 1), 50_000, &extra);
    let slow = RateLimiter::on_store(
        Arc::clone(&store),
        NS,
        Options {
            speculative_writes: false,
            ..options(&clock)
        },
    )
    .await
    .expect("open");
    let err = slow
        .acquire("u2", "gpt", &[("rpm", 1)])
        .await
        .expect_err("disabled");
    assert!(matches!(err, Error::ResourceDisabled { .. }), "{err}");
}

// Defect 4: a probed shard that failed only on a trimming `vu = 0`.
#[tokio::test]
async fn a_probed_shard_that_failed_only_on_a_trimming_vu_is_admitted_by_its_slow_path() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    shard(&store, ("u1", 0, 2), 0, &[]);
    shard(&store, ("u1", 1, 2), 50_000, &[("vu", Attr::n(0))]);
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("shard 1 has room");
    assert_eq!(lease.entries()[0].key.shard, 1);
    lease.commit().await.expect("commit");
    let probed = item(&store, "u1", 1);
    assert_eq!(n(&probed, "b_rpm_tc"), 1000);
    assert!(!probed.contains_key("vu"), "its slow pass trimmed it");
}

// Defect 6: the acquiring entity's own bypass, not its parent's.
#[tokio::test]
async fn a_lease_is_not_bypassed_when_only_the_parent_is() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    family(&store);
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    lease.commit().await.expect("commit");
    let mut parent = bucket(&store, "boss");
    parent.insert("bypass".into(), Attr::n(T0 + 30_000));
    store.insert(parent);
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    assert_eq!(lease.entries().len(), 2);
    assert!(lease.entries()[1].bypassed, "the parent's entry is");
    assert!(!lease.is_bypassed(), "the entity itself is not bypassed");
    lease.commit().await.expect("commit");
}

/// Injected: the next `n` transactions are cancelled, as when other
/// writers moved each bucket's `rf` lock between the read and the write.
struct LostLocks(AtomicUsize);

impl Faults for LostLocks {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let Call::Transact(writes) = call else {
            return None;
        };
        let take = |left: usize| left.checked_sub(1);
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
            .ok()
            .map(|_| StoreError::Cancelled {
                operation: "TransactWriteItems",
                key: writes.first().map(|w| w.key_text()).unwrap_or_default(),
                message: "ConditionalCheckFailed (injected)".into(),
            })
    }
}

// Defect 7: the consumption-only retry of a cascade whose parent takes
// none of the consumed limits.
#[tokio::test]
async fn a_cascades_consumption_only_retry_sends_no_empty_update() {
    let clock = ManualClock::new(T0);
    let inner = table(vec![limit("rpm", 100, false)]);
    family(&inner);
    // The parent's own limits name none of what the child consumes.
    let parent_level = Level::Entity {
        entity: "boss".into(),
        resource: "gpt".into(),
    };
    set(&inner, &parent_level, vec![limit("tpm", 100, false)]);
    let store = Arc::new(Injected {
        inner,
        faults: LostLocks(AtomicUsize::new(0)),
    });
    let slow = Options {
        speculative_writes: false,
        ..options(&clock)
    };
    let limiter = RateLimiter::on_store(Arc::clone(&store), NS, slow)
        .await
        .expect("open");
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("created");
    lease.commit().await.expect("commit");
    // Both passes' locked writes lose: the consumption alone follows.
    store.faults.0.store(2, Ordering::SeqCst);
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("the consumption alone admits");
    lease.commit().await.expect("commit");
    assert_eq!(n(&bucket(&store.inner, "kid"), "b_rpm_tc"), 2000);
}

/// Injected: every write meets another writer's transaction.
struct Conflicts;

impl Faults for Conflicts {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        matches!(call, Call::Update(_) | Call::Transact(_)).then(|| StoreError::Retryable {
            operation: "UpdateItem",
            key: "k".into(),
            message: "TransactionConflictException (injected)".into(),
        })
    }
}

/// A custom executor, no Tokio: polls on this thread, parked between wakes.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => return out,
            std::task::Poll::Pending => std::thread::park(),
        }
    }
}

// Defect 8: a conflict's wait outside a Tokio runtime (a custom executor).
#[test]
fn a_transaction_conflict_outside_a_tokio_runtime_is_waited_out_not_a_panic() {
    let clock = ManualClock::new(T0);
    let store = Injected {
        inner: table(vec![limit("rpm", 100, false)]),
        faults: Conflicts,
    };
    let answer = block_on(async {
        let limiter = open(store, &clock).await;
        limiter.acquire("u1", "gpt", &[("rpm", 1)]).await
    });
    let Err(Error::RateLimitExceeded(e)) = answer else {
        panic!("a contended rejection, got {answer:?}");
    };
    assert!(e.contended);
}

// Difference 1 (now Python's behaviour): a cascading child's short shard
// hands its slow path another shard.
#[tokio::test]
async fn a_cascading_childs_short_shard_sends_its_slow_path_to_another_shard() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![
        limit("rpm", 100, false),
        limit("tpm", 100, false),
    ]));
    family(&store);
    // Both shards predate `tpm` (a refill check cannot judge it); shard 0
    // has no `rpm` left, shard 1 has.
    let stamps = [
        ("cascade", Attr::Bool(true)),
        ("parent_id", Attr::s("boss")),
    ];
    shard(&store, ("kid", 0, 2), 0, &stamps);
    shard(&store, ("kid", 1, 2), 50_000, &stamps);
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1), ("tpm", 1)])
        .await
        .expect("shard 1 has room");
    let shards: Vec<(&str, u32)> = lease
        .entries()
        .iter()
        .map(|e| (e.key.entity.as_str(), e.key.shard))
        .collect();
    assert_eq!(shards, [("kid", 1), ("boss", 0)]);
    lease.commit().await.expect("commit");
    assert_eq!(
        n(&item(&store, "kid", 0), "b_rpm_tc"),
        0,
        "shard 0 untouched"
    );
}

/// A `tpm` field's attribute name, for a hand-made bucket.
fn tpm(field: &str) -> &'static str {
    match field {
        "tk" => "b_tpm_tk",
        "cp" => "b_tpm_cp",
        "ra" => "b_tpm_ra",
        _ => "b_tpm_rp",
    }
}

// Difference 2 (now Python's behaviour): a parent shard whose own slow
// pass rejects is re-drawn by the slow path of both buckets. The draw is
// uniform, as the Python client's: over a fixed set of seeds some draw the
// spent shard again (and reject, as Python then does), and the others
// admit on the parent's other shard. Before, none admitted.
#[tokio::test]
async fn a_spent_parent_shard_is_re_drawn_by_the_slow_path() {
    let mut admitted = 0;
    for seed in 0..16 {
        fastrand::seed(seed);
        let clock = ManualClock::new(T0);
        let store = Arc::new(table(vec![
            limit("rpm", 100, false),
            limit("tpm", 100, false),
        ]));
        family(&store);
        // The child has both limits, with room.
        let mut kid = vec![
            ("cascade", Attr::Bool(true)),
            ("parent_id", Attr::s("boss")),
        ];
        for (f, v) in [
            ("tk", 100_000),
            ("cp", 100_000),
            ("ra", 100_000),
            ("rp", 60_000),
        ] {
            kid.push((tpm(f), Attr::n(v)));
        }
        shard(&store, ("kid", 0, 1), 50_000, &kid);
        // The parent's shard 0 has no `rpm` left and predates `tpm`.
        shard(&store, ("boss", 0, 2), 0, &[]);
        shard(&store, ("boss", 1, 2), 50_000, &[]);
        let limiter = open(Arc::clone(&store), &clock).await;
        match limiter
            .acquire("kid", "gpt", &[("rpm", 1), ("tpm", 1)])
            .await
        {
            Ok(lease) => {
                let parent = &lease.entries()[1].key;
                assert_eq!((parent.entity.as_str(), parent.shard), ("boss", 1));
                lease.commit().await.expect("commit");
                admitted += 1;
            }
            Err(Error::RateLimitExceeded(_)) => {
                let kid = item(&store, "kid", 0);
                assert_eq!(
                    n(&kid, "b_rpm_tc"),
                    0,
                    "a rejection leaves the child as it was"
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(admitted > 0, "no seed re-drew the parent's other shard");
}

// Difference 2, its write budget (now Python's behaviour): a parent shard
// whose write budget is spent, and which a refill would not bring back,
// doubles the parent's shards; both buckets take the slow path, the
// parent on the shard the doubling added.
#[tokio::test]
async fn a_parent_shard_with_its_write_budget_spent_doubles_the_parents_shards() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    family(&store);
    let stamps = [
        ("cascade", Attr::Bool(true)),
        ("parent_id", Attr::s("boss")),
    ];
    shard(&store, ("kid", 0, 1), 50_000, &stamps);
    // Ten seconds of writes behind, at a thousand a second.
    shard(
        &store,
        ("boss", 0, 1),
        100_000,
        &[("b_wcu_tk", Attr::n(-10_000_000))],
    );
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    let shards: Vec<(&str, u32)> = lease
        .entries()
        .iter()
        .map(|e| (e.key.entity.as_str(), e.key.shard))
        .collect();
    assert_eq!(shards, [("kid", 0), ("boss", 1)]);
    lease.commit().await.expect("commit");
    assert_eq!(n(&item(&store, "boss", 0), "shard_count"), 2, "doubled");
    let fresh = item(&store, "boss", 1);
    assert_eq!((n(&fresh, "shard_count"), n(&fresh, "b_rpm_tc")), (2, 1000));
    let kid = item(&store, "kid", 0);
    assert_eq!(n(&kid, "b_rpm_tc"), 1000, "the child debited once");
}
