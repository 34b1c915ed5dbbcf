//! zae-client on the in-memory twin of the table: the soft-limit request's
//! criteria, the capacity a fast path costs (counted at the store seam),
//! refusals, and the faults moto cannot show (throttling, denial,
//! transaction conflicts), injected at the store seam.

use std::sync::Arc;
use zae_client::{Error, Feature, ManualClock, OnUnavailable, Options, RateLimiter};
use zae_table::config::{LevelConfig, LimitConfig, build_item};
use zae_table::keys;
use zae_table::level::Level;
use zae_table::store::{Counted, Store, StoreError};
use zae_table::{Attr, Item};
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

pub(crate) const NS: &str = "default";
pub(crate) const T0: i64 = 1_796_186_400_000;

pub(crate) fn limit(name: &str, capacity: i64, soft: bool) -> LimitConfig {
    LimitConfig {
        soft,
        ..LimitConfig::drip(name, capacity, capacity, 60)
    }
}

/// A calendar quota of `capacity` a day, reset at midnight UTC.
pub(crate) fn daily_quota(name: &str, capacity: i64) -> LimitConfig {
    LimitConfig {
        refill_amount: 0,
        refill_period: 1,
        rsched: Some(DAILY.into()),
        ..limit(name, capacity, false)
    }
}

/// [`daily_quota`]'s reset cron, compact.
const DAILY: &str = "1m0h0";

/// The first midnight UTC after `at`: the daily quota's next reset edge.
pub(crate) fn next_midnight(at: i64) -> i64 {
    let resets = zae_table::schedule::decode_resets(DAILY).expect("a cron");
    zae_table::schedule::next_reset_edge(&resets, zae_table::schedule::Tz::UTC, at)
        .expect("an edge")
}

/// A table with `default` registered and `limits` on resource `gpt`.
pub(crate) fn table(limits: Vec<LimitConfig>) -> MemoryStore {
    let store = MemoryStore::new();
    store.register_namespace(NS);
    set(&store, &Level::Resource("gpt".into()), limits);
    store
}

pub(crate) fn set(store: &MemoryStore, level: &Level, limits: Vec<LimitConfig>) {
    let config = LevelConfig {
        limits,
        ..LevelConfig::default()
    };
    store.insert(build_item(NS, level, &config));
}

pub(crate) fn options(clock: &ManualClock) -> Options {
    Options {
        clock: Arc::new(clock.clone()),
        ..Options::default()
    }
}

pub(crate) async fn open<S: Store + 'static>(store: S, clock: &ManualClock) -> RateLimiter<S> {
    RateLimiter::on_store(store, NS, options(clock))
        .await
        .expect("open")
}

/// The partition key of shard `shard` of `entity`'s `gpt` bucket.
pub(crate) fn bucket_pk(entity: &str, shard: u32) -> String {
    keys::BucketKey {
        namespace: NS.into(),
        entity: entity.into(),
        resource: "gpt".into(),
        shard,
    }
    .pk()
}

pub(crate) fn bucket(store: &MemoryStore, entity: &str) -> Item {
    store
        .item(&bucket_pk(entity, 0), keys::SK_STATE)
        .expect("the bucket")
}

pub(crate) fn n(item: &Item, attr: &str) -> i64 {
    item.get(attr)
        .and_then(Attr::as_int)
        .unwrap_or_else(|| panic!("{attr} in {item:?}"))
}

#[tokio::test]
async fn a_soft_limit_never_rejects_on_the_fast_or_the_slow_path_and_its_debt_is_kept() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![
        limit("rpm", 100, false),
        limit("tpm", 1000, true),
    ]));
    let limiter = open(Arc::clone(&store), &clock).await;
    // Slow path (create), then fast path, each far past the soft capacity.
    for _ in 0..3 {
        let lease = limiter
            .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 900)])
            .await
            .expect("soft never rejects");
        lease.commit().await.expect("commit");
    }
    assert_eq!(n(&bucket(&store, "u1"), "b_tpm_tk"), 1_000_000 - 2_700_000);
    // The soft stamp expired: the slow path renews it and still admits.
    clock.set(T0 + 120_000);
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 900)])
        .await
        .expect("slow path admits soft debt");
    assert_eq!(lease.overdrawn(), vec!["tpm".to_owned()]);
    lease.commit().await.expect("commit");
}

