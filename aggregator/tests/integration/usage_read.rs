//! Usage snapshots this build's aggregator wrote, from acquires by the
//! Python 0.17.0 client and by zae-client, read back by both clients'
//! `get_usage_snapshots` with the same filters and page sizes: the same
//! records on the same pages, the same `get_usage_summary`, and a page key
//! from either continues in the other (`tests/harness/entity_client.py` is the Python side).

use crate::common::poll;
use serde_json::{Value, json};
use zae_client::{
    AdminError, Options, PageKey, RateLimiter, UsageQuery, UsageSnapshot, UsageSummary,
};
use zae_test_support::harness::{TempDir, endpoint, run_json, unique_table};

async fn limiter(table: &str) -> RateLimiter {
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

/// A table whose system level allows 1,000 rpm on any resource.
fn prepare(table: &str, dir: &TempDir) {
    let rpm =
        json!({"name": "rpm", "capacity": 1000, "refill_amount": 1000, "refill_period_s": 60});
    let spec = json!({"stamp_ttl_ms": 60_000, "setup_at_ms": 0, "steps": [],
                      "setup": [{"op": "limits", "level": "system", "limits": [rpm]}]});
    let path = dir.file("spec.json");
    std::fs::write(&path, spec.to_string()).expect("write the spec");
    let path = path.to_string_lossy();
    run_json(
        "client_diff.py",
        &["prepare", "--table", table, "--spec", &path],
    );
}

fn snapshot_json(s: &UsageSnapshot) -> Value {
    json!({"entity_id": s.entity_id, "resource": s.resource, "window_start": s.window_start,
           "window_end": s.window_end, "window_type": s.window_type, "counters": s.counters,
           "total_events": s.total_events, "overdrawn": s.overdrawn})
}

fn summary_json(s: &UsageSummary) -> Value {
    let total: serde_json::Map<String, Value> = s
        .total
        .iter()
        .map(|(k, v)| (k.clone(), json!(i64::try_from(*v).expect("a test's sum"))))
        .collect();
    json!({"snapshot_count": s.snapshot_count, "total": total, "average": s.average,
           "min_window_start": s.min_window_start, "max_window_start": s.max_window_start})
}

fn page_key_json(key: Option<&PageKey>) -> Value {
    key.map_or(Value::Null, |k| {
        serde_json::from_str(&k.to_json()).expect("JSON")
    })
}

/// The Python side's arguments for `q` (its page key left out).
fn py_args(q: &UsageQuery) -> Vec<String> {
    let mut args = vec!["--limit".to_owned(), q.limit.to_string()];
    for (flag, value) in [
        ("--entity", &q.entity_id),
        ("--resource", &q.resource),
        ("--window", &q.window_type),
        ("--start", &q.start_time),
        ("--end", &q.end_time),
    ] {
        if let Some(v) = value {
            args.extend([flag.to_owned(), v.clone()]);
        }
    }
    args
}

fn py(command: &str, table: &str, args: &[String]) -> Value {
    let mut all = vec![command, "--table", table];
    all.extend(args.iter().map(String::as_str));
    run_json("entity_client.py", &all)
}

/// Every page of `q` through zae-client, as the Python side prints them.
async fn rust_pages(limiter: &RateLimiter, q: &UsageQuery) -> Value {
    let mut q = q.clone();
    let mut pages = Vec::new();
    loop {
        let (snapshots, next) = limiter.get_usage_snapshots(&q).await.expect("a page");
        let snapshots: Vec<Value> = snapshots.iter().map(snapshot_json).collect();
        pages.push(json!({"snapshots": snapshots, "next_key": page_key_json(next.as_ref())}));
        match next {
            Some(next) => q.next_key = Some(next),
            None => return Value::from(pages),
        }
    }
}

async fn acquire(limiter: &RateLimiter, entity: &str, resource: &str, times: usize) {
    for _ in 0..times {
        let lease = limiter
            .acquire(entity, resource, &[("rpm", 1)])
            .await
            .expect("admitted");
        lease.commit().await.expect("commit");
    }
}

fn query(entity: Option<&str>, resource: Option<&str>, limit: u32) -> UsageQuery {
    UsageQuery {
        entity_id: entity.map(str::to_owned),
        resource: resource.map(str::to_owned),
        limit,
        ..UsageQuery::default()
    }
}

#[tokio::test]
async fn snapshots_read_by_both_clients_give_the_same_records_on_the_same_pages() {
    let table = unique_table("usage-read");
    let dir = TempDir::new(&table);
    prepare(&table, &dir);
    let limiter = limiter(&table).await;
    for entity in ["key-py", "key-both"] {
        let args = [
            "--entity",
            entity,
            "--resource",
            "gpt",
            "--consume",
            "rpm=2",
        ]
        .map(str::to_owned);
        assert_eq!(py("acquire", &table, &args)["outcome"], "admitted");
    }
    acquire(&limiter, "key-both", "gpt", 3).await;
    acquire(&limiter, "key-both", "embed", 1).await;
    acquire(&limiter, "key-rs", "gpt", 1).await;
    poll(&table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);

    let mut queries = Vec::new();
    for limit in [1, 2, 100] {
        queries.push(query(Some("key-both"), None, limit));
        queries.push(query(Some("key-both"), Some("gpt"), limit));
        queries.push(query(None, Some("gpt"), limit));
    }
    let mut daily = query(None, Some("gpt"), 2);
    daily.window_type = Some("daily".into());
    let mut future = query(Some("key-both"), None, 3);
    future.start_time = Some("2999-01-01T00:00:00Z".into());
    let mut past = query(Some("key-both"), None, 3);
    (past.start_time, past.end_time) = (
        Some("2000-01-01T00:00:00Z".into()),
        Some("2999-01-01T00:00:00Z".into()),
    );
    queries.extend([daily, future, past]);
    for q in &queries {
        let rust = rust_pages(&limiter, q).await;
        assert_eq!(rust, py("pages", &table, &py_args(q)), "{q:?}");
        let summary = limiter.get_usage_summary(q).await.expect("summary");
        let python = py("summary", &table, &py_args(q)[2..]);
        assert_eq!(summary_json(&summary), python, "{q:?}");
    }
    // What the aggregator counted: key-both's gpt windows hold 2 + 3 rpm.
    let (all, _) = limiter
        .get_usage_snapshots(&query(Some("key-both"), Some("gpt"), 100))
        .await
        .expect("read");
    assert!(!all.is_empty());
    assert!(
        all.iter().all(|s| s.counters.get("rpm") == Some(&5)),
        "{all:?}"
    );

    // A page begun by one client goes on in the other.
    let first = query(None, Some("gpt"), 1);
    let (_, rust_key) = limiter.get_usage_snapshots(&first).await.expect("page 1");
    let rust_key = rust_key.expect("more than one page");
    let mut args = py_args(&first);
    args.extend(["--next-key".to_owned(), rust_key.to_json()]);
    let python_page = py("usage", &table, &args);
    let python_key = PageKey::from_json(&python_page["next_key"].to_string()).expect("a key");
    let second = UsageQuery {
        next_key: Some(rust_key),
        ..first.clone()
    };
    let (snapshots, rust_next) = limiter.get_usage_snapshots(&second).await.expect("page 2");
    let snapshots: Vec<Value> = snapshots.iter().map(snapshot_json).collect();
    assert_eq!(python_page["snapshots"], Value::from(snapshots));
    assert_eq!(rust_next.as_ref(), Some(&python_key));

    // A key from another query is refused, naming it; so is no scope at all.
    let wrong = UsageQuery {
        next_key: Some(python_key),
        ..query(Some("key-both"), None, 1)
    };
    let refused = limiter.get_usage_snapshots(&wrong).await;
    assert!(
        matches!(
            &refused,
            Err(AdminError::Validation {
                what: "next_key",
                ..
            })
        ),
        "{refused:?}"
    );
    let refused = limiter.get_usage_snapshots(&query(None, None, 1)).await;
    assert!(
        matches!(&refused, Err(AdminError::Validation { why, .. }) if why.contains("entity_id or resource")),
        "{refused:?}"
    );
}

zae_test_support::also_on_dynamodb_local!(
    snapshots_read_by_both_clients_give_the_same_records_on_the_same_pages
);
