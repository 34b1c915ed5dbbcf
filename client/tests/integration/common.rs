//! The client's end-to-end tests' shared parts: a limiter on a moto table,
//! and the spec runner that drives `zae-client` through the same steps the
//! Python 0.17.0 client takes in `tests/harness/client_diff.py`, answering
//! in the same JSON.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::sync::Arc;
use zae_client::{DynamoStore, Error, Lease, ManualClock, Options, RateLimitExceeded, RateLimiter};
use zae_test_support::harness::{endpoint, run_json};

pub async fn sdk() -> aws_config::SdkConfig {
    let credentials =
        aws_sdk_dynamodb::config::Credentials::new("test", "test", None, None, "moto");
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(credentials)
        .load()
        .await
}

/// A limiter on `table` (namespace "default") with the differential's
/// settings: no config cache, stamp deadlines at 9/10 of their TTL, the
/// given clock.
pub async fn limiter(table: &str, clock: &ManualClock, stamp_ttl_ms: u64) -> RateLimiter {
    limiter_with_cache(table, clock, stamp_ttl_ms, 0).await
}

/// `limiter` with the rejection cache on for `cache_ttl_ms` (0: off), as a
/// spec's `rejection_cache_ttl_ms` opens both clients.
pub async fn limiter_with_cache(
    table: &str,
    clock: &ManualClock,
    stamp_ttl_ms: u64,
    cache_ttl_ms: u64,
) -> RateLimiter {
    let options = Options {
        config_cache_ttl: std::time::Duration::ZERO,
        stamp_ttl: std::time::Duration::from_millis(stamp_ttl_ms),
        clock: Arc::new(clock.clone()),
        stamp_draw: Some(0.9),
        // As client_diff.py opens the Python client.
        rejection_cache_ttl: std::time::Duration::from_millis(cache_ttl_ms),
        ..Options::default()
    };
    RateLimiter::open_with(&sdk().await, "default", table, options)
        .await
        .expect("open the namespace")
}

/// Milliseconds as the Python client reports them: `int(seconds * 1000)`
/// of `seconds = ms / 1000`, in floats.
pub fn python_ms(ms: i64) -> i64 {
    ((ms as f64 / 1000.0) * 1000.0) as i64
}

pub fn rejected(e: &RateLimitExceeded) -> Value {
    // In the order the client lists them, every field.
    let statuses: Vec<Value> = e
        .statuses
        .iter()
        .map(|s| {
            json!({"entity": s.entity, "resource": s.resource, "limit": s.limit,
                   "available": s.available, "requested": s.requested, "exceeded": s.exceeded,
                   "retry_after_ms": python_ms(s.retry_after_ms), "soft": s.soft,
                   "capacity": s.capacity, "refill_amount": s.refill_amount,
                   "refill_period_s": s.refill_period_s})
        })
        .collect();
    json!({"outcome": "rejected", "contended": e.contended,
           "retry_after_ms": python_ms(e.retry_after_ms()), "statuses": statuses})
}

fn error_answer(e: &Error) -> Value {
    match e {
        Error::RateLimitExceeded(r) => rejected(r),
        Error::ResourceDisabled {
            entity, resource, ..
        } => {
            json!({"outcome": "disabled", "entity": entity, "resource": resource})
        }
        Error::Validation(m) => {
            json!({"outcome": "error", "kind": "ValidationError", "message": m})
        }
        Error::NoLimits { .. } => {
            json!({"outcome": "error", "kind": "ValidationError", "message": e.to_string()})
        }
        Error::Unavailable(m) => {
            json!({"outcome": "error", "kind": "Unavailable", "message": m.to_string()})
        }
        other => json!({"outcome": "error", "kind": "Other", "message": other.to_string()}),
    }
}

fn amounts(v: &Value) -> Vec<(String, i64)> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

fn borrowed(a: &[(String, i64)]) -> Vec<(&str, i64)> {
    a.iter().map(|(n, v)| (n.as_str(), *v)).collect()
}

/// One lease operation of a step; the answer's entry for it. With
/// `"resource"`, on that resource's handle (`also`).
fn lease_op(lease: &mut Lease<DynamoStore>, op: &Value) -> Value {
    if let Some(resource) = op["resource"].as_str() {
        return resource_op(lease, resource, op);
    }
    if let Some(a) = op.get("adjust") {
        lease.adjust(&borrowed(&amounts(a)));
    } else if let Some(a) = op.get("release") {
        lease.release(&borrowed(&amounts(a)));
    } else if let Some(a) = op.get("consume")
        && let Err(e) = lease.consume(&borrowed(&amounts(a)))
    {
        return error_answer(&e);
    }
    json!("ok")
}