#[tokio::test]
async fn a_rejection_lists_soft_debt_without_a_violation_and_waits_for_the_hard_limit_only() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 2, false), limit("tpm", 100, true)]));
    let limiter = open(Arc::clone(&store), &clock).await;
    for _ in 0..2 {
        limiter
            .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 500)])
            .await
            .expect("admitted")
            .commit()
            .await
            .expect("commit");
    }
    let Err(Error::RateLimitExceeded(e)) = limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 1)])
        .await
    else {
        panic!("the third request is over rpm");
    };
    let violations: Vec<&str> = e.violations().map(|s| s.limit.as_str()).collect();
    assert_eq!(violations, ["rpm"]);
    let tpm = e
        .statuses
        .iter()
        .find(|s| s.limit == "tpm")
        .expect("tpm status");
    assert!(tpm.soft && tpm.in_debt() && !tpm.exceeded && tpm.retry_after_ms == 0);
    // One rpm token back in 30 s (2 per minute): the soft debt adds nothing.
    assert_eq!(e.retry_after_ms(), 30_001);
    assert_eq!(e.retry_after_header(), 31);
}

#[tokio::test]
async fn adjustments_against_a_soft_limit_are_written_into_debt() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("tpm", 100, true)]));
    let limiter = open(Arc::clone(&store), &clock).await;
    let mut lease = limiter
        .acquire("u1", "gpt", &[("tpm", 10)])
        .await
        .expect("admitted");
    lease.adjust(&[("tpm", 500)]);
    lease.commit().await.expect("commit");
    let item = bucket(&store, "u1");
    assert_eq!(
        (n(&item, "b_tpm_tk"), n(&item, "b_tpm_tc")),
        (-410_000, 510_000)
    );
}

#[tokio::test]
async fn a_warm_fast_path_costs_one_update_and_no_read() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(Counted::new(table(vec![
        limit("rpm", 100, false),
        limit("tpm", 1000, true),
    ])));
    let limiter = open(Arc::clone(&store), &clock).await;
    limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 2000)])
        .await
        .expect("create")
        .commit()
        .await
        .expect("commit");
    store.reset();
    // Into soft debt on the fast path: still one write.
    limiter
        .acquire("u1", "gpt", &[("rpm", 1), ("tpm", 10)])
        .await
        .expect("fast")
        .commit()
        .await
        .expect("commit");
    let counts = store.counts();
    assert_eq!(counts.get("UpdateItem"), Some(&1), "{counts:?}");
    assert_eq!(counts.len(), 1, "no read, no other write: {counts:?}");
}

#[tokio::test]
async fn a_cascade_parents_soft_limit_never_rejects_and_its_hard_limit_refunds_the_child() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    store.insert(crate::others::meta("org", None));
    store.insert(crate::others::meta("kid", Some("org")));
    set(
        &store,
        &Level::Entity {
            entity: "org".into(),
            resource: "gpt".into(),
        },
        vec![limit("tpm", 100, true), limit("rpm", 1, false)],
    );
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("kid", "gpt", &[("rpm", 1), ("tpm", 500)])
        .await
        .expect("the parent's soft tpm admits");
    assert_eq!(lease.entries().len(), 2);
    lease.commit().await.expect("commit");
    assert_eq!(n(&bucket(&store, "org"), "b_tpm_tk"), -400_000);
    let Err(Error::RateLimitExceeded(e)) = limiter
        .acquire("kid", "gpt", &[("rpm", 1), ("tpm", 1)])
        .await
    else {
        panic!("the parent's hard rpm is spent");
    };
    assert!(
        e.violations()
            .all(|s| s.entity == "org" && s.limit == "rpm")
    );
    // The child's debit was refunded: one rpm consumed, not two.
    assert_eq!(n(&bucket(&store, "kid"), "b_rpm_tc"), 1000);
}

