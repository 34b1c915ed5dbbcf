//! How acquires and leases end, on the in-memory twin: an acquire whose
//! caller stops waiting (a dropped future: a client that hung up on an HTTP
//! server, a timeout, a `select!` that took another branch) leaves no debit
//! behind; a dropped lease commits, one dropped by a panic rolls back;
//! `acquire_with` commits on `Ok` and rolls back on `Err`. A slow write is
//! injected at the store seam, on tokio's paused clock. And a table that
//! never answers ends an `open` in time, on a real socket.

use crate::memory::{T0, bucket, limit, n, open, table};
use crate::others::meta;
use std::sync::Arc;
use std::time::Duration;
use zae_client::ManualClock;
use zae_client::RateLimiter;
use zae_test_support::faults::{Call, Faults, Injected};
use zae_test_support::memory::MemoryStore;

/// Every write to `org`'s bucket takes 10 s.
struct SlowParent;

impl Faults for SlowParent {
    fn delay(&self, call: &Call<'_>) -> Option<Duration> {
        match call {
            Call::Update(u) if u.pk.contains("#org#") => Some(Duration::from_secs(10)),
            _ => None,
        }
    }
}

/// `kid` cascades to `org`; a first acquire, committed, warms the limiter
/// (it now writes both buckets at once). The second acquire is dropped
/// after `kid`'s debit landed and while `org`'s is in flight: both buckets
/// end as the first acquire left them. Before, `kid` kept the debit.
#[tokio::test(start_paused = true)]
async fn an_acquire_dropped_midway_leaves_no_debit_on_the_child_or_the_parent() {
    let clock = ManualClock::new(T0);
    let memory = Arc::new(table(vec![limit("rpm", 100, false)]));
    memory.insert(meta("org", None));
    memory.insert(meta("kid", Some("org")));
    let limiter = open(Arc::clone(&memory), &clock).await;
    let first = limiter.acquire("kid", "gpt", &[("rpm", 1)]).await;
    first.expect("admitted").commit().await.expect("commit");
    let state = |m: &MemoryStore| {
        ["kid", "org"].map(|e| {
            let b = bucket(m, e);
            (n(&b, "b_rpm_tk"), n(&b, "b_rpm_tc"))
        })
    };
    let before = state(&memory);
    let slow = crate::memory::open(
        Injected {
            inner: Arc::clone(&memory),
            faults: SlowParent,
        },
        &clock,
    )
    .await;
    slow.acquire("kid", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted (learns the cascade)")
        .rollback()
        .await;
    assert_eq!(state(&memory), before, "an explicit rollback restores both");
    let dropped = tokio::time::timeout(
        Duration::from_secs(1),
        slow.acquire("kid", "gpt", &[("rpm", 5)]),
    )
    .await;
    assert!(dropped.is_err(), "the caller stopped waiting");
    assert_ne!(
        state(&memory),
        before,
        "kid's debit landed, org's is in flight"
    );
    // The acquire's own task finishes and gives everything back: polled on
    // tokio's clock, which runs ahead whenever every task waits.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while state(&memory) != before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still debited: {:?} against {before:?}",
            state(&memory)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `u1`'s `rpm` balance and count, millitokens.
fn rpm(memory: &MemoryStore) -> (i64, i64) {
    let b = bucket(memory, "u1");
    (n(&b, "b_rpm_tk"), n(&b, "b_rpm_tc"))
}

/// Polls (on tokio's clock) until `u1`'s `rpm` reads `want`: a dropped
/// lease writes on a task of its own.
async fn settles(memory: &MemoryStore, want: (i64, i64), what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while rpm(memory) != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {:?}, not {want:?}",
            rpm(memory)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn limited(clock: &ManualClock) -> (Arc<MemoryStore>, RateLimiter<Arc<MemoryStore>>) {
    let memory = Arc::new(table(vec![limit("rpm", 100, false)]));
    let limiter = open(Arc::clone(&memory), clock).await;
    (memory, limiter)
}

/// A lease dropped without `commit` writes its adjustments in the
/// background; one dropped while a panic unwinds gives its debit back.
#[tokio::test(start_paused = true)]
async fn a_dropped_lease_commits_and_one_dropped_by_a_panic_rolls_back() {
    let clock = ManualClock::new(T0);
    let (memory, limiter) = limited(&clock).await;
    let mut lease = limiter
        .acquire("u1", "gpt", &[("rpm", 1)])
        .await
        .expect("admitted");
    lease.adjust(&[("rpm", 2)]);
    drop(lease);
    settles(&memory, (97_000, 3_000), "the dropped lease's adjustment").await;
    let panicking = limiter.clone();
    let task = tokio::spawn(async move {
        let _lease = panicking.acquire("u1", "gpt", &[("rpm", 5)]).await;
        panic!("injected: the work failed");
    });
    assert!(task.await.expect_err("it panicked").is_panic());
    settles(
        &memory,
        (97_000, 3_000),
        "the panicked lease's debit given back",
    )
    .await;
}

/// `acquire_with`: the work's `Ok` commits its adjustments, its `Err`
/// rolls the debit back; either way the work's answer comes back.
#[tokio::test(start_paused = true)]
async fn acquire_with_commits_on_ok_and_rolls_back_on_err() {
    let clock = ManualClock::new(T0);
    let (memory, limiter) = limited(&clock).await;
    let ok = limiter
        .acquire_with("u1", "gpt", &[("rpm", 1)], async |lease| {
            lease.adjust(&[("rpm", 1)]);
            Ok::<_, String>("done")
        })
        .await
        .expect("admitted");
    assert_eq!(ok, Ok("done"));
    assert_eq!(
        rpm(&memory),
        (98_000, 2_000),
        "committed before it returned"
    );
    let failed = limiter
        .acquire_with("u1", "gpt", &[("rpm", 7)], async |_lease| {
            Err::<(), _>("the model failed")
        })
        .await
        .expect("admitted");
    assert_eq!(failed, Err("the model failed"));
    assert_eq!(
        rpm(&memory),
        (98_000, 2_000),
        "rolled back before it returned"
    );
}

/// `open`'s SDK configuration bounds every request: its connect and the
/// whole operation (retries included); no attempt is cut short, since one
/// that landed would be sent again.
#[tokio::test]
async fn open_bounds_every_request_in_time() {
    let sdk = zae_client::sdk_config().await;
    let t = sdk.timeout_config().expect("timeouts");
    assert_eq!(
        (
            t.connect_timeout(),
            t.operation_attempt_timeout(),
            t.operation_timeout()
        ),
        (
            Some(zae_client::CONNECT_TIMEOUT),
            None,
            Some(zae_client::OPERATION_TIMEOUT)
        )
    );
}

/// A table endpoint that accepts connections and never answers: with the
/// bounds of `open` (shortened here, as `open_with` allows), `open` ends
/// with `Unavailable` instead of holding its caller.
#[tokio::test]
async fn a_table_that_never_answers_is_unavailable_not_a_hang() {
    use zae_client::aws_config::timeout::TimeoutConfig;
    let (endpoint, held) = zae_test_support::harness::silent_endpoint().await;
    let short = TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(200))
        .operation_attempt_timeout(Duration::from_millis(300))
        .operation_timeout(Duration::from_millis(900))
        .build();
    let sdk = zae_client::sdk_config()
        .await
        .to_builder()
        .endpoint_url(endpoint)
        .timeout_config(short)
        .build();
    let opened = RateLimiter::open_with(&sdk, "default", "t", Default::default());
    let opened = tokio::time::timeout(Duration::from_secs(20), opened)
        .await
        .expect("the SDK gives up by itself");
    held.abort();
    assert!(
        matches!(opened, Err(zae_client::Error::Unavailable(_))),
        "{:?}",
        opened.err()
    );
}
