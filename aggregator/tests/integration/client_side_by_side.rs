//! Python 0.17.0 clients and zae-client on the same bucket at the same
//! time, then this build's aggregator over the stream: together the clients
//! never admit more than the hard limit allows, the bucket counts exactly
//! what both consumed (soft debt included), and the usage snapshots equal
//! it.

use crate::common::poll;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zae_client::{Error, Options, RateLimiter};
use zae_test_support::harness::{
    TempDir, endpoint, repo_root, run_json, run_json_at, unique_table,
};

/// `rpm` 40 a day, hard: the refill during the run is a few millitokens.
/// `tpm` 100 a day, soft. The entity and resource `client.py read` reads.
const CAPACITY: i64 = 40;
const REQUESTS: usize = 50;
const ENTITY: &str = "key-a";
const RESOURCE: &str = "gpt-4";

pub(crate) async fn limiter(table: &str) -> RateLimiter {
    let credentials =
        aws_sdk_dynamodb::config::Credentials::new("test", "test", None, None, "moto");
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(credentials)
        .load()
        .await;
    RateLimiter::open_with(&sdk, "default", table, Options::default())
        .await
        .expect("open the namespace")
}

/// `requests` acquires of rpm=1, tpm=10 over `concurrency` tasks, each
/// committed at once: (admitted, rejected).
async fn rust_load(limiter: RateLimiter, requests: usize, concurrency: usize) -> (i64, i64) {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (limiter, next) = (limiter.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                let (mut admitted, mut rejected) = (0, 0);
                while next.fetch_add(1, Ordering::SeqCst) < requests {
                    match limiter
                        .acquire(ENTITY, RESOURCE, &[("rpm", 1), ("tpm", 10)])
                        .await
                    {
                        Ok(lease) => {
                            lease.commit().await.expect("commit");
                            admitted += 1;
                        }
                        Err(Error::RateLimitExceeded(_)) => rejected += 1,
                        Err(e) => panic!("acquire: {e}"),
                    }
                }
                (admitted, rejected)
            })
        })
        .collect();
    let mut total = (0, 0);
    for worker in workers {
        let (a, r) = worker.await.expect("a worker");
        total = (total.0 + a, total.1 + r);
    }
    total
}

fn daily(read: &Value, field: &str) -> (i64, i64) {
    let mut sum = (0, 0);
    for snap in read["entities"][ENTITY]["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if snap["window"] == "daily" {
            sum.0 += snap[field]["rpm"].as_i64().unwrap_or_default();
            sum.1 += snap[field]["tpm"].as_i64().unwrap_or_default();
        }
    }
    sum
}

/// Waits until `path` exists, or fails if `load` ends (or a minute passes) first.
pub(crate) fn wait_for_file<T>(path: &std::path::Path, load: &std::thread::JoinHandle<T>) {
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(
            !load.is_finished(),
            "the Python load ended before it was ready"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the Python load was not ready within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_clients_on_one_bucket_stay_within_the_limit_and_snapshots_count_both() {
    let table = unique_table("side-by-side");
    let spec = repo_root().join("tests/harness/client_diff/side_by_side.json");
    let spec = spec.to_string_lossy();
    run_json(
        "client_diff.py",
        &["prepare", "--table", &table, "--spec", &spec],
    );
    let limiter = limiter(&table).await;
    let py_table = table.clone();
    // The backend is the test thread's: the Python load's thread is told it.
    let at = endpoint();
    let dir = TempDir::new(&table);
    let ready = dir.file("python-ready");
    let py_ready = ready.to_string_lossy().into_owned();
    let python = std::thread::spawn(move || {
        let requests = REQUESTS.to_string();
        let args = [
            "--table",
            &py_table,
            "--entity",
            ENTITY,
            "--resource",
            RESOURCE,
            "--consume",
            "rpm=1,tpm=10",
            "--requests",
            &requests,
            "--concurrency",
            "4",
            "--ready-file",
            &py_ready,
        ];
        run_json_at(at, "client_load.py", &args)
    });
    // Both loads start together: the Python client's start-up (its process,
    // its namespace read) would otherwise let a fast backend serve all 40
    // tokens to the Rust tasks first (seen on DynamoDB Local 3.3.1).
    wait_for_file(&ready, &python);
    let (rust_admitted, rust_rejected) = rust_load(limiter, REQUESTS, 4).await;
    let python = python.join().expect("the Python load");
    assert_eq!(python["errors"], 0, "{python}");
    assert_eq!(rust_admitted + rust_rejected, REQUESTS as i64);
    let py_admitted = python["admitted"].as_i64().expect("admitted");
    let admitted = py_admitted + rust_admitted;
    assert!(
        admitted <= CAPACITY,
        "{admitted} admitted over a capacity of {CAPACITY}: python {python}"
    );
    assert!(
        py_admitted > 0 && rust_admitted > 0,
        "python {py_admitted}, rust {rust_admitted}"
    );

    poll(&table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);
    let read = run_json("client.py", &["read", "--table", &table]);
    let bucket = &read["entities"][ENTITY]["buckets"];
    assert_eq!(bucket["rpm"]["consumed_milli"], admitted * 1000, "{bucket}");
    assert_eq!(
        bucket["tpm"]["consumed_milli"],
        admitted * 10_000,
        "{bucket}"
    );
    assert!(
        bucket["tpm"]["tokens_milli"].as_i64() < Some(0),
        "soft debt, never a rejection: {bucket}"
    );
    assert_eq!(
        daily(&read, "counters"),
        (admitted, admitted * 10),
        "the snapshots count both clients"
    );
}

zae_test_support::also_on_dynamodb_local!(
    python_and_rust_clients_on_one_bucket_stay_within_the_limit_and_snapshots_count_both
);