/// A lease operation on one resource of a multi-resource lease.
fn resource_op(lease: &mut Lease<DynamoStore>, resource: &str, op: &Value) -> Value {
    let mut handle = match lease.resource(resource) {
        Ok(handle) => handle,
        Err(e) => return error_answer(&e),
    };
    if let Some(a) = op.get("adjust") {
        handle.adjust(&borrowed(&amounts(a)));
    } else if let Some(a) = op.get("release") {
        handle.release(&borrowed(&amounts(a)));
    } else if let Some(a) = op.get("consume")
        && let Err(e) = handle.consume(&borrowed(&amounts(a)))
    {
        return error_answer(&e);
    }
    json!("ok")
}

/// A step with `also` (several resources): `acquire_many`, the primary
/// first, then `also`'s resources in the spec's order.
async fn acquire_also(limiter: &RateLimiter, step: &Value) -> Result<Lease<DynamoStore>, Error> {
    let entity = step["entity"].as_str().unwrap_or_default();
    let mut owned = vec![(
        step["resource"].as_str().unwrap_or_default().to_owned(),
        amounts(&step["consume"]),
    )];
    for (resource, consume) in step["also"].as_object().into_iter().flatten() {
        owned.push((resource.clone(), amounts(consume)));
    }
    let borrowed_parts: Vec<(&str, Vec<(&str, i64)>)> = owned
        .iter()
        .map(|(r, c)| (r.as_str(), borrowed(c)))
        .collect();
    let parts: Vec<(&str, &[(&str, i64)])> = borrowed_parts
        .iter()
        .map(|(r, c)| (*r, c.as_slice()))
        .collect();
    let limits = step.get("limits").map(override_limits);
    limiter
        .acquire_many(entity, &parts, limits.as_deref())
        .await
}

/// A step's `limits` (the `limits=` override), as client_diff.py's `to_limit`.
fn override_limits(v: &Value) -> Vec<zae_client::LimitConfig> {
    let int = |l: &Value, f: &str| l[f].as_i64().unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .map(|l| zae_client::LimitConfig {
            soft: l["soft"].as_bool().unwrap_or(false),
            ..zae_client::LimitConfig::drip(
                l["name"].as_str().unwrap_or_default(),
                int(l, "capacity"),
                int(l, "refill_amount"),
                int(l, "refill_period_s"),
            )
        })
        .collect()
}

/// One acquire step through zae-client: its answer, as client_diff.py's.
pub async fn acquire_step(limiter: &RateLimiter, step: &Value) -> Value {
    let entity = step["entity"].as_str().unwrap_or_default();
    let resource = step["resource"].as_str().unwrap_or_default();
    let consume = amounts(&step["consume"]);
    let acquired = match step.get("limits") {
        _ if step.get("also").is_some() => acquire_also(limiter, step).await,
        Some(limits) => {
            let limits = override_limits(limits);
            limiter
                .acquire_with_limits(entity, resource, &borrowed(&consume), &limits)
                .await
        }
        None => limiter.acquire(entity, resource, &borrowed(&consume)).await,
    };
    let mut lease = match acquired {
        Ok(lease) => lease,
        Err(e) => return error_answer(&e),
    };
    let ops: Vec<Value> = step["lease"]
        .as_array()
        .map(|ops| ops.iter().map(|op| lease_op(&mut lease, op)).collect())
        .unwrap_or_default();
    let mut overdrawn = lease.overdrawn();
    overdrawn.sort();
    if step["fail"].as_bool().unwrap_or(false) {
        lease.rollback().await;
    } else if let Err(e) = lease.commit().await {
        return error_answer(&e);
    }
    json!({"outcome": "admitted", "overdrawn": overdrawn, "lease": ops})
}