#[tokio::test]
async fn features_the_client_does_not_build_are_refused_with_their_name_and_level() {
    let clock = ManualClock::new(T0);
    let quota = LimitConfig {
        refill_amount: 0,
        ..limit("rpd", 100, false)
    };
    let store = Arc::new(table(vec![quota]));
    let limiter = open(Arc::clone(&store), &clock).await;
    let err = limiter
        .acquire("u1", "gpt", &[("rpd", 1)])
        .await
        .expect_err("a quota is refused");
    assert!(
        matches!(
            err,
            Error::Unsupported {
                feature: Feature::Quota,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("resource gpt"), "{err}");
    assert!(
        store.items().iter().all(|i| !i["PK"]
            .as_s()
            .unwrap_or_default()
            .contains(keys::BUCKET_PREFIX)),
        "nothing written"
    );
    // A bucket another client stamped with a schedule this build cannot
    // read (a later encoding version): 0.17.0 refuses it too.
    let mut item = bucket_with_vu(T0 + 1000);
    item.insert("PK".into(), Attr::s(bucket_pk("u2", 0)));
    item.insert("sched".into(), Attr::s("2h9-17s2000"));
    store.insert(item);
    set(
        &store,
        &Level::Resource("gpt".into()),
        vec![limit("rpm", 100, false)],
    );
    let err = limiter
        .acquire("u2", "gpt", &[("rpm", 1)])
        .await
        .expect_err("an unreadable schedule is refused");
    assert!(
        matches!(
            err,
            Error::Unsupported {
                feature: Feature::Schedule,
                ..
            }
        ),
        "{err}"
    );
}

pub(crate) fn bucket_with_vu(vu: i64) -> Item {
    let mut item: Item = [
        ("SK".to_owned(), Attr::s(keys::SK_STATE)),
        ("rf".to_owned(), Attr::n(T0)),
        ("vu".to_owned(), Attr::n(vu)),
    ]
    .into();
    for (f, v) in [
        ("tk", 1000),
        ("cp", 100_000),
        ("ra", 100_000),
        ("rp", 60_000),
        ("tc", 0),
    ] {
        item.insert(format!("b_rpm_{f}"), Attr::n(v));
    }
    item
}

/// Every call of one kind fails with `error`.
struct Failing(&'static str, fn() -> StoreError);

impl Faults for Failing {
    fn before(&self, call: &Call<'_>) -> Option<StoreError> {
        let kind = match call {
            Call::Update(_) => "update",
            Call::Transact(_) => "transact",
            _ => "other",
        };
        (kind == self.0 || self.0 == "all" && kind != "other").then(self.1)
    }
}

fn throttled() -> StoreError {
    StoreError::Retryable {
        operation: "UpdateItem",
        key: "k".into(),
        message: "ThrottlingException (injected)".into(),
    }
}

fn denied() -> StoreError {
    StoreError::Fatal {
        operation: "UpdateItem",
        key: "k".into(),
        message: "AccessDeniedException (injected)".into(),
    }
}

fn conflict() -> StoreError {
    StoreError::Retryable {
        operation: "UpdateItem",
        key: "k".into(),
        message: "TransactionConflictException (injected)".into(),
    }
}

async fn with_faults(error: fn() -> StoreError, mode: OnUnavailable) -> Result<bool, Error> {
    let clock = ManualClock::new(T0);
    let store = Injected {
        inner: table(vec![limit("rpm", 100, false)]),
        faults: Failing("all", error),
    };
    let options = Options {
        on_unavailable: Some(mode),
        ..options(&clock)
    };
    let limiter = RateLimiter::on_store(store, NS, options)
        .await
        .expect("open");
    limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .map(|l| l.is_degraded())
}

#[tokio::test]
async fn an_unavailable_table_blocks_or_admits_as_configured_and_a_denial_always_fails() {
    assert!(matches!(
        with_faults(throttled, OnUnavailable::Block).await,
        Err(Error::Unavailable(_))
    ));
    assert!(
        with_faults(throttled, OnUnavailable::Allow)
            .await
            .expect("allow admits"),
        "a degraded lease"
    );
    for mode in [OnUnavailable::Allow, OnUnavailable::Block] {
        assert!(matches!(
            with_faults(denied, mode).await,
            Err(Error::PermissionDenied(_))
        ));
    }
}

#[tokio::test]
async fn sustained_transaction_conflicts_are_a_contended_rejection_not_unavailability() {
    let result = with_faults(conflict, OnUnavailable::Allow).await;
    let Err(Error::RateLimitExceeded(e)) = result else {
        panic!("contended, got {result:?}");
    };
    assert!(e.contended && e.violations().count() == 0);
    assert_eq!(e.retry_after_ms(), 100);
}

/// The Python client quotes the contention wait (0.1 s) on every limit of
/// a contended rejection's body, not 0: a caller that reads the
/// per-limit wait retries too soon otherwise. Contention is injected at
/// the store seam (neither moto nor DynamoDB Local shows it on demand).
#[tokio::test]
async fn a_contended_rejections_body_quotes_the_contention_wait_on_every_limit() {
    let result = with_faults(conflict, OnUnavailable::Allow).await;
    let Err(Error::RateLimitExceeded(e)) = result else {
        panic!("contended, got {result:?}");
    };
    let body = e.body();
    assert_eq!(body["retry_after_seconds"], serde_json::json!(0.1));
    assert_eq!(body["retry_after_ms"], serde_json::json!(100));
    let limits = body["limits"].as_array().expect("limits");
    assert!(!limits.is_empty());
    for limit in limits {
        assert_eq!(
            limit["retry_after_seconds"],
            serde_json::json!(0.1),
            "{limit}"
        );
        assert_eq!(limit["exceeded"], serde_json::json!(false), "{limit}");
    }
}

/// Shard 0 of `u1`'s bucket with its write budget spent far below what a
/// second refills, and `rpm` at `tokens`.
pub(crate) fn spent_shard(store: &MemoryStore, tokens: i64) {
    let mut item = bucket_with_vu(0);
    item.remove("vu");
    item.insert("PK".into(), Attr::s(bucket_pk("u1", 0)));
    item.insert("b_rpm_tk".into(), Attr::n(tokens));
    item.insert("shard_count".into(), Attr::n(1));
    for (f, v) in [
        ("tk", -10_000_000),
        ("cp", 1_000_000),
        ("ra", 1_000_000),
        ("rp", 1000),
        ("tc", 0),
    ] {
        item.insert(format!("b_wcu_{f}"), Attr::n(v));
    }
    store.insert(item);
}

#[tokio::test]
async fn a_spent_write_budget_doubles_the_shards_and_admits_on_a_new_shard() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    spent_shard(&store, 100_000);
    let limiter = open(Arc::clone(&store), &clock).await;
    let lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted on a new shard");
    assert_eq!(lease.entries()[0].key.shard, 1);
    lease.commit().await.expect("commit");
    assert_eq!(
        n(&bucket(&store, "u1"), "shard_count"),
        2,
        "shard 0 doubled"
    );
    let second = store
        .item(&bucket_pk("u1", 1), keys::SK_STATE)
        .expect("shard 1");
    assert_eq!(n(&second, "shard_count"), 2);
    // Half the capacity per shard, less the one consumed.
    assert_eq!(n(&second, "b_rpm_tk"), 49_000);
}

#[tokio::test]
async fn a_spent_write_budget_with_the_limit_spent_too_rejects_without_doubling() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(table(vec![limit("rpm", 100, false)]));
    spent_shard(&store, 0);
    let limiter = open(Arc::clone(&store), &clock).await;
    let err = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect_err("rpm is spent");
    assert!(matches!(err, Error::RateLimitExceeded(_)), "{err}");
    assert_eq!(n(&bucket(&store, "u1"), "shard_count"), 1, "no doubling");
}
