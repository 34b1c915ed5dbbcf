//! The client's end-to-end tests' shared parts: a limiter on a moto table,
//! and the spec runner that drives `zae-client` through the same steps the
//! Python 0.17.0 client takes in `tests/harness/client_diff.py`, answering
//! in the same JSON.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use zae_client::{DynamoStore, Error, Lease, ManualClock, Options, RateLimiter};
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

/// A limiter as [`limiter`] makes it, its shard draws pinned to `draw`
/// (each picks candidate `draw % candidates`, as client_diff.py pins the
/// Python client's).
pub async fn pinned_limiter(
    table: &str,
    clock: &ManualClock,
    (stamp_ttl_ms, cache_ttl_ms): (u64, u64),
    draw: Arc<AtomicUsize>,
) -> RateLimiter {
    let options = Options {
        config_cache_ttl: std::time::Duration::ZERO,
        stamp_ttl: std::time::Duration::from_millis(stamp_ttl_ms),
        clock: Arc::new(clock.clone()),
        stamp_draw: Some(0.9),
        shard_draw: Some(Arc::new(move |n| draw.load(Ordering::SeqCst) % n)),
        // As client_diff.py opens the Python client.
        rejection_cache_ttl: std::time::Duration::from_millis(cache_ttl_ms),
        ..Options::default()
    };
    RateLimiter::open_with(&sdk().await, "default", table, options)
        .await
        .expect("open the namespace")
}

/// Each zae-client error and the class the 0.17.0 client raises for it,
/// one to one. Python's `ValidationError` is told apart by its `field`:
/// "limits" is the operator's configuration (no limits at any level,
/// `NoLimits` here), any other field the request (`Validation`). Python
/// has no counterpart of `Unsupported`: any is a difference.
pub const KINDS: &[(&str, &str)] = &[
    ("RateLimitExceeded", "RateLimitExceeded"),
    ("ResourceDisabled", "ResourceDisabled"),
    ("Validation", "ValidationError"),
    ("NoLimits", "ValidationError(field=limits)"),
    ("PermissionDenied", "PermissionDenied"),
    ("Unavailable", "RateLimiterUnavailable"),
    ("UnknownNamespace", "NamespaceNotFoundError"),
];

/// The variant's name, as `KINDS` lists it.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::RateLimitExceeded(_) => "RateLimitExceeded",
        Error::ResourceDisabled { .. } => "ResourceDisabled",
        Error::Validation(_) => "Validation",
        Error::NoLimits { .. } => "NoLimits",
        Error::Unsupported { .. } => "Unsupported",
        Error::PermissionDenied(_) => "PermissionDenied",
        Error::Unavailable(_) => "Unavailable",
        Error::UnknownNamespace(_) => "UnknownNamespace",
    }
}

/// Every float as the `repr()` string client_diff.py writes for it
/// (`{:?}` prints the shortest string that reads back as the same float,
/// as `repr` does, in the range a wait takes).
pub fn exact(v: Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => {
            Value::String(format!("{:?}", n.as_f64().unwrap_or_default()))
        }
        Value::Array(items) => Value::Array(items.into_iter().map(exact).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, exact(v))).collect()),
        other => other,
    }
}

