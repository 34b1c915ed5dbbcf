//! End-to-end tests on a real moto server, driven by the real zae-limiter
//! 0.17.0 client and read back through it, with the built `aggregator` binary.
//!
//! The Python side (moto, the client) lives in the venv that `scripts/test.sh`
//! creates (`ZAE_TEST_PYTHON` overrides it). One moto serves the whole run:
//! `ZAE_MOTO_ENDPOINT` when the test script started it, otherwise one started
//! here on a free port, which exits with this process. Each test has its own table.

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use zae_test_support::emf::validate_emf;
use zae_test_support::harness::*;
use zae_test_support::limits;

use crate::common::poll;

struct Scenario {
    table: String,
    namespace: String,
    driven: Value,
    dir: TempDir,
}

fn scenario(name: &str, requests: u32) -> Scenario {
    let table = unique_table(name);
    let setup = run_json("client.py", &["setup", "--table", &table]);
    let driven = run_json(
        "client.py",
        &[
            "drive",
            "--table",
            &table,
            "--requests",
            &requests.to_string(),
        ],
    );
    Scenario {
        namespace: setup["namespace_id"].as_str().unwrap().to_owned(),
        table,
        driven,
        dir: TempDir::new(name),
    }
}

type Counters = BTreeMap<String, i64>;

