//! The side-by-side test with a calendar quota, a schedule and a duration
//! window in play: Python 0.17.0 clients and zae-client on one bucket (one
//! shard) at the same time, each request spending one of the three limits.
//! Together they never admit more than each limit allows over the run's
//! real instants, the bucket's `tc` counts what both consumed, and this
//! build's aggregator's snapshots equal it.

use crate::client_side_by_side::{limiter, wait_for_file};
use crate::common::poll;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use zae_client::{Error, RateLimiter};
use zae_test_support::harness::{
    TempDir, endpoint, repo_root, run_json, run_json_at, unique_table,
};

const ENTITY: &str = "key-a";
const RESOURCE: &str = "gpt-4";
/// The limits of `side_by_side_limits.json`, in its order: each request
/// spends 1 of one of them, request `i` the `i % 3`th.
/// - `day`: a quota of 12 reset at 00:00 UTC (`Limit.quota`, `cron=`);
/// - `sched`: 1000 a minute, but a schedule in force at every minute puts
///   a capacity of 12 refilled 6 a minute in its place;
/// - `win`: a duration window of 12 per hour (`reset_after=`).
const LIMITS: [&str; 3] = ["day", "sched", "win"];
const CAPACITY: i64 = 12;
const SCHED_REFILL_PER_MIN: i64 = 6;
const WINDOW_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;
/// Per client: 20 a limit, so the two together ask each for 40, over three
/// times what it allows.
const REQUESTS: usize = 60;

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970");
    i64::try_from(since.as_millis()).expect("milliseconds fit i64")
}

/// What each limit allows, in millitokens, to a run from `start` to `end`
/// (wall-clock ms): the quota's 12 once more for each 00:00 UTC crossed;
/// the schedule's 12 plus its refill over the run; the window's 12 once
/// more for each hour the run outlasts (a window opens at a first use, so
/// no earlier than `start`).
fn allowance_milli(start: i64, end: i64) -> [i64; 3] {
    let run = end - start;
    let resets = end / DAY_MS - start / DAY_MS;
    let windows = 1 + run / WINDOW_MS;
    [
        (1 + resets) * CAPACITY * 1000,
        CAPACITY * 1000 + SCHED_REFILL_PER_MIN * 1000 * run / 60_000,
        windows * CAPACITY * 1000,
    ]
}

/// `requests` acquires over `concurrency` tasks, request `i` spending 1 of
/// `LIMITS[i % 3]`, each committed at once: admitted per limit, rejected.
async fn rust_load(limiter: RateLimiter, requests: usize, concurrency: usize) -> ([i64; 3], i64) {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (limiter, next) = (limiter.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let (mut admitted, mut rejected) = ([0; 3], 0);
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= requests {
                        break;
                    }
                    let kind = i % LIMITS.len();
                    match limiter
                        .acquire(ENTITY, RESOURCE, &[(LIMITS[kind], 1)])
                        .await
                    {
                        Ok(lease) => {
                            lease.commit().await.expect("commit");
                            admitted[kind] += 1;
                        }
                        Err(Error::RateLimitExceeded(_)) => rejected += 1,
                        Err(e) => panic!("acquire {}: {e}", LIMITS[kind]),
                    }
                }
                (admitted, rejected)
            })
        })
        .collect();
    let (mut admitted, mut rejected) = ([0; 3], 0);
    for worker in workers {
        let (a, r) = worker.await.expect("a worker");
        for (total, one) in admitted.iter_mut().zip(a) {
            *total += one;
        }
        rejected += r;
    }
    (admitted, rejected)
}

/// The Python load (4 tasks, `REQUESTS` requests), started on its own
/// thread; it creates `ready` once its namespace is open.
fn python_load(table: &str, ready: &std::path::Path) -> std::thread::JoinHandle<Value> {
    let (table, ready) = (table.to_owned(), ready.to_string_lossy().into_owned());
    // The backend is the test thread's: the Python load's thread is told it.
    let at = endpoint();
    std::thread::spawn(move || {
        let requests = REQUESTS.to_string();
        let args = [
            "--table",
            &table,
            "--entity",
            ENTITY,
            "--resource",
            RESOURCE,
            "--consume",
            "day=1;sched=1;win=1",
            "--requests",
            &requests,
            "--concurrency",
            "4",
            "--ready-file",
            &ready,
        ];
        run_json_at(at, "client_load.py", &args)
    })
}

/// The daily snapshots' counters of `limit`, summed.
fn daily(read: &Value, limit: &str) -> i64 {
    read["entities"][ENTITY]["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|snap| snap["window"] == "daily")
        .map(|snap| snap["counters"][limit].as_i64().unwrap_or_default())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_clients_stay_within_a_quota_a_schedule_and_a_window_and_snapshots_count_both()
 {
    let table = unique_table("sbs-limits");
    let spec = repo_root().join("tests/harness/client_diff/side_by_side_limits.json");
    let spec = spec.to_string_lossy();
    run_json(
        "client_diff.py",
        &["prepare", "--table", &table, "--spec", &spec],
    );
    let limiter = limiter(&table).await;
    let dir = TempDir::new(&table);
    let ready = dir.file("python-ready");
    let start = now_ms();
    let python = python_load(&table, &ready);
    wait_for_file(&ready, &python);
    let (rust_admitted, rust_rejected) = rust_load(limiter, REQUESTS, 4).await;
    let python = python.join().expect("the Python load");
    let end = now_ms();
    assert_eq!(python["errors"], 0, "{python}");
    assert_eq!(
        rust_admitted.iter().sum::<i64>() + rust_rejected,
        REQUESTS as i64
    );
    let allowance = allowance_milli(start, end);
    let mut admitted = [0; 3];
    for (k, limit) in LIMITS.iter().enumerate() {
        let py = python["admitted_by"][k].as_i64().expect("admitted_by");
        admitted[k] = py + rust_admitted[k];
        assert!(
            admitted[k] * 1000 <= allowance[k],
            "{limit}: {} admitted (python {py}, rust {}) over an allowance of {} milli \
             in {} ms: python {python}",
            admitted[k],
            rust_admitted[k],
            allowance[k],
            end - start
        );
        // Both ask 20 of each: the run exhausts every limit.
        assert!(
            admitted[k] >= CAPACITY,
            "{limit}: only {} admitted",
            admitted[k]
        );
    }
    let py_total = python["admitted"].as_i64().expect("admitted");
    assert!(
        py_total > 0 && rust_admitted.iter().sum::<i64>() > 0,
        "python {python}, rust {rust_admitted:?}"
    );

    poll(&table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);
    let read = run_json("client.py", &["read", "--table", &table]);
    let bucket = &read["entities"][ENTITY]["buckets"];
    for (k, limit) in LIMITS.iter().enumerate() {
        assert_eq!(
            bucket[limit]["consumed_milli"],
            admitted[k] * 1000,
            "{limit}'s tc counts both clients: {bucket}"
        );
        assert_eq!(
            daily(&read, limit),
            admitted[k],
            "the snapshots count both clients' {limit}"
        );
    }
}

zae_test_support::also_on_dynamodb_local!(
    python_and_rust_clients_stay_within_a_quota_a_schedule_and_a_window_and_snapshots_count_both
);