/// A refusal as client_diff.py answers one: the kind by the variant's own
/// name, a rejection's `body()` with its `message` taken out, a disabled
/// resource's entity, resource and level.
fn error_answer(e: &Error) -> Value {
    let mut answer = json!({"outcome": "error", "kind": kind(e), "message": e.to_string()});
    match e {
        Error::RateLimitExceeded(r) => {
            let mut body = exact(r.body());
            if let Some(m) = body.as_object_mut().and_then(|m| m.remove("message")) {
                answer["message"] = m;
            }
            answer["body"] = body;
        }
        Error::ResourceDisabled {
            entity,
            resource,
            level,
        } => {
            answer["entity"] = json!(entity);
            answer["resource"] = json!(resource);
            answer["level"] = json!(level);
        }
        _ => {}
    }
    answer
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
    let draw = Arc::new(AtomicUsize::new(0));
    let limiter = pinned_limiter(table, &clock, (ttl, cache_ttl), Arc::clone(&draw)).await;
    let mut out = Vec::new();
    for step in spec["steps"].as_array().into_iter().flatten() {
        let at = step["at_ms"].as_i64().unwrap_or_default();
        clock.set(at);
        let pinned = step["draw"].as_u64().unwrap_or_default();
        draw.store(
            usize::try_from(pinned).unwrap_or_default(),
            Ordering::SeqCst,
        );
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
            // Admin runs in another process on both sides (the operator's):
            // neither acquiring client's rejection cache hears of it.
            run_json("client_diff.py", &args)
        } else {
            acquire_step(&limiter, &step["acquire"]).await
        };
        let items = run_json("client_diff.py", &["dump", "--table", table])["items"].clone();
        out.push(json!({"answer": answer, "items": items}));
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

/// Every rejection body's `limits` in `answer` (an in-lease rejection's
/// too), in one order: by entity, resource and limit. The Python client
/// lists them in the order the table returns a bucket's attributes, which
/// DynamoDB leaves unspecified (moto keeps the order they were written in,
/// DynamoDB Local does not).
fn sort_limits(answer: &mut Value) {
    match answer {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if let (true, Value::Array(limits)) = (k == "limits", &mut *v) {
                    limits.sort_by_key(|s| {
                        ["entity_id", "resource", "limit_name"].map(|k| s[k].to_string())
                    });
                }
                sort_limits(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(sort_limits),
        _ => {}
    }
}

/// An answer with each error's kind as the Python client names it (Rust's
/// through `KINDS`, a Python `ValidationError` qualified by its field when
/// `KINDS` does) and its message taken out (`messages_agree` checks them).
fn canonical(answer: &Value, rust: bool) -> Value {
    match answer {
        Value::Object(m) => {
            let mut out: serde_json::Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "message")
                .map(|(k, v)| (k.clone(), canonical(v, rust)))
                .collect();
            if m.get("outcome") == Some(&json!("error")) {
                let kind = m.get("kind").and_then(Value::as_str).unwrap_or_default();
                let named = if rust {
                    KINDS.iter().find(|(r, _)| *r == kind).map_or_else(
                        || format!("zae-client {kind}, which 0.17.0 never raises"),
                        |(_, p)| (*p).to_owned(),
                    )
                } else if kind == "ValidationError" && m.get("field") == Some(&json!("limits")) {
                    "ValidationError(field=limits)".to_owned()
                } else {
                    kind.to_owned()
                };
                out.insert("kind".into(), json!(named));
                out.remove("field");
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| canonical(v, rust)).collect()),
        other => other.clone(),
    }
}

/// A rejection's message in Rust names what the Python one names: for each
/// limit the Python body says exceeded, its entity, resource and limit
/// (`entity/resource limit`); for a contended one, the bucket. The wording
/// is each client's own (docs/client.md).
fn messages_agree(python: &Value, rust: &Value) -> Result<(), String> {
    match (python, rust) {
        (Value::Object(p), Value::Object(r)) => {
            if let (Some(body), Some(message)) =
                (p.get("body"), r.get("message").and_then(Value::as_str))
            {
                let limits = body["limits"].as_array().cloned().unwrap_or_default();
                let contended = body["contended"] == json!(true);
                for s in limits
                    .iter()
                    .filter(|s| s["exceeded"] == json!(true) || contended)
                {
                    let who = format!(
                        "{}/{}",
                        s["entity_id"].as_str().unwrap_or_default(),
                        s["resource"].as_str().unwrap_or_default()
                    );
                    let named = if contended {
                        who
                    } else {
                        format!("{who} {}:", s["limit_name"].as_str().unwrap_or_default())
                    };
                    if !message.contains(&named) {
                        return Err(format!(
                            "the Rust message {message:?} does not name {named:?} (Python: {:?})",
                            p.get("message")
                        ));
                    }
                }
            }
            p.iter()
                .filter_map(|(k, v)| r.get(k).map(|w| (v, w)))
                .try_for_each(|(v, w)| messages_agree(v, w))
        }
        (Value::Array(p), Value::Array(r)) => {
            p.iter().zip(r).try_for_each(|(v, w)| messages_agree(v, w))
        }
        _ => Ok(()),
    }
}

/// The first attribute two lists of items differ in, by key.
fn items_difference(i: usize, pb: &[Value], rb: &[Value]) -> Option<String> {
    let key = |v: &Value| format!("{} {}", v["PK"]["S"], v["SK"]["S"]);
    let pkeys: Vec<String> = pb.iter().map(key).collect();
    let rkeys: Vec<String> = rb.iter().map(key).collect();
    if pkeys != rkeys {
        return Some(format!(
            "step {i}: items differ\n python: {pkeys:?}\n rust:   {rkeys:?}"
        ));
    }
    let mut found = Vec::new();
    for (pi, ri) in pb.iter().zip(rb) {
        let keys: std::collections::BTreeSet<&String> = pi
            .as_object()
            .into_iter()
            .chain(ri.as_object())
            .flat_map(|m| m.keys())
            .collect();
        // Every attribute each differing item differs in.
        let differ: Vec<String> = keys
            .into_iter()
            .filter(|k| pi.get(*k) != ri.get(*k))
            .map(|k| format!("{k}: python {:?}, rust {:?}", pi.get(k), ri.get(k)))
            .collect();
        if !differ.is_empty() {
            found.push(format!(
                "step {i}: item {}\n {}",
                key(pi),
                differ.join("\n ")
            ));
        }
    }
    // Every item that differs: one difference seldom comes alone.
    (!found.is_empty()).then(|| found.join("\n"))
}

/// Each step's answers and the namespace's items equal, attribute by
/// attribute; the first difference, named by step and attribute,
/// otherwise.
pub fn first_difference(python: &[Value], rust: &[Value]) -> Option<String> {
    if python.len() != rust.len() {
        return Some(format!(
            "{} steps in Python, {} in Rust",
            python.len(),
            rust.len()
        ));
    }
    for (i, (p, r)) in python.iter().zip(rust).enumerate() {
        let answer = |v: &Value, rust: bool| {
            let mut a = canonical(&v["answer"], rust);
            sort_limits(&mut a);
            a
        };
        if answer(p, false) != answer(r, true) {
            return Some(format!(
                "step {i}: answers differ\n python: {}\n rust:   {}",
                p["answer"], r["answer"]
            ));
        }
        if let Err(e) = messages_agree(&p["answer"], &r["answer"]) {
            return Some(format!("step {i}: {e}"));
        }
        let items = |v: &Value| v["items"].as_array().cloned().unwrap_or_default();
        if let Some(d) = items_difference(i, &items(p), &items(r)) {
            return Some(d);
        }
    }
    None
}