/// Prepares `table` from `spec` (a file) and runs every step through
/// zae-client: per step its answer and the buckets after it.
pub async fn run_rust(table: &str, spec_path: &str, spec: &Value) -> Vec<Value> {
    run_json(
        "client_diff.py",
        &["prepare", "--table", table, "--spec", spec_path],
    );
    let ttl = spec["stamp_ttl_ms"].as_u64().unwrap_or(60_000);
    let clock = ManualClock::new(spec["setup_at_ms"].as_i64().unwrap_or_default());
    let cache_ttl = spec["rejection_cache_ttl_ms"].as_u64().unwrap_or(0);
    let limiter = limiter_with_cache(table, &clock, ttl, cache_ttl).await;
    let mut out = Vec::new();
    for step in spec["steps"].as_array().into_iter().flatten() {
        let at = step["at_ms"].as_i64().unwrap_or_default();
        clock.set(at);
        let answer = if let Some(admin) = step.get("admin") {
            let at = at.to_string();
            let (ttl, admin) = (ttl.to_string(), admin.to_string());
            let args = [
                "admin",
                "--table",
                table,
                "--at-ms",
                &at,
                "--json",
                &admin,
                "--stamp-ttl-ms",
                &ttl,
            ];
            // The Python client clears its rejection cache on its own admin
            // writes; this one's admin runs in another process.
            limiter.clear_rejection_cache();
            run_json("client_diff.py", &args)
        } else {
            acquire_step(&limiter, &step["acquire"]).await
        };
        let buckets = run_json("client_diff.py", &["dump", "--table", table])["buckets"].clone();
        out.push(json!({"answer": answer, "buckets": buckets}));
    }
    out
}

/// A fresh table (namespace "default") with the spec's `setup` ops applied
/// by the real 0.17.0 client at `setup_at_ms`; its name.
pub fn prepared(name: &str, setup: Value, setup_at_ms: i64) -> String {
    let table = zae_test_support::harness::unique_table(name);
    let dir = zae_test_support::harness::TempDir::new(&table);
    let spec =
        json!({"stamp_ttl_ms": 60_000, "setup_at_ms": setup_at_ms, "setup": setup, "steps": []});
    let path = dir.file("spec.json");
    std::fs::write(&path, spec.to_string()).expect("write the spec");
    let path = path.to_string_lossy();
    run_json(
        "client_diff.py",
        &["prepare", "--table", &table, "--spec", &path],
    );
    table
}

/// The Python client's run of the same spec on its own table.
pub fn run_python(table: &str, spec_path: &str) -> Vec<Value> {
    run_json(
        "client_diff.py",
        &["prepare", "--table", table, "--spec", spec_path],
    );
    run_json(
        "client_diff.py",
        &["run", "--table", table, "--spec", spec_path],
    )["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Every `statuses` list in `answer` (an in-lease rejection's too), in one
/// order: by entity, resource and limit.
fn sort_statuses(answer: &mut Value) {
    match answer {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if let (true, Value::Array(statuses)) = (k == "statuses", &mut *v) {
                    statuses
                        .sort_by_key(|s| ["entity", "resource", "limit"].map(|k| s[k].to_string()));
                }
                sort_statuses(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sort_statuses),
        _ => {}
    }
}

/// Each step's answers and bucket items equal, attribute by attribute; the
/// first difference, named by step and attribute, otherwise.
pub fn first_difference(python: &[Value], rust: &[Value]) -> Option<String> {
    if python.len() != rust.len() {
        return Some(format!(
            "{} steps in Python, {} in Rust",
            python.len(),
            rust.len()
        ));
    }
    for (i, (p, r)) in python.iter().zip(rust).enumerate() {
        // Error texts are each client's own; their kinds must agree. The
        // statuses are compared as a set: the Python client lists them in
        // the order the table returns a bucket's attributes, which DynamoDB
        // leaves unspecified (moto keeps the order they were written in,
        // DynamoDB Local does not).
        let answer = |v: &Value| {
            let mut a = v["answer"].clone();
            a.as_object_mut().map(|m| m.remove("message"));
            sort_statuses(&mut a);
            a
        };
        if answer(p) != answer(r) {
            return Some(format!(
                "step {i}: answers differ\n python: {}\n rust:   {}",
                p["answer"], r["answer"]
            ));
        }
        let (pb, rb) = (p["buckets"].as_array(), r["buckets"].as_array());
        let (pb, rb) = (
            pb.cloned().unwrap_or_default(),
            rb.cloned().unwrap_or_default(),
        );
        if pb.len() != rb.len() {
            return Some(format!(
                "step {i}: {} buckets in Python, {} in Rust",
                pb.len(),
                rb.len()
            ));
        }
        for (pi, ri) in pb.iter().zip(&rb) {
            let keys: std::collections::BTreeSet<&String> = pi
                .as_object()
                .into_iter()
                .chain(ri.as_object())
                .flat_map(|m| m.keys())
                .collect();
            for k in keys {
                if pi.get(k) != ri.get(k) {
                    return Some(format!(
                        "step {i}: bucket {} attribute {k}: python {:?}, rust {:?}",
                        pi["PK"],
                        pi.get(k),
                        ri.get(k)
                    ));
                }
            }
        }
    }
    None
}