fn counters(v: &Value) -> Counters {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

/// Counters summed over an entity's snapshots of one window type.
fn window_sum(read: &Value, entity: &str, window: &str, field: &str) -> Counters {
    let mut sum = Counters::new();
    for snap in read["entities"][entity]["snapshots"].as_array().unwrap() {
        if snap["window"] == window {
            for (k, v) in counters(&snap[field]) {
                *sum.entry(k).or_default() += v;
            }
        }
    }
    sum
}

const ENTITIES: [&str; 3] = ["proj-1", "key-a", "key-b"];

/// Usage as the driver consumed it, and `#od` as the stream says it must be.
fn assert_exact(s: &Scenario, read: &Value, truth: &Value) {
    for entity in ENTITIES {
        let consumed = counters(&s.driven["consumed"][entity]);
        for window in ["hourly", "daily"] {
            assert_eq!(
                window_sum(read, entity, window, "counters"),
                consumed,
                "{entity} {window} usage"
            );
            assert_eq!(
                counters(&read["entities"][entity]["summary"][window]["total"]),
                consumed,
                "{entity} {window} summary"
            );
            assert_eq!(
                window_sum(read, entity, window, "overdrawn"),
                counters(&truth["entities"][entity]["overdrawn"]),
                "{entity} {window} #od counters"
            );
        }
        for (limit, tokens) in &consumed {
            let bucket = read["entities"][entity]["buckets"][limit]["consumed_milli"]
                .as_i64()
                .unwrap();
            assert_eq!(
                bucket / 1000,
                *tokens,
                "{entity} {limit}: the bucket's own counter agrees with the driver"
            );
        }
    }
    // Resource-scoped reads (GSI2) see the same daily totals.
    for entity in ENTITIES {
        let mut sum = Counters::new();
        for snap in read["resource_scoped"].as_array().unwrap() {
            if snap["entity"] == entity && snap["window"] == "daily" {
                for (k, v) in counters(&snap["counters"]) {
                    *sum.entry(k).or_default() += v;
                }
            }
        }
        assert_eq!(
            sum,
            counters(&s.driven["consumed"][entity]),
            "{entity} via GSI2"
        );
    }
}

/// What the client reads back, and what the stream says it must be.
fn read_back(s: &Scenario) -> (Value, Value) {
    (
        run_json("client.py", &["read", "--table", &s.table]),
        run_json("stream_truth.py", &["--table", &s.table]),
    )
}

/// Polls through a fault proxy that fails every `every`-th write (at most
/// `budget` of them); returns the poll and the proxy's counts.
fn poll_through_faults(
    s: &Scenario,
    every: u32,
    budget: Option<u32>,
    env: &[(&str, &str)],
    extra: &[&str],
) -> (Poll, Value) {
    let (endpoint, mut proxy) = fault_proxy(every, budget);
    let run = poll(
        &s.table,
        &s.dir.file("checkpoint.json"),
        &endpoint,
        env,
        extra,
    );
    let stats = proxy_stats(&endpoint);
    let _ = proxy.kill();
    (run, stats)
}

fn transitions(read: &Value, entity: &str, action: &str) -> Vec<Value> {
    read["entities"][entity]["audit_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == action)
        .cloned()
        .collect()
}

#[test]
fn snapshots_overdraw_counters_and_audit_events_match_the_real_clients_traffic() {
    let s = scenario("e2e", 24);
    let run = poll(
        &s.table,
        &s.dir.file("checkpoint.json"),
        endpoint(),
        &[],
        &[],
    );
    let (read, truth) = read_back(&s);
    assert_exact(&s, &read, &truth);

    let mut metric_count = BTreeMap::new();
    for doc in &run.emf {
        validate_emf(doc).unwrap_or_else(|e| panic!("invalid EMF ({e}): {doc}"));
        for name in ["SoftLimitOverdrawn", "SoftLimitRecovered"] {
            if doc.get(name).is_some() {
                *metric_count
                    .entry((doc["EntityId"].as_str().unwrap().to_owned(), name))
                    .or_insert(0) += 1;
                assert_eq!(doc["Resource"], "gpt-4");
                assert_eq!(doc["Limit"], "tpm");
            }
        }
    }
    for entity in ENTITIES {
        for (action, metric) in [
            ("limit_overdrawn", "SoftLimitOverdrawn"),
            ("limit_recovered", "SoftLimitRecovered"),
        ] {
            let expected = s.driven["transitions"][entity][action].as_u64().unwrap() as usize;
            let events = transitions(&read, entity, action);
            assert_eq!(
                events.len(),
                expected,
                "{entity}: one {action} audit event per transition"
            );
            assert_eq!(
                metric_count
                    .get(&(entity.to_owned(), metric))
                    .copied()
                    .unwrap_or(0),
                expected,
                "{entity} {metric}"
            );
            for event in events {
                assert_eq!(event["resource"], "gpt-4");
                let d = &event["details"];
                assert_eq!(
                    (d["limit"].as_str(), d["shard"].as_i64()),
                    (Some("tpm"), Some(0)),
                    "{event}"
                );
                assert_eq!(
                    d["capacity"].as_i64(),
                    Some(if entity == "proj-1" { 4000 } else { 2000 })
                );
                let balance = d["balance"].as_i64().unwrap();
                assert!(
                    if action == "limit_overdrawn" {
                        balance < 0
                    } else {
                        balance >= 0
                    },
                    "{event}"
                );
            }
        }
    }
    assert!(
        s.driven["transitions"]["key-a"]["limit_recovered"].as_u64() == Some(1),
        "the scenario includes a recovery"
    );
    assert_eq!(
        s.driven["hard_rejections"], 2,
        "the hard rpm limit rejected"
    );
}

#[test]
fn replaying_the_whole_stream_with_a_fresh_checkpoint_changes_no_total() {
    let s = scenario("replay", 12);
    let first = poll(&s.table, &s.dir.file("a.json"), endpoint(), &[], &[]);
    let before = run_json("client.py", &["read", "--table", &s.table]);
    let replay = poll(&s.table, &s.dir.file("b.json"), endpoint(), &[], &[]);
    let after = run_json("client.py", &["read", "--table", &s.table]);
    assert!(
        replay.summary["records_passed_filter"].as_u64().unwrap() > 0,
        "the replay saw the stream again"
    );
    assert_eq!(
        replay.summary["snapshot_writes"], 0,
        "no snapshot item took anything twice"
    );
    assert_eq!(replay.summary["audit_events_written"], 0);
    assert!(
        first
            .emf
            .iter()
            .any(|d| d.get("SoftLimitOverdrawn").is_some())
    );
    // The replay publishes each transition's metric again (a duplicate
    // datapoint), and writes no audit event twice.
    let transitions = |docs: &[Value]| -> Vec<Value> {
        let mut ids: Vec<Value> = docs
            .iter()
            .filter(|d| {
                d.get("SoftLimitOverdrawn").is_some() || d.get("SoftLimitRecovered").is_some()
            })
            .map(|d| d["AuditEventId"].clone())
            .collect();
        ids.sort_by_key(|v| v.to_string());
        ids
    };
    assert_eq!(transitions(&replay.emf), transitions(&first.emf));
    for entity in ENTITIES {
        assert_eq!(
            before["entities"][entity]["snapshots"], after["entities"][entity]["snapshots"],
            "{entity}"
        );
        assert_eq!(
            before["entities"][entity]["audit_events"], after["entities"][entity]["audit_events"],
            "{entity}"
        );
    }
    // The same checkpoint again: nothing left to read.
    let again = poll(&s.table, &s.dir.file("b.json"), endpoint(), &[], &[]);
    assert_eq!(again.summary["records_read"], 0);
}

/// Usage summed over every entity's daily snapshots, per entity and limit.
fn daily_usage(read: &Value) -> BTreeMap<String, Counters> {
    ENTITIES
        .iter()
        .map(|e| (e.to_string(), window_sum(read, e, "daily", "counters")))
        .collect()
}

#[test]
fn a_dead_letter_replay_with_from_restores_nothing_that_later_records_passed() {
    let s = scenario("dlq", 12);
    let dump = s.dir.file("records.json");
    run_json(
        "stream_truth.py",
        &["--table", &s.table, "--dump", dump.to_str().unwrap()],
    );
    let text = std::fs::read_to_string(&dump).unwrap();
    let records: Value = serde_json::from_str(&text).unwrap();
    let sequences: Vec<&str> = records["Records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["dynamodb"]["Keys"]["SK"]["S"] == "#STATE")
        .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap())
        .collect();
    let (first, middle) = (sequences[0], sequences[sequences.len() / 2]);
    let consumed: BTreeMap<String, Counters> = ENTITIES
        .iter()
        .map(|e| (e.to_string(), counters(&s.driven["consumed"][e])))
        .collect();

    // The first half went to the dead-letter queue; the mapping went on after it.
    let checkpoint = s.dir.file("checkpoint.json");
    poll(&s.table, &checkpoint, endpoint(), &[], &["--from", middle]);
    let skipped = daily_usage(&run_json("client.py", &["read", "--table", &s.table]));
    assert_ne!(skipped, consumed, "the dead-lettered half is missing");

    // Replaying the dead letters from their first record, as the docs describe.
    let replay = poll(&s.table, &checkpoint, endpoint(), &[], &["--from", first]);
    assert!(replay.summary["records_read"].as_u64().unwrap() >= sequences.len() as u64);
    let replayed = daily_usage(&run_json("client.py", &["read", "--table", &s.table]));
    let mut restored_all = true;
    for (entity, limits) in &consumed {
        for (limit, tokens) in limits {
            let got = replayed[entity].get(limit).copied().unwrap_or(0);
            assert!(
                got <= *tokens,
                "{entity} {limit}: {got} > {tokens}, counted twice"
            );
            restored_all &= got == *tokens;
        }
    }
    // What the docs say plainly: records older than a snapshot item's
    // watermark are taken as applied, so the replay cannot bring them back.
    assert!(
        !restored_all,
        "some dead-lettered usage stays lost: {replayed:?} vs {consumed:?}"
    );
    // And the checkpoint ends where the stream ends, as after any poll.
    let again = poll(&s.table, &checkpoint, endpoint(), &[], &[]);
    assert_eq!(again.summary["records_read"], 0);
}

fn fault_proxy(every: u32, budget: Option<u32>) -> (String, Child) {
    let budget = budget.map(|b| b.to_string());
    let mut child = Command::new(python())
        .arg(harness("fault_proxy.py"))
        .args([
            "--target",
            endpoint(),
            "--every",
            &every.to_string(),
            "--parent-pid",
            &std::process::id().to_string(),
        ])
        .args(budget.iter().flat_map(|b| ["--budget", b.as_str()]))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the fault proxy");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().expect("the proxy prints its port");
    wait_for_port(port, "fault proxy", &mut child);
    (format!("http://127.0.0.1:{port}"), child)
}

fn proxy_stats(endpoint: &str) -> Value {
    let out = Command::new(python())
        .args(["-c", &format!("import urllib.request;print(urllib.request.urlopen('{endpoint}/fault-proxy/stats').read().decode())")])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn throttled_writes_and_writes_failed_after_applying_still_give_exact_totals() {
    let s = scenario("faults", 16);
    let (_, stats) = poll_through_faults(&s, 3, None, &[], &[]);
    assert!(
        stats["throttled"].as_u64().unwrap() > 0 && stats["failed_after"].as_u64().unwrap() > 0,
        "{stats}"
    );
    let (read, truth) = read_back(&s);
    assert_exact(&s, &read, &truth);
}

#[test]
fn writes_that_exhaust_their_retries_are_redelivered_as_batch_item_failures_and_nothing_is_lost() {
    let s = scenario("redeliver", 16);
    // An outage of eight failed writes, each failing at once (no in-handler retry).
    let (run, stats) = poll_through_faults(
        &s,
        2,
        Some(8),
        &[("WRITE_MAX_ATTEMPTS", "1")],
        &["--max-retries", "10"],
    );
    assert_eq!(
        stats["throttled"].as_u64().unwrap() + stats["failed_after"].as_u64().unwrap(),
        8,
        "{stats}"
    );
    assert!(
        run.summary["redeliveries"].as_u64().unwrap() > 0,
        "{}",
        run.summary
    );
    let (read, truth) = read_back(&s);
    assert_exact(&s, &read, &truth);
}

#[test]
fn agrees_with_the_reference_aggregator_except_for_the_documented_fixes() {
    let s = scenario("differential", 16);
    poll(&s.table, &s.dir.file("e.json"), endpoint(), &[], &[]);
    let (read, truth) = read_back(&s);
    let target = format!("{}-ref", s.table);
    let reference = run_json(
        "reference_aggregator.py",
        &[
            "--source",
            &s.table,
            "--target",
            &target,
            "--namespace",
            &s.namespace,
        ],
    );
    assert_eq!(reference["errors"], 0);
    // Summed over the window types: the reference's hour-00 collision (its
    // hourly and daily items share a key there) moves counts between window
    // types but keeps their total, so the comparison holds at any hour.
    let both = |sum: &dyn Fn(&str) -> Counters| {
        let mut total = sum("hourly");
        for (k, v) in sum("daily") {
            *total.entry(k).or_default() += v;
        }
        total.retain(|_, v| *v != 0);
        total
    };
    for entity in ENTITIES {
        let t = &truth["entities"][entity];
        let r = &reference["snapshots"][entity];
        // Fix: the reference never counts the INSERT that creates a bucket,
        // in either window.
        let mut expected_ref = both(&|w| window_sum(&read, entity, w, "counters"));
        for (limit, n) in counters(&t["insert_counters"]) {
            *expected_ref.entry(limit).or_default() -= 2 * n;
        }
        expected_ref.retain(|_, v| *v != 0);
        assert_eq!(
            both(&|w| counters(&r[w]["counters"])),
            expected_ref,
            "{entity}: usage differs by the bucket's first request only"
        );
        assert_eq!(
            both(&|w| counters(&r[w]["overdrawn"])),
            both(&|w| window_sum(&read, entity, w, "overdrawn")),
            "{entity} #od"
        );
        let events = |w: &str| r[w]["total_events"].as_i64().unwrap_or(0);
        let our_events: i64 = read["entities"][entity]["snapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["total_events"].as_i64().unwrap())
            .sum();
        assert_eq!(
            events("hourly") + events("daily"),
            our_events - 2 * t["insert_events"].as_i64().unwrap(),
            "{entity}"
        );
    }
}

/// A limit the client accepts but whose name is a snapshot attribute
/// (`window`): only its own counter is left out; the entity's other limits
/// are counted, and the poller does not stall on the batch.
/// A table of its own whose default namespace has `resources` (YAML) set
/// through the real client, and a directory for the test.
fn with_limits(name: &str, resources: &str) -> (String, TempDir) {
    let table = unique_table(&format!("agg-{name}"));
    let dir = TempDir::new(name);
    run_json("client.py", &["setup", "--table", &table]);
    let manifest = dir.file("limits.yaml");
    let yaml = format!("namespace: default\nresources: {resources}\n");
    std::fs::write(&manifest, yaml).unwrap();
    let m = manifest.to_str().unwrap();
    run_json(
        "limits_client.py",
        &["set", "--table", &table, "--manifest", m],
    );
    (table, dir)
}

/// `entity`'s hourly snapshot counters, as the real client reads them.
fn hourly_counters(table: &str, entity: &str) -> Value {
    let usage = run_json(
        "limits_client.py",
        &["usage", "--table", table, "--entity", entity],
    );
    let hourly = usage["snapshots"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["window"] == "hourly"))
        .unwrap_or_else(|| panic!("an hourly snapshot of {entity}: {usage}"));
    hourly["counters"].clone()
}

#[test]
fn a_limit_named_like_a_snapshot_attribute_loses_only_its_own_counter() {
    let (table, dir) = with_limits(
        "window",
        "{gpt-4: {limits: {window: {capacity: 1000}, rpm: {capacity: 1000}}}}",
    );
    let t = table.as_str();
    let acquired = run_json(
        "limits_client.py",
        &[
            "acquire",
            "--table",
            t,
            "--entity",
            "u1",
            "--resource",
            "gpt-4",
            "--consume",
            "window=1",
            "--consume",
            "rpm=1",
            "--times",
            "25",
        ],
    );
    assert_eq!(acquired["ok"], 25, "{acquired}");
    let polled = poll(&table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);
    assert!(
        polled.summary["usage_skipped"].as_u64() >= Some(1),
        "{}",
        polled.summary
    );
    let counters = hourly_counters(t, "u1");
    assert_eq!(counters["rpm"], 25, "{counters}");
    assert!(counters.get("window").is_none(), "{counters}");
}

/// The refill pass's write is one the real client's fast path spends (the
/// default tier's counterpart of `realtime::refills_spare_the_real_client_
/// most_of_its_slow_paths`, without its ten seconds of traffic): a bucket
/// of 100 a second, made at `rf` and drained by a fast path in a later
/// second. Left alone, the client's next one-token acquire fails its fast
/// path and takes the slow one (its reads); after one `aggregator poll`,
/// whose refill credits the time up to the drain's own record, the client
/// reads the refill back and its fast path takes the token.
#[test]
fn a_refill_is_what_the_real_clients_next_fast_path_spends() {
    let drained = |name: &str| {
        let table = unique_table(name);
        let drained = run_json("slow_paths.py", &["drain", "--table", &table]);
        assert_eq!(drained["tk"], 0, "{drained}");
        (table, drained)
    };
    let (alone, _) = drained("refill-none");
    let none = run_json("slow_paths.py", &["spend", "--table", &alone]);
    assert!(none["refused_writes"].as_u64() > Some(0), "{none}");
    assert!(none["calls"]["BatchGetItem"].as_u64() > Some(0), "{none}");

    let (table, before) = drained("refill-ours");
    let dir = TempDir::new(&table);
    let polled = poll(&table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);
    assert_eq!(polled.summary["refills_written"], 1, "{}", polled.summary);
    let ours = run_json("slow_paths.py", &["spend", "--table", &table]);
    let (tk, rf) = (&ours["before"]["tk"], &ours["before"]["rf"]);
    assert!(
        (10_000..=100_000).contains(&tk.as_i64().unwrap()),
        "at least 100 ms of refill, at most the burst: {ours}"
    );
    assert!(
        rf.as_i64() > before["rf"].as_i64()
            && rf.as_i64() <= Some(chrono::Utc::now().timestamp_millis()),
        "rf moved, never past the clock: {before} then {ours}"
    );
    // A new process reads one item before its first acquire, either way.
    assert_eq!(ours["refused_writes"], 0, "the fast path took it: {ours}");
    assert_eq!(ours["calls"]["UpdateItem"], 1, "{ours}");
    assert_eq!(
        ours["calls"]["BatchGetItem"],
        Value::Null,
        "no slow path: {ours}"
    );
}

/// A shard 0 whose `wcu` runs low (set by hand: moto cannot take the write
/// rate that would run it down) is doubled by the poller; the raised count
/// is propagated and shard 1 pre-created, its rps at half the capacity and
/// its daily quota funded by a debit on shard 0. Read back through the real
/// client, the quota is whole across both shards, and the client goes on
/// acquiring on them.
#[test]
fn a_hot_bucket_doubles_and_its_new_shard_is_funded_from_the_old_one() {
    let table = unique_table("sharding");
    let setup = run_json("sharding.py", &["setup", "--table", &table]);
    let namespace = setup["namespace_id"].as_str().unwrap().to_owned();
    run_json(
        "sharding.py",
        &["heat", "--table", &table, "--namespace", &namespace],
    );
    let dir = TempDir::new(&table);
    let polled = poll(&table, &dir.file("checkpoint.json"), endpoint(), &[], &[]);
    let read = run_json(
        "sharding.py",
        &["read", "--table", &table, "--namespace", &namespace],
    );
    let shards = &read["shards"];
    assert_eq!(shards["0"]["shard_count"], 2, "{read}\n{}", polled.summary);
    assert_eq!(shards["1"]["shard_count"], 2, "shard 1 pre-created: {read}");
    // Once: the doubling's own record does not double again (the reference
    // doubles on every record while `wcu` stays low).
    assert_eq!(polled.summary["doublings"], 1, "{}", polled.summary);
    assert_eq!(polled.summary["shards_cloned"], 1, "{}", polled.summary);
    assert_eq!(shards["1"]["consumed"]["rps"], 0);
    assert_eq!(shards["1"]["rpd_gc"], 2, "granted under two shards");
    let tokens = |shard: &str, limit: &str| shards[shard]["tokens"][limit].as_i64().unwrap();
    let consumed = |shard: &str, limit: &str| shards[shard]["consumed"][limit].as_i64().unwrap();
    assert!(
        tokens("1", "rps") <= 50_000,
        "half of 100 tokens per shard: {read}"
    );
    // The quota moved, never minted: what the shards hold plus what they
    // consumed is the day's allowance.
    let whole =
        tokens("0", "rpd") + tokens("1", "rpd") + consumed("0", "rpd") + consumed("1", "rpd");
    assert_eq!(whole, 10_000_000, "{read}");
    assert!(tokens("1", "rpd") > 0, "shard 1 was funded: {read}");
    assert_eq!(read["admitted_after"], 20, "{read}");
}

/// Audit items the real client wrote, half of them deleted (moto expires
/// nothing), reach moto's S3 through the poller with `ARCHIVE_BUCKET` set:
/// every deleted event once the documented query keeps one line per
/// `event_id`, none of the kept ones, each in its namespace's partition.
/// A full replay of the stream (a redelivery of everything) adds no event
/// to what the query returns. Three forged audit items (keys the acquire
/// policy lets a client write, removed) become no line and are counted as
/// skipped. A TTL removal, made here since moto never
/// sets `userIdentity`, goes through the built binary under the Lambda
/// stand-in and is archived as removed by TTL.
#[test]
fn removed_audit_items_reach_the_archive_once_after_deduplication() {
    let table = unique_table("archive");
    let bucket = table.to_lowercase();
    let setup = run_json(
        "archive.py",
        &["setup", "--table", &table, "--bucket", &bucket],
    );
    let namespace = setup["namespace_id"].as_str().unwrap().to_owned();
    let mut deleted: Vec<String> = serde_json::from_value(setup["deleted"].clone()).unwrap();
    deleted.sort();
    assert!(deleted.len() >= 2, "{setup}");
    let env = [("ARCHIVE_BUCKET", bucket.as_str())];
    let dir = TempDir::new(&table);
    let events = |read: &Value| {
        let mut ids: Vec<String> = read["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let polled = poll(&table, &dir.file("first.json"), endpoint(), &env, &[]);
    let first = run_json("archive.py", &["read", "--bucket", &bucket]);
    assert_eq!(events(&first), deleted, "no forged line: {first}");
    assert_eq!(polled.summary["archive_skipped"], 3, "{}", polled.summary);
    let prefix = format!("audit/namespace={namespace}/year=");
    assert!(
        first["objects"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k.as_str().unwrap().starts_with(&prefix)),
        "{first}"
    );
    for event in first["events"].as_array().unwrap() {
        assert_eq!(
            event["removed_by_ttl"], false,
            "deleted, not expired: {event}"
        );
        assert_eq!(event["namespace"], namespace.as_str());
        assert!(
            event["action"].is_string() && event["timestamp"].is_string(),
            "{event}"
        );
    }
    poll(&table, &dir.file("replay.json"), endpoint(), &env, &[]);
    let replayed = run_json("archive.py", &["read", "--bucket", &bucket]);
    assert_eq!(
        events(&replayed),
        deleted,
        "a replay adds nothing after deduplication"
    );
    let ttl = run_json(
        "archive.py",
        &[
            "ttl",
            "--table",
            &table,
            "--bucket",
            &bucket,
            "--namespace",
            &namespace,
            "--aggregator",
            env!("CARGO_BIN_EXE_aggregator"),
        ],
    );
    assert_eq!(ttl["answer"]["body"]["events_archived"], 1, "{ttl}");
    let after = run_json("archive.py", &["read", "--bucket", &bucket]);
    let expired = after["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event_id"] == ttl["event_id"])
        .expect("archived");
    assert_eq!(expired["removed_by_ttl"], true, "{expired}");
}

mod realtime;

/// The shard stall of issue 28, as a new user met it: a principal with the
/// acquire policy sets `shard_count` to -1 and then to 0 on its own bucket
/// (the second write is a "raise" to no shards, which the propagation
/// divided by and panicked on, again at every restart from the
/// checkpoint). Then another entity makes 20 requests. The poller exits 0
/// in both passes, the hostile records are skipped and counted, and the
/// other entity's usage is all of its requests.
#[test]
fn a_shard_count_a_client_writes_out_of_range_stalls_nothing() {
    let (table, dir) = with_limits("stall", "{gpt-4: {limits: {rpm: {capacity: 1000}}}}");
    let t = table.as_str();
    let acquire = |entity: &str, times: &str| {
        let args = [
            "acquire",
            "--table",
            t,
            "--entity",
            entity,
            "--resource",
            "gpt-4",
            "--consume",
            "rpm=1",
            "--times",
            times,
        ];
        run_json("limits_client.py", &args)
    };
    assert_eq!(acquire("mallory", "1")["ok"], 1);
    let own = [
        "write-own",
        "--table",
        t,
        "--entity",
        "mallory",
        "--resource",
        "gpt-4",
    ];
    for count in ["-1", "0"] {
        let set = format!("shard_count={count}");
        run_json("limits_client.py", &[&own[..], &["--set", &set]].concat());
    }
    let checkpoint = dir.file("checkpoint.json");
    let first = poll(&table, &checkpoint, endpoint(), &[], &[]);
    assert_eq!(
        first.summary["records_skipped"], 2,
        "the hostile records are skipped and counted: {}",
        first.summary
    );
    assert_eq!(acquire("alice", "20")["ok"], 20);
    let second = poll(&table, &checkpoint, endpoint(), &[], &[]);
    assert_eq!(second.summary["redeliveries"], 0, "{}", second.summary);
    let counters = hourly_counters(t, "alice");
    assert_eq!(counters["rpm"], 20, "{counters}");
}

/// Issue 40's long-key scenario, as a new user met it: a principal with the
/// acquire policy puts a copy of its own bucket, in debt on a soft limit,
/// under an entity id of 1,100 characters. Its overdraw event's index sort
/// key would pass DynamoDB's 1,024 bytes. Then another entity makes 20
/// requests. The poller exits 0 in both passes, and the other entity's
/// usage is all of its requests. On moto and on DynamoDB Local.
#[test]
fn a_bucket_copied_under_a_1100_character_entity_id_stalls_nothing() {
    let (table, dir) = with_limits(
        "longkey",
        "{gpt-4: {limits: {tpm: {capacity: 100, refill_period: 86400, soft: true}}}}",
    );
    let t = table.as_str();
    let debt = limits::acquire(t, "mallory", &["tpm=60"], 2);
    assert_eq!(debt["ok"], 2, "{debt}");
    assert!(
        debt["buckets"]["tpm"]["tokens_milli"].as_i64() < Some(0),
        "mallory's bucket is in debt: {debt}"
    );
    let long_id = "m".repeat(1100);
    let copy = [
        "copy-own",
        "--table",
        t,
        "--entity",
        "mallory",
        "--resource",
        "gpt-4",
        "--as",
        &long_id,
    ];
    run_json("limits_client.py", &copy);
    let checkpoint = dir.file("checkpoint.json");
    poll(&table, &checkpoint, endpoint(), &[], &[]);
    assert_eq!(limits::acquire(t, "alice", &["tpm=1"], 20)["ok"], 20);
    let second = poll(&table, &checkpoint, endpoint(), &[], &[]);
    assert_eq!(second.summary["redeliveries"], 0, "{}", second.summary);
    let counters = hourly_counters(t, "alice");
    assert_eq!(counters["tpm"], 20, "{counters}");
}

/// The sequence numbers of `table`'s stream records of bucket states, in
/// stream order, as the stream gave them.
fn state_sequences(table: &str, dir: &TempDir) -> Vec<String> {
    let dump = dir.file("records.json");
    run_json(
        "stream_truth.py",
        &["--table", table, "--dump", dump.to_str().unwrap()],
    );
    let records: Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    records["Records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["dynamodb"]["Keys"]["SK"]["S"] == "#STATE")
        .map(|r| r["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned())
        .collect()
}

/// Issue 40's first proof, on DynamoDB Local (whose service validation
/// refuses a sequence number shorter than 21 characters): a poll, more
/// traffic, a poll resumed from the checkpoint, more traffic, and a poll
/// `--from` the first sequence number of that traffic. Every entity's
/// usage is all of its requests. Not a test on moto, which accepts any
/// sequence number (the `--from` test above runs there).
fn a_poll_resumes_from_its_checkpoint_and_from_a_sequence_number() {
    let (table, dir) = with_limits("resume", "{gpt-4: {limits: {rpm: {capacity: 1000}}}}");
    let t = table.as_str();
    let checkpoint = dir.file("checkpoint.json");
    assert_eq!(limits::acquire(t, "alice", &["rpm=1"], 10)["ok"], 10);
    poll(&table, &checkpoint, endpoint(), &[], &[]);
    assert_eq!(limits::acquire(t, "bob", &["rpm=1"], 10)["ok"], 10);
    let resumed = poll(&table, &checkpoint, endpoint(), &[], &[]);
    assert!(
        resumed.summary["records_read"].as_u64() >= Some(10),
        "{}",
        resumed.summary
    );
    let before = state_sequences(t, &dir).len();
    assert_eq!(limits::acquire(t, "carol", &["rpm=1"], 10)["ok"], 10);
    let first_of_carol = state_sequences(t, &dir)[before].clone();
    poll(
        &table,
        &checkpoint,
        endpoint(),
        &[],
        &["--from", &first_of_carol],
    );
    for entity in ["alice", "bob", "carol"] {
        let counters = hourly_counters(t, entity);
        assert_eq!(counters["rpm"], 10, "{entity}: {counters}");
    }
}

// The scenarios that need only DynamoDB and Streams, on AWS's DynamoDB
// Local too. Not the archive's (S3, which DynamoDB Local lacks), nor the
// refill's: DynamoDB Local rounds `ApproximateCreationDateTime` down to the
// minute (2.6.1 and 3.3.1; the service to the second, moto keeps the
// milliseconds), and a refill credits time only up to its record's own.
/// The key attributes the aggregator checks before a write, and the twin
/// refuses past their limits (`keys::KEY_ATTRIBUTES`), are exactly those of
/// the table the real client creates: a list of our own could miss an index
/// and neither the twin nor our checks would see it.
#[test]
fn the_key_limits_cover_every_key_attribute_of_the_clients_table() {
    use zae_table::keys::{KEY_ATTRIBUTES, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES};
    let table = unique_table("keys");
    let described = run_json("client.py", &["keys", "--table", &table]);
    let described = described.as_object().expect("a map of key attributes");
    let ours: BTreeMap<&str, usize> = KEY_ATTRIBUTES.into_iter().collect();
    let mut theirs: Vec<&str> = described.keys().map(String::as_str).collect();
    theirs.sort_unstable();
    assert_eq!(
        theirs,
        ours.keys().copied().collect::<Vec<_>>(),
        "key attributes of the client's table against ours"
    );
    for (name, declared) in described {
        let (kind, ty) = (declared[0].as_str(), declared[1].as_str());
        assert_eq!(ty, Some("S"), "{name} is declared {declared}");
        let max = match kind {
            Some("HASH") => MAX_PARTITION_KEY_BYTES,
            _ => MAX_SORT_KEY_BYTES,
        };
        assert_eq!(ours[name.as_str()], max, "{name} is a {kind:?} key");
    }
}

zae_test_support::also_on_dynamodb_local!(
    snapshots_overdraw_counters_and_audit_events_match_the_real_clients_traffic,
    replaying_the_whole_stream_with_a_fresh_checkpoint_changes_no_total,
    a_dead_letter_replay_with_from_restores_nothing_that_later_records_passed,
    throttled_writes_and_writes_failed_after_applying_still_give_exact_totals,
    writes_that_exhaust_their_retries_are_redelivered_as_batch_item_failures_and_nothing_is_lost,
    agrees_with_the_reference_aggregator_except_for_the_documented_fixes,
    a_limit_named_like_a_snapshot_attribute_loses_only_its_own_counter,
    a_hot_bucket_doubles_and_its_new_shard_is_funded_from_the_old_one,
    a_shard_count_a_client_writes_out_of_range_stalls_nothing,
    a_bucket_copied_under_a_1100_character_entity_id_stalls_nothing,
    a_poll_resumes_from_its_checkpoint_and_from_a_sequence_number,
    the_key_limits_cover_every_key_attribute_of_the_clients_table,
);
