//! Python 0.17.0 clients and zae-client on the same bucket at the same
//! time: together they never admit more than the hard limit allows, and
//! the bucket counts exactly what both consumed, soft debt included.

mod common;

use std::sync::Arc;
use zae_client::{Error, Options, RateLimiter};
use zae_test_support::harness::{repo_root, run_json, unique_table};

/// Capacity 40 a day: the refill during the run is a few millitokens.
const CAPACITY: i64 = 40;
const REQUESTS: usize = 50;

async fn rust_load(limiter: RateLimiter, requests: usize, concurrency: usize) -> (i64, i64) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers = (0..concurrency).map(|_| {
        let (limiter, next) = (limiter.clone(), Arc::clone(&next));
        tokio::spawn(async move {
            let (mut admitted, mut rejected) = (0, 0);
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < requests {
                match limiter
                    .acquire("shared", "gpt", &[("rpm", 1), ("tpm", 10)])
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
    });
    let mut total = (0, 0);
    for worker in workers.collect::<Vec<_>>() {
        let (a, r) = worker.await.expect("a worker");
        total = (total.0 + a, total.1 + r);
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_clients_on_one_bucket_admit_no_more_than_the_limit_and_count_everything() {
    let table = unique_table("side-by-side");
    let spec = repo_root().join("tests/harness/client_diff/side_by_side.json");
    run_json(
        "client_diff.py",
        &[
            "prepare",
            "--table",
            &table,
            "--spec",
            &spec.to_string_lossy(),
        ],
    );
    let options = Options::default();
    let limiter = RateLimiter::open_with(&common::sdk().await, "default", &table, options)
        .await
        .expect("open");
    let py_table = table.clone();
    let python = std::thread::spawn(move || {
        let requests = REQUESTS.to_string();
        run_json(
            "client_load.py",
            &[
                "--table",
                &py_table,
                "--entity",
                "shared",
                "--resource",
                "gpt",
                "--consume",
                "rpm=1,tpm=10",
                "--requests",
                &requests,
                "--concurrency",
                "4",
            ],
        )
    });
    let (rust_admitted, rust_rejected) = rust_load(limiter, REQUESTS, 4).await;
    let python = python.join().expect("the Python load");
    let py_admitted = python["admitted"].as_i64().expect("admitted");
    assert_eq!(python["errors"], 0, "{python}");
    assert_eq!(rust_admitted + rust_rejected, REQUESTS as i64);
    let admitted = py_admitted + rust_admitted;
    assert!(
        admitted <= CAPACITY,
        "{admitted} admitted over a capacity of {CAPACITY} (python {python})"
    );
    assert!(
        py_admitted > 0 && rust_admitted > 0,
        "both clients were admitted: python {py_admitted}, rust {rust_admitted}"
    );
    let buckets = run_json("client_diff.py", &["dump", "--table", &table])["buckets"].clone();
    let bucket = &buckets[0];
    let n = |attr: &str| {
        bucket[attr]["N"]
            .as_str()
            .and_then(|s| s.parse::<i64>().ok())
            .expect(attr)
    };
    assert_eq!(
        n("b_rpm_tc"),
        admitted * 1000,
        "every admission counted once: {bucket}"
    );
    assert_eq!(
        n("b_tpm_tc"),
        admitted * 10_000,
        "the soft limit counted too: {bucket}"
    );
    assert!(
        n("b_tpm_tk") < 0,
        "the soft limit went into debt and never rejected: {bucket}"
    );
}
