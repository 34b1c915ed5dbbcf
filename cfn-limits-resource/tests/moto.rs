//! End-to-end tests of the provisioner on a real moto server: manifests
//! applied by the built `zae-limits` and `cfn-limits-resource` binaries,
//! read back and exercised through the real zae-limiter 0.17.0 client, and
//! driven by the unmodified Python CLI through a local Lambda endpoint.

use serde_json::{Value, json};
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;
use zae_test_support::harness::*;

const ZAE_LIMITS: &str = env!("CARGO_BIN_EXE_zae-limits");
const LAMBDA: &str = env!("CARGO_BIN_EXE_cfn-limits-resource");
/// The build's version (Cargo.toml's) and the stamp it writes on a table.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const STAMP: &str = concat!("0.17.0+rust.", env!("CARGO_PKG_VERSION"));

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zae-limits-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write_manifest(name: &str, yaml: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A table made by the client, with namespace `default` registered.
fn setup(name: &str) -> String {
    let table = unique_table(name);
    run_json("client.py", &["setup", "--table", &table]);
    table
}

fn zae_limits(args: &[&str]) -> Output {
    let mut cmd = Command::new(ZAE_LIMITS);
    cmd.args(args);
    aws_env(&mut cmd, endpoint());
    cmd.output().expect("run zae-limits")
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn client(args: &[&str]) -> Value {
    run_json("limits_client.py", args)
}

fn read_levels(table: &str, namespace: &str, levels: &[&str]) -> Value {
    client(&[
        "read",
        "--table",
        table,
        "--namespace",
        namespace,
        "--levels",
        &serde_json::to_string(levels).unwrap(),
    ])
}

fn acquire(table: &str, entity: &str, consume: &[&str], times: u32) -> Value {
    let mut args = vec![
        "acquire",
        "--table",
        table,
        "--entity",
        entity,
        "--resource",
        "gpt-4",
    ];
    for c in consume {
        args.extend(["--consume", c]);
    }
    let times = times.to_string();
    args.extend(["--times", &times]);
    client(&args)
}

/// Every item of the table, keyed by `PK SK`.
fn items(table: &str) -> std::collections::BTreeMap<String, Value> {
    client(&["items", "--table", table])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                format!(
                    "{} {}",
                    item["PK"]["S"].as_str().unwrap(),
                    item["SK"]["S"].as_str().unwrap()
                ),
                item.clone(),
            )
        })
        .collect()
}

fn limit(name: &str, capacity: u64, refill: u64, period: u64, soft: bool) -> Value {
    let mut l = json!({"name": name, "capacity": capacity, "refill_amount": refill, "refill_period_seconds": period});
    if soft {
        l["soft"] = json!(true);
    }
    l
}

const TENANT: &str = r#"
namespace: default
system:
  on_unavailable: allow
  limits:
    rpm: {capacity: 1000}
    tpm: {capacity: 100000, refill_period: 86400, soft: true}
resources:
  gpt-4:
    limits:
      rpm: {capacity: 3}
      tpm: {capacity: 500, refill_period: 86400, soft: true}
entities:
  proj-1:
    resources:
      gpt-4:
        limits:
          tpm: {capacity: 1000, refill_period: 86400, soft: true}
  key-a:
    resources:
      gpt-4:
        cascade: true
        limits:
          rpm: {capacity: 5}
          tpm: {capacity: 40, refill_period: 86400, soft: true}
  key-b:
    resources:
      _default_:
        limits:
          rpm: {capacity: 2}
"#;

#[test]
fn a_manifest_reads_back_through_the_client_and_governs_its_acquires() {
    let table = setup("limits-readback");
    client(&["entity", "--table", &table, "--entity", "proj-1"]);
    client(&[
        "entity", "--table", &table, "--entity", "key-a", "--parent", "proj-1",
    ]);
    let manifest = write_manifest("tenant.yaml", TENANT);
    let file = manifest.to_str().unwrap();
    let applied = ok(&zae_limits(&["apply", "-f", file, "-t", &table]));
    assert!(
        applied.contains("Applied: 5 created, 0 updated, 0 deleted."),
        "{applied}"
    );

    let read = read_levels(
        &table,
        "default",
        &[
            "system",
            "resource:gpt-4",
            "entity:proj-1/gpt-4",
            "entity:key-a/gpt-4",
            "entity:key-b/_default_",
        ],
    );
    let levels = &read["levels"];
    assert_eq!(levels["system"]["on_unavailable"], "allow");
    assert_eq!(
        levels["system"]["limits"],
        json!([
            limit("rpm", 1000, 1000, 60, false),
            limit("tpm", 100_000, 100_000, 86_400, true)
        ])
    );
    assert_eq!(
        levels["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 3, 3, 60, false),
            limit("tpm", 500, 500, 86_400, true)
        ])
    );
    assert_eq!(
        levels["entity:key-a/gpt-4"]["limits"],
        json!([
            limit("rpm", 5, 5, 60, false),
            limit("tpm", 40, 40, 86_400, true)
        ])
    );
    assert_eq!(
        levels["entity:key-b/_default_"]["limits"],
        json!([limit("rpm", 2, 2, 60, false)])
    );
    // Registries and audit events, which the 0.17.0 provisioner never wrote.
    assert_eq!(read["resources_with_defaults"], json!(["gpt-4"]));
    assert_eq!(
        read["resources_with_entity_configs"],
        json!(["_default_", "gpt-4"])
    );
    assert_eq!(
        read["entities_with_custom_limits"]["gpt-4"],
        json!(["key-a", "proj-1"])
    );
    for audit in ["$SYSTEM", "$RESOURCE:gpt-4", "proj-1", "key-a", "key-b"] {
        // `create_entity` logs its own event beside ours.
        let events: Vec<&Value> = read["audit"][audit]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"] != "entity_created")
            .collect();
        assert_eq!(events.len(), 1, "{audit}: {events:?}");
        assert_eq!(events[0]["action"], "limits_set");
        assert_eq!(events[0]["principal"], "zae-limits-cli");
    }

    // Soft never raises; it overdraws.
    let soft = acquire(&table, "key-a", &["rpm=1", "tpm=30"], 3);
    assert_eq!(
        (soft["ok"].as_u64(), soft["rejected"].as_u64()),
        (Some(3), Some(0)),
        "{soft}"
    );
    assert_eq!(soft["overdrawn"], json!(["tpm"]));
    assert!(soft["buckets"]["tpm"]["tokens_milli"].as_i64().unwrap() < 0);
    // Hard rejects: rpm 5 on key-a, three already spent.
    let hard = acquire(&table, "key-a", &["rpm=1"], 4);
    assert_eq!(
        (hard["ok"].as_u64(), hard["rejected"].as_u64()),
        (Some(2), Some(2)),
        "{hard}"
    );
    assert_eq!(hard["violated"], json!(["rpm"]));
    // Cascade debited the parent: proj-1 holds 1000 tpm, key-a spent 90.
    let parent = acquire(&table, "proj-1", &[], 0);
    let tokens = parent["buckets"]["tpm"]["tokens_milli"].as_i64().unwrap();
    assert!(
        (909_000..915_000).contains(&tokens),
        "proj-1 tpm holds {tokens} milli"
    );
    // key-b runs on its entity-wide `_default_`: rpm 2.
    let wide = acquire(&table, "key-b", &["rpm=1"], 3);
    assert_eq!(
        (wide["ok"].as_u64(), wide["rejected"].as_u64()),
        (Some(2), Some(1)),
        "{wide}"
    );

    let again = ok(&zae_limits(&["plan", "-f", file, "-t", &table]));
    assert_eq!(again.trim(), "No changes. Infrastructure is up-to-date.");
    let diff = ok(&zae_limits(&["diff", "-f", file, "-t", &table]));
    assert_eq!(diff.trim(), "No drift detected. Live state matches YAML.");
    // A full apply rewrites every level and re-runs every fan-out, and finishes them.
    let full = ok(&zae_limits(&[
        "apply", "-f", file, "-t", &table, "--full", "--json",
    ]));
    let report: Value = serde_json::from_str(&full).unwrap();
    assert_eq!(
        (report["updated"].as_u64(), report["created"].as_u64()),
        (Some(5), Some(0)),
        "{report}"
    );
    assert_eq!(
        (report["full"].as_bool(), report["pending"].as_u64()),
        (Some(true), Some(0))
    );
    assert_eq!(report["errors"], json!([]));
}

#[test]
fn config_items_are_the_ones_the_client_writes_and_a_plan_over_them_is_empty() {
    let table = setup("limits-parity");
    let ours = client(&["register", "--table", &table, "--namespace", "ours"])["namespace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let theirs = client(&["register", "--table", &table, "--namespace", "theirs"])["namespace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = r#"
system:
  on_unavailable: block
  limits:
    rpm: {capacity: 1000}
resources:
  gpt-4:
    limits:
      tpm: {capacity: 500, soft: true, schedule: [{cron: "* 9-17 * * MON-FRI", tz: Europe/Berlin, scale: 0.5}]}
      day: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: Europe/Berlin}]}
entities:
  user-1:
    resources:
      gpt-4:
        limits:
          session: {capacity: 5, reset_after_seconds: 3600}
      _default_:
        limits:
          rpm: {capacity: 7, refill_amount: 1, refill_period: 10}
"#;
    let our_file = write_manifest("parity-ours.yaml", &format!("namespace: ours\n{body}"));
    let their_file = write_manifest("parity-theirs.yaml", &format!("namespace: theirs\n{body}"));
    ok(&zae_limits(&[
        "apply",
        "-f",
        our_file.to_str().unwrap(),
        "-t",
        &table,
    ]));
    client(&[
        "set",
        "--table",
        &table,
        "--namespace",
        "theirs",
        "--manifest",
        their_file.to_str().unwrap(),
    ]);

    let all = items(&table);
    // Items as values with the namespace id masked (attribute order is not the point).
    let masked = |item: &Value, ns: &str| -> Value {
        serde_json::from_str(&item.to_string().replace(ns, "NS")).unwrap()
    };
    let configs = |ns: &str| -> std::collections::BTreeMap<String, Value> {
        all.iter()
            .filter(|(key, _)| key.starts_with(&format!("{ns}/")) && key.contains(" #CONFIG"))
            .map(|(key, item)| (key.replacen(ns, "NS", 1), masked(item, ns)))
            .collect()
    };
    let (mine, client_written) = (configs(&ours), configs(&theirs));
    assert_eq!(mine.len(), 4);
    for (key, item) in &client_written {
        assert_eq!(
            mine.get(key),
            Some(item),
            "{key} differs from the client's own"
        );
    }
    for registry in ["#RESOURCES", "#ENTITY_CONFIG_RESOURCES"] {
        let get = |ns: &str| masked(&all[&format!("{ns}/SYSTEM# {registry}")], ns);
        assert_eq!(get(&ours), get(&theirs), "{registry}");
    }

    // And the client decodes what we stored, schedules included.
    let levels = [
        "system",
        "resource:gpt-4",
        "entity:user-1/gpt-4",
        "entity:user-1/_default_",
    ];
    let (read_ours, read_theirs) = (
        read_levels(&table, "ours", &levels),
        read_levels(&table, "theirs", &levels),
    );
    assert_eq!(read_ours["levels"], read_theirs["levels"]);
    let tpm = &read_ours["levels"]["resource:gpt-4"]["limits"][1];
    assert_eq!(tpm["schedule"][0]["cron"], "* 9-17 * * 1-5", "{tpm}");

    // Levels the client wrote itself are not drift.
    let plan = ok(&zae_limits(&[
        "plan",
        "-f",
        their_file.to_str().unwrap(),
        "-t",
        &table,
    ]));
    assert_eq!(plan.trim(), "No changes. Infrastructure is up-to-date.");
}

/// The bad manifests, each with the path its error must name.
const INVALID: &[(&str, &str)] = &[
    ("system: {limits: {}}", "namespace: is required"),
    ("namespace: ''", "namespace: is required"),
    (
        "namespace: t\nsystem: {cascade: true}",
        "system.cascade: 'cascade' is not supported",
    ),
    (
        "namespace: t\nsystem: {disabled: true}",
        "system.disabled: 'disabled' is not supported",
    ),
    (
        "namespace: t\nsystem: {on_unavailable: maybe}",
        "system.on_unavailable: must be 'allow' or 'block'",
    ),
    (
        "namespace: t\nresources: {gpt-4: {disabled: 'yes'}}",
        "resources.gpt-4.disabled: must be true, false or 'bypass'",
    ),
    (
        "namespace: t\nresources: {gpt-4: {cascade: 1}}",
        "resources.gpt-4.cascade: must be true or false",
    ),
    (
        "namespace: t\nentities: {u1: {resources: {gpt-4: {limits: {tpm: {capacity: 5, soft: 'yes'}}}}}}",
        "entities.u1.resources.gpt-4.limits.tpm.soft: must be true or false",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {refill_amount: 5}}}}",
        "resources.r.limits.tpm.capacity: is required",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {capacity: 0}}}}",
        "resources.r.limits.tpm.capacity: must be positive",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {capacity: 1.5}}}}",
        "resources.r.limits.tpm.capacity: must be a whole number",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {capacity: '10'}}}}",
        "resources.r.limits.tpm.capacity: must be a whole number",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {capacity: 5, refill_period: 0}}}}",
        "resources.r.limits.tpm.refill_period: must be positive",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {capacity: 5, refill_amount: -1}}}}",
        "resources.r.limits.tpm.refill_amount: must not be negative",
    ),
    (
        "namespace: t\nresources: {r: {limits: {tpm: {capacity: 5, refill_amount: 0}}}}",
        "resources.r.limits.tpm.refill_amount: 0 means the limit never drips",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, refill_amount: 5, reset_schedule: [{cron: '0 0 * * *'}]}}}}",
        "resources.r.limits.q.refill_amount: a limit drips or resets, never both",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, reset_after_seconds: 60, reset_schedule: [{cron: '0 0 * * *'}]}}}}",
        "resources.r.limits.q: a limit has one recovery mechanism",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, reset_after_seconds: true}}}}",
        "resources.r.limits.q.reset_after_seconds: must be a whole number",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, reset_after_seconds: 0}}}}",
        "resources.r.limits.q.reset_after_seconds: must be positive",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, reset_after_seconds: 1000000001}}}}",
        "resources.r.limits.q.reset_after_seconds: must be at most 1000000000",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: daily}}}}",
        "resources.r.limits.q.schedule: must be a list of entries",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [5]}}}}",
        "resources.r.limits.q.schedule[0]: must be a mapping",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{cron: '* * * * *', scale: 2, every: 1}]}}}}",
        "resources.r.limits.q.schedule[0]: unknown field(s) every",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, reset_schedule: [{cron: '0 0 * * *', scale: 2}]}}}}",
        "resources.r.limits.q.reset_schedule[0]: unknown field(s) scale",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{scale: 2}]}}}}",
        "resources.r.limits.q.schedule[0].cron: is required",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{cron: '* * * *', scale: 2}]}}}}",
        "resources.r.limits.q.schedule[0].cron: invalid cron expression",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{cron: '* * * * *', tz: Mars/Olympus, scale: 2}]}}}}",
        "resources.r.limits.q.schedule[0].tz: unknown timezone",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{cron: '* * * * *', scale: 2, capacity: 3}]}}}}",
        "resources.r.limits.q.schedule[0]: must set exactly one of `scale` or the absolute fields",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{cron: '* * * * *', scale: 0}]}}}}",
        "resources.r.limits.q.schedule[0].scale: must be above 0",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, schedule: [{cron: '* * * * *', capacity: 1.0}]}}}}",
        "resources.r.limits.q.schedule[0].capacity: must be a whole number",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, reset_schedule: [{cron: '0 0 * * *'}], schedule: [{cron: '* 9 * * *', refill_amount: 2}]}}}}",
        "resources.r.limits.q.schedule[0].refill_amount: sets 2 on a limit that also resets",
    ),
    (
        "namespace: t\nresources: {r: {limits: {a: {capacity: 5, schedule: [{cron: '* 9 * * *', scale: 2}]}, b: {capacity: 5, schedule: [{cron: '* 9 * * *', tz: Asia/Tokyo, scale: 2}]}}}}",
        "resources.r.limits: all scheduled limits on one level must share a timezone",
    ),
    (
        "namespace: t\nresources: {r: {limits: {wcu: {capacity: 5}}}}",
        "resources.r.limits.wcu: 'wcu' is reserved",
    ),
    (
        "namespace: t\nresources: {r: {limits: {1x: {capacity: 5}}}}",
        "resources.r.limits.1x: limit name '1x' must start with a letter",
    ),
    (
        "namespace: t\nresources: {_default_: {limits: {}}}",
        "resources._default_: '_default_' is an entity-level resource",
    ),
    (
        "namespace: t\nentities: {'a b': {resources: {}}}",
        "entities.a b: entity id name 'a b' must start with a letter or digit",
    ),
    (
        "namespace: t\nresources: {r: {limts: {}}}",
        "resources.r: unknown field(s) limts",
    ),
    (
        "namespace: t\nresources: {r: {limits: {q: {capacity: 5, sotf: true}}}}",
        "resources.r.limits.q: unknown field(s) sotf",
    ),
];

#[test]
fn every_validation_rule_names_its_path_and_writes_nothing() {
    let table = setup("limits-invalid");
    let before = items(&table);
    for (i, (body, expected)) in INVALID.iter().enumerate() {
        let file = write_manifest(&format!("invalid-{i}.yaml"), body);
        let output = zae_limits(&["apply", "-f", file.to_str().unwrap(), "-t", &table]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{body:?} was accepted");
        assert!(
            stderr.contains(expected),
            "{body:?}: expected an error naming `{expected}`, got:\n{stderr}"
        );
    }
    assert_eq!(items(&table), before, "a rejected manifest wrote something");
}

fn acquire_on(table: &str, entity: &str, resource: &str, consume: &[&str], times: u32) -> Value {
    let mut args = vec![
        "acquire",
        "--table",
        table,
        "--entity",
        entity,
        "--resource",
        resource,
    ];
    for c in consume {
        args.extend(["--consume", c]);
    }
    let times = times.to_string();
    args.extend(["--times", &times]);
    client(&args)
}

/// The `#STATE` item of the entity's shard-0 bucket for a resource.
fn bucket(table: &str, entity: &str, resource: &str) -> Value {
    items(table)
        .into_iter()
        .find(|(key, _)| key.ends_with(&format!("/BUCKET#{entity}#{resource}#0 #STATE")))
        .map(|(_, item)| item)
        .unwrap_or_else(|| panic!("no bucket for {entity} on {resource}"))
}

#[test]
fn changes_reach_buckets_that_already_exist() {
    let table = setup("limits-fanout");
    client(&["entity", "--table", &table, "--entity", "proj-1"]);
    client(&[
        "entity", "--table", &table, "--entity", "u1", "--parent", "proj-1",
    ]);
    let first = write_manifest(
        "fanout-1.yaml",
        r#"
namespace: default
system: {limits: {tpm: {capacity: 100}}}
resources:
  gpt-4: {limits: {rpm: {capacity: 100}}}
entities:
  u1: {resources: {gpt-4: {limits: {rpm: {capacity: 10}}}}}
"#,
    );
    ok(&zae_limits(&[
        "apply",
        "-f",
        first.to_str().unwrap(),
        "-t",
        &table,
    ]));
    // Buckets on each kind of level: entity (u1), resource (u2), system (u3 on claude).
    acquire_on(&table, "u1", "gpt-4", &["rpm=1"], 1);
    acquire_on(&table, "u2", "gpt-4", &["rpm=1"], 1);
    acquire_on(&table, "u3", "claude", &["tpm=10"], 1);
    assert!(
        bucket(&table, "u1", "gpt-4")
            .get("cascade")
            .is_none_or(|c| c["BOOL"] == false)
    );

    let second = write_manifest(
        "fanout-2.yaml",
        r#"
namespace: default
system: {limits: {tpm: {capacity: 100, soft: true}}}
resources:
  gpt-4: {disabled: bypass, limits: {rpm: {capacity: 100}}}
entities:
  u1: {resources: {gpt-4: {disabled: false, cascade: true, limits: {rpm: {capacity: 20}}}}}
"#,
    );
    let applied = ok(&zae_limits(&[
        "apply",
        "-f",
        second.to_str().unwrap(),
        "-t",
        &table,
    ]));
    assert!(
        applied.contains("Applied: 0 created, 3 updated, 0 deleted."),
        "{applied}"
    );

    // Re-applying it unchanged costs reads only, explicit `disabled` repairs included.
    let output = zae_limits(&[
        "apply",
        "-f",
        second.to_str().unwrap(),
        "-t",
        &table,
        "--stats",
    ]);
    ok(&output);
    let stats = String::from_utf8_lossy(&output.stderr);
    let calls: Value = serde_json::from_str(stats.lines().last().unwrap()).unwrap();
    let operations: Vec<&String> = calls["dynamodb_calls"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(operations, ["GetItem", "Query"], "{calls}");

    // Resource bypass reaches u2, and not u1, whose own `disabled: false` carves it out.
    let u2 = bucket(&table, "u2", "gpt-4");
    assert!(u2["bypass"]["N"].as_str().is_some(), "u2 not stamped: {u2}");
    let bypassed = acquire_on(&table, "u2", "gpt-4", &["rpm=500"], 1);
    assert_eq!(
        bypassed["ok"], 1,
        "a bypassed resource rejected: {bypassed}"
    );
    let u1 = bucket(&table, "u1", "gpt-4");
    assert!(
        u1.get("bypass").is_none(),
        "the carve-out was stamped: {u1}"
    );
    // Entity param sync: u1's bucket now holds rpm 20, in millitokens.
    assert_eq!(u1["b_rpm_cp"]["N"], "20000");
    assert_eq!(u1["vu"]["N"], "0");
    assert!(u1.get("ttl").is_none());
    // Cascade policy stamped with the parent from META.
    assert_eq!(u1["cascade"]["BOOL"], true);
    assert_eq!(u1["parent_id"]["S"], "proj-1");
    // The client sees the new ceiling; the balance it had stays (9 of the old 10).
    let limited = acquire_on(&table, "u1", "gpt-4", &["rpm=5"], 1);
    assert_eq!(limited["ok"], 1, "{limited}");
    assert_eq!(limited["buckets"]["rpm"]["capacity_milli"], 20_000);
    let over = acquire_on(&table, "u1", "gpt-4", &["rpm=21"], 1);
    assert_eq!(over["violated"], json!(["rpm"]), "{over}");
    // The system-wide soft restamp (GSI4) reaches u3's bucket on the system default.
    let u3 = bucket(&table, "u3", "claude");
    assert!(
        u3["b_tpm_soft"]["N"].as_str().is_some(),
        "u3 not restamped: {u3}"
    );
    let metered = acquire_on(&table, "u3", "claude", &["tpm=500"], 1);
    assert_eq!(
        (metered["ok"].as_u64(), metered["overdrawn"].clone()),
        (Some(1), json!(["tpm"]))
    );

    // Dropping the entity level hands u1 back to the resource default, with a TTL.
    let third = write_manifest(
        "fanout-3.yaml",
        r#"
namespace: default
system: {limits: {tpm: {capacity: 100, soft: true}}}
resources:
  gpt-4: {limits: {rpm: {capacity: 100}}}
"#,
    );
    let applied = ok(&zae_limits(&[
        "apply",
        "-f",
        third.to_str().unwrap(),
        "-t",
        &table,
    ]));
    assert!(applied.contains("1 updated, 1 deleted"), "{applied}");
    let u1 = bucket(&table, "u1", "gpt-4");
    assert_eq!(u1["b_rpm_cp"]["N"], "100000");
    assert!(
        u1["ttl"]["N"].as_str().is_some(),
        "fallback limits carry a TTL: {u1}"
    );
    assert!(
        bucket(&table, "u2", "gpt-4").get("bypass").is_none(),
        "leaving bypass unstamps"
    );
    let pending = ok(&zae_limits(&[
        "plan",
        "-f",
        third.to_str().unwrap(),
        "-t",
        &table,
    ]));
    assert_eq!(pending.trim(), "No changes. Infrastructure is up-to-date.");
}

#[test]
fn a_large_apply_finds_buckets_with_one_sweep_and_misses_none() {
    let table = setup("limits-sweep");
    let entities = |capacity: u32| -> String {
        (0..70)
            .map(|i| format!("  u{i}: {{resources: {{gpt-4: {{limits: {{rpm: {{capacity: {capacity}}}}}}}}}}}\n"))
            .collect()
    };
    let first = write_manifest(
        "sweep-1.yaml",
        &format!(
            "namespace: default\nresources: {{gpt-4: {{limits: {{rpm: {{capacity: 100}}}}}}}}\nentities:\n{}",
            entities(10)
        ),
    );
    ok(&zae_limits(&[
        "apply",
        "-f",
        first.to_str().unwrap(),
        "-t",
        &table,
    ]));
    for entity in ["u0", "u69", "stranger"] {
        acquire_on(&table, entity, "gpt-4", &["rpm=1"], 1);
    }
    let second = write_manifest(
        "sweep-2.yaml",
        &format!(
            "namespace: default\nresources: {{gpt-4: {{limits: {{rpm: {{capacity: 100}}}}}}}}\nentities:\n{}",
            entities(30)
        ),
    );
    let output = zae_limits(&[
        "apply",
        "-f",
        second.to_str().unwrap(),
        "-t",
        &table,
        "--stats",
    ]);
    let applied = ok(&output);
    assert!(
        applied.contains("Applied: 0 created, 70 updated, 0 deleted"),
        "{applied}"
    );
    let stats = String::from_utf8_lossy(&output.stderr);
    let calls: Value = serde_json::from_str(stats.lines().last().unwrap()).unwrap();
    assert!(
        calls["dynamodb_calls"]["Query"].as_u64().unwrap() <= 4,
        "not swept: {calls}"
    );
    for entity in ["u0", "u69"] {
        assert_eq!(
            bucket(&table, entity, "gpt-4")["b_rpm_cp"]["N"],
            "30000",
            "{entity}"
        );
    }
    assert_eq!(
        bucket(&table, "stranger", "gpt-4")["b_rpm_cp"]["N"],
        "100000"
    );
    assert!(pending_items(&table).is_empty());
}

#[test]
fn features_the_tables_lambdas_cannot_read_are_refused_before_any_write() {
    let table = setup("limits-gate");
    client(&["lambda-version", "--table", &table, "--version", "0.16.0"]);
    let before = items(&table);
    let soft = write_manifest(
        "gate.yaml",
        "namespace: default\nresources: {gpt-4: {limits: {tpm: {capacity: 5, soft: true}}}}\n",
    );
    let output = zae_limits(&["apply", "-f", soft.to_str().unwrap(), "-t", &table]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refusing to store soft limits"), "{stderr}");
    assert_eq!(items(&table), before);

    client(&["lambda-version", "--table", &table, "--version", "0.17.0"]);
    ok(&zae_limits(&[
        "apply",
        "-f",
        soft.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let version = &items(&table)["_/SYSTEM# #VERSION"];
    assert_eq!(version["client_min_version"]["S"], "0.17.0", "{version}");
}

/// The provisioner library itself on moto, for what a process boundary hides.
fn store(table: &str) -> zae_table::sdk::DynamoStore {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .endpoint_url(endpoint())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .build();
    zae_table::sdk::DynamoStore::new(aws_sdk_dynamodb::Client::from_conf(config), table)
}

fn pending_items(table: &str) -> Vec<String> {
    items(table)
        .into_keys()
        .filter(|key| key.contains(" #PROVISIONER#PENDING#"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_apply_leaves_its_fan_outs_to_the_next() {
    use cfn_limits_resource::apply::{ApplyError, Caller, Provisioner};
    use cfn_limits_resource::manifest::Manifest;
    let table = setup("limits-resume");
    let base = write_manifest(
        "resume-base.yaml",
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 9}}}}\n",
    );
    ok(&zae_limits(&[
        "apply",
        "-f",
        base.to_str().unwrap(),
        "-t",
        &table,
    ]));
    acquire_on(&table, "u1", "gpt-4", &["rpm=1"], 1);
    acquire_on(&table, "u2", "gpt-4", &["rpm=1"], 1);
    let namespace = client(&["register", "--table", &table])["namespace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let manifest = Manifest::from_yaml(
        "namespace: default\nresources: {gpt-4: {disabled: true, limits: {rpm: {capacity: 9}}}}\nentities: {u1: {resources: {gpt-4: {limits: {rpm: {capacity: 3}}}}}}\n",
    )
    .unwrap();
    let store = store(&table);
    let provisioner = Provisioner {
        store: &store,
        namespace: &namespace,
    };
    let out_of_time = Caller {
        stop_at: Some(tokio::time::Instant::now()),
        ..Caller::local("test")
    };
    let stopped = provisioner.apply(&manifest, false, &out_of_time).await;
    assert!(
        matches!(stopped, Err(ApplyError::OutOfTime { done: 1, total: 2 })),
        "{stopped:?}"
    );
    // Not recorded as applied (the hash is still the first manifest's), but the
    // record already names the level the stopped apply may have written.
    let record = items(&table)[&format!("{namespace}/SYSTEM# #PROVISIONER")].clone();
    assert_eq!(
        record["managed_entities"],
        json!({"M": {"u1": {"L": [{"S": "gpt-4"}]}}}),
        "{record}"
    );
    let owed = pending_items(&table);
    assert!(!owed.is_empty(), "the owed fan-outs were not recorded");
    assert!(
        bucket(&table, "u2", "gpt-4").get("disabled").is_none(),
        "fanned out before the stop"
    );

    let report = provisioner
        .apply(&manifest, false, &Caller::local("test"))
        .await
        .unwrap();
    assert_eq!(report.errors, Some(vec![]));
    assert_eq!(report.pending, 0);
    assert!(
        pending_items(&table).is_empty(),
        "{:?}",
        pending_items(&table)
    );
    assert_eq!(bucket(&table, "u2", "gpt-4")["disabled"]["BOOL"], true);
    assert_eq!(bucket(&table, "u1", "gpt-4")["b_rpm_cp"]["N"], "3000");
}

// ---- CloudFormation and the Python CLI, through the real Lambda binary ----

/// A local `ResponseURL`: records each PUT body CloudFormation would receive.
fn response_receiver() -> (String, mpsc::Receiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/cfn-response", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (_, body) = read_http(&mut stream);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if tx
                .send(serde_json::from_slice(&body).unwrap_or(Value::Null))
                .is_err()
            {
                return;
            }
        }
    });
    (url, rx)
}

/// The built provisioner under the local Lambda endpoint, named as the
/// Python CLI and a table's stack name it: its function name, and the Lambda.
fn provisioner(table: &str) -> (String, Lambda) {
    let function = format!("{table}-limits-provisioner");
    let lambda = Lambda::start(&function, LAMBDA, &[], &scratch(&format!("{function}.log")));
    (function, lambda)
}

fn cfn_event(
    kind: &str,
    url: &str,
    request: &str,
    physical: Option<&str>,
    properties: Value,
) -> Value {
    let mut event = json!({
        "RequestType": kind,
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits",
        "ResponseURL": format!("{url}?request={request}"),
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/guid",
        "RequestId": request,
        "LogicalResourceId": "TenantLimits",
        "ResourceType": "Custom::ZaeLimiterLimits",
        "ResourceProperties": properties,
    });
    if let Some(id) = physical {
        event["PhysicalResourceId"] = json!(id);
    }
    if kind == "Update" {
        event["OldResourceProperties"] = json!({});
    }
    event
}

fn tenant_properties(table: &str, tpm_soft: &str) -> Value {
    json!({
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits",
        "TableName": table,
        "Namespace": "default",
        "Resources": {"gpt-4": {"Limits": {
            "tpm": {"Capacity": "100", "RefillPeriod": "86400", "Soft": tpm_soft},
            "rpm": {"Capacity": "50"}
        }}}
    })
}

fn answered(rx: &mpsc::Receiver<Value>) -> Value {
    rx.recv_timeout(Duration::from_secs(120))
        .expect("CloudFormation got no answer")
}

#[test]
fn a_stack_creates_restamps_and_deletes_its_levels() {
    let table = setup("limits-cfn");
    let (function, lambda) = provisioner(&table);
    let (url, rx) = response_receiver();

    lambda.invoke(
        &function,
        &cfn_event(
            "Create",
            &url,
            "c1",
            None,
            tenant_properties(&table, "true"),
        ),
    );
    let created = answered(&rx);
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    assert!(created.to_string().len() <= 4096);
    let physical = created["PhysicalResourceId"].as_str().unwrap().to_owned();
    assert!(
        physical.starts_with(&format!("{table}/")) && physical.ends_with("/limits-provisioner")
    );
    assert_eq!(created["Data"]["created"], 1);
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 50, 50, 60, false),
            limit("tpm", 100, 100, 86_400, true)
        ])
    );
    assert!(
        read["audit"]["$RESOURCE:gpt-4"][0]["principal"]
            .as_str()
            .unwrap()
            .starts_with("arn:aws:cloudformation:")
    );

    // CloudFormation's own retry of the same request: answered alike, nothing rewritten.
    lambda.invoke(
        &function,
        &cfn_event(
            "Create",
            &url,
            "c1",
            None,
            tenant_properties(&table, "true"),
        ),
    );
    let retried = answered(&rx);
    assert_eq!(retried["Status"], "SUCCESS", "{retried}");
    assert_eq!(retried["PhysicalResourceId"], physical.as_str());
    assert_eq!(
        (
            retried["Data"]["created"].as_u64(),
            retried["Data"]["unchanged"].as_u64()
        ),
        (Some(0), Some(1))
    );
    let events =
        read_levels(&table, "default", &["resource:gpt-4"])["audit"]["$RESOURCE:gpt-4"].clone();
    assert_eq!(events.as_array().unwrap().len(), 1, "{events}");

    // Another stack may not take the namespace over, nor delete it.
    let mut intruder = cfn_event(
        "Create",
        &url,
        "c9",
        None,
        tenant_properties(&table, "false"),
    );
    intruder["StackId"] = json!("arn:aws:cloudformation:us-east-1:123456789012:stack/other/guid");
    lambda.invoke(&function, &intruder);
    let refused = answered(&rx);
    assert_eq!(refused["Status"], "FAILED", "{refused}");
    assert!(
        refused["Reason"]
            .as_str()
            .unwrap()
            .contains("is managed by another custom resource")
    );
    let mut stray = cfn_event(
        "Delete",
        &url,
        "d9",
        Some(&physical),
        tenant_properties(&table, "false"),
    );
    stray["StackId"] = json!("arn:aws:cloudformation:us-east-1:123456789012:stack/other/guid");
    lambda.invoke(&function, &stray);
    assert_eq!(answered(&rx)["Status"], "SUCCESS");
    let elsewhere = cfn_event(
        "Delete",
        &url,
        "d8",
        Some("other-table/ns/limits-provisioner"),
        tenant_properties(&table, "false"),
    );
    lambda.invoke(&function, &elsewhere);
    assert_eq!(answered(&rx)["Status"], "SUCCESS");
    let still = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        still["levels"]["resource:gpt-4"]["limits"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{still}"
    );

    // The CLI still works on a stack's namespace, and says whose it is.
    let owned = write_manifest(
        "owned.yaml",
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 50}}}}\n",
    );
    let planned = zae_limits(&["plan", "-f", owned.to_str().unwrap(), "-t", &table]);
    ok(&planned);
    let warning = String::from_utf8_lossy(&planned.stderr);
    assert!(
        warning.contains("is managed by the custom resource arn:aws:cloudformation")
            && warning.contains("|TenantLimits"),
        "{warning}"
    );

    // A bucket on the soft default: over the limit, and still admitted.
    let soft = acquire(&table, "user-1", &["tpm=80"], 2);
    assert_eq!(
        (soft["ok"].as_u64(), soft["rejected"].as_u64()),
        (Some(2), Some(0)),
        "{soft}"
    );

    lambda.invoke(
        &function,
        &cfn_event(
            "Update",
            &url,
            "u1",
            Some(&physical),
            tenant_properties(&table, "false"),
        ),
    );
    let updated = answered(&rx);
    assert_eq!(updated["Status"], "SUCCESS", "{updated}");
    assert_eq!(updated["PhysicalResourceId"], physical.as_str());
    let bucket = items(&table)
        .into_iter()
        .find(|(key, _)| key.contains("/BUCKET#user-1#gpt-4#") && key.ends_with(" #STATE"))
        .map(|(_, item)| item)
        .expect("user-1's bucket");
    assert!(
        bucket.get("b_tpm_soft").is_none(),
        "the soft stamp was not removed: {bucket}"
    );
    let hard = acquire(&table, "user-1", &["tpm=80"], 1);
    assert_eq!(hard["rejected"], 1, "{hard}");
    assert_eq!(hard["violated"], json!(["tpm"]));

    lambda.invoke(
        &function,
        &cfn_event(
            "Delete",
            &url,
            "d1",
            Some(&physical),
            tenant_properties(&table, "false"),
        ),
    );
    let deleted = answered(&rx);
    assert_eq!(deleted["Status"], "SUCCESS", "{deleted}");
    assert_eq!(deleted["Data"]["deleted"], 1);
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(read["levels"]["resource:gpt-4"]["limits"], json!([]));

    // The Delete released the namespace: the next stack that declares it takes it.
    let mut successor = cfn_event(
        "Create",
        &url,
        "c10",
        None,
        tenant_properties(&table, "false"),
    );
    successor["StackId"] = json!("arn:aws:cloudformation:us-east-1:123456789012:stack/next/guid");
    lambda.invoke(&function, &successor);
    let taken = answered(&rx);
    assert_eq!(taken["Status"], "SUCCESS", "{taken}");
    let record = items(&table)
        .into_iter()
        .find(|(key, _)| key.ends_with("/SYSTEM# #PROVISIONER"))
        .map(|(_, item)| item)
        .expect("the state record");
    assert_eq!(
        record["cfn_owner"]["S"],
        "arn:aws:cloudformation:us-east-1:123456789012:stack/next/guid|TenantLimits"
    );
}

#[test]
fn a_failed_create_and_its_rollback_leave_the_namespace_alone() {
    let table = setup("limits-rollback");
    let existing = write_manifest(
        "rollback-existing.yaml",
        "namespace: default\nsystem: {limits: {rpm: {capacity: 77}}}\n",
    );
    ok(&zae_limits(&[
        "apply",
        "-f",
        existing.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let before = items(&table);
    let (function, lambda) = provisioner(&table);
    let (url, rx) = response_receiver();

    let mut bad = tenant_properties(&table, "true");
    bad["Resources"]["gpt-4"]["Limits"]["rpm"]["Capacity"] = json!("lots");
    lambda.invoke(
        &function,
        &cfn_event("Create", &url, "c2", None, bad.clone()),
    );
    let failed = answered(&rx);
    assert_eq!(failed["Status"], "FAILED");
    assert!(
        failed["Reason"]
            .as_str()
            .unwrap()
            .contains("Resources.gpt-4.Limits.rpm.Capacity: must be a whole number, got 'lots'"),
        "{failed}"
    );
    let marker = failed["PhysicalResourceId"].as_str().unwrap().to_owned();
    assert_eq!(items(&table), before, "a failed Create wrote something");

    lambda.invoke(
        &function,
        &cfn_event("Delete", &url, "d2", Some(&marker), bad),
    );
    let rollback = answered(&rx);
    assert_eq!(rollback["Status"], "SUCCESS", "{rollback}");
    assert_eq!(
        items(&table),
        before,
        "the rollback Delete wiped the namespace"
    );
    let read = read_levels(&table, "default", &["system"]);
    assert_eq!(
        read["levels"]["system"]["limits"],
        json!([limit("rpm", 77, 77, 60, false)])
    );
}

/// `zae-limiter limits COMMAND --name TABLE --file MANIFEST`, the unchanged
/// Python CLI, with DynamoDB on moto and Lambda on the shim.
fn python_cli(table: &str, lambda: &Lambda, command: &str, manifest: &std::path::Path) -> Output {
    let mut cmd = Command::new(python().parent().unwrap().join("zae-limiter"));
    cmd.args(["limits", command, "--name", table, "--file"])
        .arg(manifest);
    aws_env(&mut cmd, endpoint());
    cmd.env_remove("AWS_ENDPOINT_URL")
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint())
        .env("AWS_ENDPOINT_URL_LAMBDA", &lambda.url);
    cmd.output().expect("run zae-limiter")
}

#[test]
fn the_python_cli_plans_and_applies_through_the_lambda() {
    let table = setup("limits-pycli");
    let (function, lambda) = provisioner(&table);
    let manifest = write_manifest("pycli.yaml", TENANT);
    let cli = |command: &str| python_cli(&table, &lambda, command, &manifest);
    let plan = ok(&cli("plan"));
    assert!(plan.starts_with("Plan: 5 change(s)"), "{plan}");
    assert!(plan.contains("+ create entity: key-b/_default_"), "{plan}");
    let apply = ok(&cli("apply"));
    assert!(
        apply.contains("Applied: 5 created, 0 updated, 0 deleted."),
        "{apply}"
    );
    let again = ok(&cli("plan"));
    assert!(
        again.contains("No changes. Infrastructure is up-to-date."),
        "{again}"
    );
    let diff = ok(&cli("diff"));
    assert!(diff.contains("No drift detected."), "{diff}");
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 3, 3, 60, false),
            limit("tpm", 500, 500, 86_400, true)
        ])
    );
    assert!(
        read["audit"]["$RESOURCE:gpt-4"][0]["principal"]
            .as_str()
            .unwrap()
            .ends_with(&format!(":function:{function}"))
    );
}

const PLAIN: &str = "namespace: default
resources:
  gpt-4:
    limits:
      rpm: {capacity: 100, refill_amount: 10}
";

const ADAPTIVE: &str = "namespace: default
resources:
  gpt-4:
    estimated_capacity: {rpm: 600}
    limits:
      rpm: {capacity: 100, refill_amount: 10, adaptive: utilization}
";

/// The unchanged Python CLI on a namespace with every adaptive item in the
/// table (the declaration, a target at 5x, the table's tick record, its
/// canaries and their sensed set, a usage minute, and a bucket carrying a
/// stamp's record): `plan`, `diff` and `apply` print what
/// they print on the same config without them, the declaration shows as one
/// `adaptive` change, and the client reads the same levels.
#[test]
fn the_python_cli_plans_and_applies_an_adaptive_namespace_as_any_other() {
    use zae_table::adaptive::target::Target;
    use zae_table::adaptive::tick::{Tick, Written};
    use zae_table::adaptive::{Factor, canary, usage};
    use zae_table::store::{Returns, Store};
    let table = setup("limits-pycli-adaptive");
    let (_, lambda) = provisioner(&table);
    let plain = write_manifest("plain.yaml", PLAIN);
    let adaptive = write_manifest("adaptive.yaml", ADAPTIVE);
    let cli =
        |command: &str, manifest: &PathBuf| ok(&python_cli(&table, &lambda, command, manifest));

    let applied = cli("apply", &plain);
    assert!(applied.contains("Applied: 1 created"), "{applied}");
    let levels = read_levels(&table, "default", &["resource:gpt-4"])["levels"].clone();
    let (plan, diff) = (cli("plan", &plain), cli("diff", &plain));
    assert!(plan.contains("No changes."), "{plan}");
    assert!(diff.contains("No drift detected."), "{diff}");

    let planned = cli("plan", &adaptive);
    assert!(planned.starts_with("Plan: 1 change(s)"), "{planned}");
    assert!(
        planned.contains("+ create adaptive: gpt-4 rpm ~600/min"),
        "{planned}"
    );
    assert!(cli("apply", &adaptive).contains("Applied: 1 created"));

    // What the controller and the sensor add to the namespace.
    let ns = client(&["register", "--table", &table, "--namespace", "default"])["namespace_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let store = store(&table);
    let mut target = Target::base("gpt-4", "rpm");
    target.factor = Factor::from_ppm(5_000_000);
    target.generation = 1;
    target.stamped = 1;
    let now = chrono::Utc::now().timestamp_millis();
    let mut tick = Tick::default();
    tick.ticked(
        now,
        Some(Written {
            at_ms: now,
            count: 4,
        }),
    );
    let used = std::collections::BTreeMap::from([("rpm".to_owned(), 120_000)]);
    let minute = usage::minute_of(now) - usage::MINUTE_MS;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let writes = [
            target.write(&ns, None),
            tick.write(),
            usage::add(&ns, "gpt-4", minute, &used),
            canary::sense(now, &[0, 1, 2, 3]),
        ];
        for update in &writes {
            store.update(update, Returns::Nothing).await.unwrap();
        }
        for k in 0..4 {
            store.put(&canary::item(now, k), None).await.unwrap();
        }
    });

    assert_eq!(cli("plan", &adaptive), plan);
    assert_eq!(cli("diff", &adaptive), diff);
    let again = cli("apply", &adaptive);
    assert!(again.contains("No changes."), "{again}");
    assert_eq!(
        read_levels(&table, "default", &["resource:gpt-4"])["levels"],
        levels
    );
    let dropped = cli("plan", &plain);
    assert!(dropped.starts_with("Plan: 1 change(s)"), "{dropped}");
    assert!(dropped.contains("- delete adaptive"), "{dropped}");
}

// ---- A table nobody has opened: the stack's initialisation and --create-namespace ----

const SOFT: &str = "namespace: default
resources:
  gpt-4:
    limits:
      tpm: {capacity: 500, refill_period: 86400, soft: true}
";

/// A table from the template's `Table` resource alone: no version record,
/// no namespace.
fn schema_only_table(name: &str) -> String {
    let table = unique_table(name);
    let made = run_json("stack_table.py", &["create", "--table", &table]);
    assert_eq!(made["items"], 0, "{made}");
    table
}

fn version_record(table: &str) -> Value {
    run_json("stack_table.py", &["version", "--table", table])
}

/// `zae-limits apply` on a table no client has opened: refused, naming the
/// way out, with nothing written; with `--create-namespace` the table is
/// initialised (version record stamped for these Lambdas, so the soft limit
/// passes the version gate), the namespace registered, and the client reads
/// the soft limit back.
#[test]
fn zae_limits_creates_the_namespace_of_a_table_nobody_opened_only_when_asked() {
    let table = schema_only_table("schema-cli");
    let manifest = write_manifest("soft.yaml", SOFT);
    let file = manifest.to_str().unwrap();
    let refused = zae_limits(&["apply", "-f", file, "-t", &table]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("namespace 'default' is not registered")
            && stderr.contains("--create-namespace"),
        "{stderr}"
    );
    assert!(items(&table).is_empty());
    let applied = zae_limits(&["apply", "-f", file, "-t", &table, "--create-namespace"]);
    let out = ok(&applied);
    assert!(out.contains("Applied: 1 created"), "{out}");
    let stderr = String::from_utf8_lossy(&applied.stderr);
    assert!(
        stderr.contains("registered namespace 'default'"),
        "{stderr}"
    );
    assert_eq!(version_record(&table)["lambda_version"], STAMP);
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([limit("tpm", 500, 500, 86_400, true)])
    );
    // Once registered, asking again changes nothing.
    let again = zae_limits(&["apply", "-f", file, "-t", &table, "--create-namespace"]);
    assert!(ok(&again).contains("Applied: 0 created"));
    assert!(!String::from_utf8_lossy(&again.stderr).contains("registered"));
}

fn table_event(kind: &str, url: &str, request: &str, table: &str, physical: Option<&str>) -> Value {
    let mut event = cfn_event(
        kind,
        url,
        request,
        physical,
        json!({
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:limits",
            "TableName": table,
            "Namespaces": ["default", "tenant-a"],
            "Version": VERSION
        }),
    );
    event["ResourceType"] = json!("Custom::ZaeLimiterTable");
    event["LogicalResourceId"] = json!("TableInit");
    event
}

/// The stack's `Custom::ZaeLimiterTable`, through the built Lambda, on a
/// table from the schema alone: it stamps the version record and registers
/// the namespaces; a tenant stack's soft limit then applies and reads back
/// through the client, while one naming an unregistered namespace fails
/// with the way out; the unchanged client opens the table with its default
/// `auto_update=True` and makes no Lambda or CloudFormation call (its calls
/// are recorded), and its own version gate takes a soft limit; the
/// resource's Delete puts the stamp back to the Python Lambdas' 0.17.0 and
/// keeps the namespaces.
#[test]
fn the_stack_initialises_its_table_and_the_unchanged_client_uses_it_without_updating_lambdas() {
    let table = schema_only_table("schema-stack");
    let (function, lambda) = provisioner(&table);
    let (url, rx) = response_receiver();
    lambda.invoke(&function, &table_event("Create", &url, "t1", &table, None));
    let created = answered(&rx);
    assert_eq!(created["Status"], "SUCCESS", "{created}");
    assert_eq!(created["PhysicalResourceId"], format!("{table}/table"));
    let ids = created["Data"]["NamespaceIds"].clone();
    assert_eq!(version_record(&table)["lambda_version"], STAMP);

    let mut stray = tenant_properties(&table, "true");
    stray["Namespace"] = json!("tenant-b");
    lambda.invoke(&function, &cfn_event("Create", &url, "t2", None, stray));
    let refused = answered(&rx);
    assert_eq!(refused["Status"], "FAILED", "{refused}");
    let reason = refused["Reason"].as_str().unwrap();
    assert!(
        reason.contains("'tenant-b' is not registered") && reason.contains("Namespaces"),
        "{reason}"
    );
    let tenant = tenant_properties(&table, "true");
    lambda.invoke(&function, &cfn_event("Create", &url, "t3", None, tenant));
    assert_eq!(answered(&rx)["Status"], "SUCCESS");
    let read = read_levels(&table, "default", &["resource:gpt-4"]);
    assert_eq!(read["namespace_id"], ids["default"]);
    assert_eq!(
        read["levels"]["resource:gpt-4"]["limits"],
        json!([
            limit("rpm", 50, 50, 60, false),
            limit("tpm", 100, 100, 86_400, true)
        ])
    );

    let opened = run_json("stack_table.py", &["open", "--table", &table]);
    let calls: Vec<&str> = opened["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("lambda:") || c.starts_with("cloudformation:")),
        "{calls:?}"
    );
    assert_eq!(opened["namespace_id"], ids["default"]);
    assert_eq!(opened["limits"][0]["soft"], true, "{opened}");

    let delete = table_event(
        "Delete",
        &url,
        "t4",
        &table,
        Some(&format!("{table}/table")),
    );
    lambda.invoke(&function, &delete);
    assert_eq!(answered(&rx)["Status"], "SUCCESS");
    assert_eq!(version_record(&table)["lambda_version"], "0.17.0");
    let kept = client(&["register", "--table", &table, "--namespace", "tenant-a"]);
    assert_eq!(kept["namespace_id"], ids["tenant-a"]);
}

/// The first line a function's log holds from its bootstrap (the shim's own
/// notes left out), as JSON.
fn first_log_line(function: &str) -> Value {
    let log = std::fs::read_to_string(scratch(&format!("{function}.log"))).unwrap();
    let first = log
        .lines()
        .find(|l| !l.starts_with("[lambda_shim"))
        .expect("the function logged nothing");
    serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"))
}

/// The client's version checks on a table, as `stack_table.py gates` runs them.
fn client_gates(table: &str) -> Value {
    run_json("stack_table.py", &["gates", "--table", table])
}

const GATES: [&str; 5] = [
    "reset_after",
    "non_enforcing",
    "cascade_policy",
    "parent_move",
    "top_up",
];

/// A stack upgraded from a build before 0.8.0: its table reads that build's
/// stamp `0.17.0+rust`, owned by the stack's `TableInit`. The Update the new
/// template's `Version` brings re-stamps it with this build's, through the
/// built Lambda, whose first log line names both. The unchanged 0.17.0 client
/// then finds the table compatible with no Lambda update, connects, and
/// passes every gate that reads `lambda_version` (a write through each). The
/// Delete restores 0.17.0 from an earlier build's stamp as well. A control:
/// the same checks refuse a record stamped with the bare crate version.
#[test]
fn a_table_an_earlier_build_stamped_is_restamped_and_the_unchanged_client_passes_every_gate() {
    let table = schema_only_table("restamp");
    let (function, lambda) = provisioner(&table);
    let (url, rx) = response_receiver();
    lambda.invoke(&function, &table_event("Create", &url, "r1", &table, None));
    assert_eq!(answered(&rx)["Status"], "SUCCESS");
    let first = first_log_line(&function);
    assert_eq!(first["version"], VERSION, "{first}");
    assert_eq!(first["table_stamp"], STAMP, "{first}");

    let earlier = || {
        client(&[
            "lambda-version",
            "--table",
            &table,
            "--version",
            "0.17.0+rust",
        ])
    };
    earlier();
    let physical = format!("{table}/table");
    let update = table_event("Update", &url, "r2", &table, Some(&physical));
    lambda.invoke(&function, &update);
    let updated = answered(&rx);
    assert_eq!(updated["Status"], "SUCCESS", "{updated}");
    let record = version_record(&table);
    assert_eq!(record["lambda_version"], STAMP, "{record}");
    assert_eq!(record["updated_by"], format!("cfn:{STAMP}"), "{record}");

    let gates = client_gates(&table);
    assert_eq!(gates["compatibility"]["is_compatible"], true, "{gates}");
    assert_eq!(
        gates["compatibility"]["requires_lambda_update"], false,
        "{gates}"
    );
    assert_eq!(gates["connect"], "accepted", "{gates}");
    for gate in GATES {
        assert_eq!(gates["gates"][gate], "accepted", "{gate}: {gates}");
    }

    earlier();
    let delete = table_event("Delete", &url, "r3", &table, Some(&physical));
    lambda.invoke(&function, &delete);
    assert_eq!(answered(&rx)["Status"], "SUCCESS");
    assert_eq!(version_record(&table)["lambda_version"], "0.17.0");

    client(&["lambda-version", "--table", &table, "--version", VERSION]);
    let refused = client_gates(&table);
    assert_eq!(
        refused["compatibility"]["requires_lambda_update"], true,
        "{refused}"
    );
    assert!(
        refused["connect"].as_str().unwrap().starts_with("refused"),
        "{refused}"
    );
    for gate in GATES {
        let said = refused["gates"][gate].as_str().unwrap();
        assert!(said.starts_with("refused"), "{gate}: {said}");
    }
}

/// `--version` of both binaries: the build and the stamp it writes. The
/// Lambda bootstrap takes no other argument, and says so.
#[test]
fn the_binaries_name_their_build_and_table_stamp() {
    for (binary, name) in [(ZAE_LIMITS, "zae-limits"), (LAMBDA, "cfn-limits-resource")] {
        let out = Command::new(binary).arg("--version").output().unwrap();
        assert_eq!(
            ok(&out),
            format!("{name} {VERSION} (table stamp {STAMP})\n"),
            "{binary}"
        );
    }
    let out = Command::new(LAMBDA).arg("apply").output().unwrap();
    assert_eq!(code(&out), Some(64));
    let said = stderr(&out);
    assert!(said.contains("unexpected argument \"apply\""), "{said}");
}

// ---- The command line: flags, exit codes, errors ----

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `zae-limits ARGS`, which must exit `wanted` and say `says` on stderr.
fn exits(args: &[&str], wanted: i32, says: &str) -> Output {
    let out = zae_limits(args);
    let said = stderr(&out);
    assert_eq!(code(&out), Some(wanted), "{args:?}: {said}");
    assert!(said.contains(says), "{args:?}: {said}");
    out
}

const CASCADING: &str = "namespace: default
resources:
  gpt-4:
    cascade: true
    limits:
      rpm: {capacity: 3}
";

/// Every exit code `zae-limits` documents but 1 (an apply with failed
/// writes: `cli::tests` injects that fault at the store seam), with the
/// flags that lead to them: `-n` as the stack (the table has its name),
/// `--endpoint-url` and `--region` instead of the environment's, `--json`
/// errors on stdout, "did you mean" for manifest fields and namespaces,
/// `--exit-code` on plan and diff, the Python CLI's cascade warning and the
/// apply's progress on stderr, and `init`.
#[test]
fn zae_limits_exit_codes_flags_and_errors() {
    let table = setup("limits-cli");
    let good = write_manifest("cli-good.yaml", CASCADING);
    let good = good.to_str().unwrap();
    // 64: a bad command line, with clap's suggestion.
    exits(
        &["plna", "-f", good, "-n", &table],
        64,
        "similar subcommand exists: 'plan'",
    );
    exits(&["plan", "-f", good], 64, "--name <STACK>|--table <TABLE>");
    exits(
        &["plan", "-f", good, "-n", "a", "-t", "b"],
        64,
        "cannot be used with",
    );
    // 3: an invalid manifest, every problem at its path, as JSON too.
    let bad = write_manifest(
        "cli-bad.yaml",
        "namespace: default\nresources:\n  gpt-4:\n    limits:\n      rpm: {capacty: 3}\n",
    );
    let bad = bad.to_str().unwrap();
    exits(
        &["plan", "-f", bad, "-n", &table],
        3,
        "capacty (did you mean capacity?)",
    );
    let json = exits(&["plan", "-f", bad, "-n", &table, "--json"], 3, "");
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["error"]["exit_code"], 3, "{json}");
    assert_eq!(json["error"]["kind"], "invalid_input");
    assert_eq!(
        json["error"]["problems"][0]["path"], "resources.gpt-4.limits.rpm",
        "{json}"
    );
    // 4: a table that is not there.
    let missing = exits(
        &["plan", "-f", good, "-t", "no-such-table", "--json"],
        4,
        "",
    );
    let json: Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert!(
        json["error"]["hint"].as_str().unwrap().contains("--region"),
        "{json}"
    );
    // 5: a namespace nobody registered, with the name probably meant.
    let other = write_manifest(
        "cli-ns.yaml",
        &CASCADING.replace("namespace: default", "namespace: defualt"),
    );
    exits(
        &["plan", "-f", other.to_str().unwrap(), "-n", &table],
        5,
        "Did you mean 'default'?",
    );
    // 2 and 0: --exit-code on plan and diff, before and after the apply.
    exits(&["plan", "-f", good, "-n", &table], 0, "");
    exits(&["plan", "-f", good, "-n", &table, "--exit-code"], 2, "");
    exits(&["diff", "-f", good, "-n", &table, "--exit-code"], 2, "");
    // The endpoint and region from the flags alone.
    let mut cmd = Command::new(ZAE_LIMITS);
    cmd.args([
        "apply",
        "-f",
        good,
        "-n",
        &table,
        "--endpoint-url",
        endpoint(),
        "--region",
        "us-east-1",
    ]);
    aws_env(&mut cmd, endpoint());
    cmd.env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION");
    let applied = cmd.output().unwrap();
    assert!(ok(&applied).contains("Applied: 1 created"));
    let said = stderr(&applied);
    assert!(
        said.contains("warning: resources.gpt-4 sets cascade: true"),
        "{said}"
    );
    assert!(said.contains("config: writing 1 level(s)"), "{said}");
    exits(&["plan", "-f", good, "-n", &table, "--exit-code"], 0, "");
    exits(&["diff", "-f", good, "-n", &table, "--exit-code"], 0, "");
    let quiet = zae_limits(&["apply", "-f", good, "-n", &table, "--no-progress"]);
    assert!(!stderr(&quiet).contains("config:"), "{}", stderr(&quiet));
    // 6: an apply stopped at --max-seconds with a fan-out left says so, and
    // the same apply again finishes it.
    let uncascaded = write_manifest(
        "cli-uncascade.yaml",
        &CASCADING.replace("cascade: true", "cascade: false"),
    );
    let uncascaded = uncascaded.to_str().unwrap();
    let stopped = [
        "apply",
        "-f",
        uncascaded,
        "-n",
        &table,
        "--max-seconds",
        "0",
    ];
    exits(
        &stopped,
        6,
        "Unfinished: 1 bucket fan-out(s) stopped at --max-seconds",
    );
    exits(&["apply", "-f", uncascaded, "-n", &table], 0, "");
    // init: idempotent, JSON on request.
    let init = ok(&zae_limits(&[
        "init", "-n", &table, "-N", "default", "-N", "tenant-a", "--json",
    ]));
    let init: Value = serde_json::from_str(&init).unwrap();
    assert_eq!(init["lambda_version"], STAMP);
    assert_eq!(init["namespaces"][0]["created"], false, "{init}");
    assert_eq!(init["namespaces"][1]["created"], true, "{init}");
}

/// `cfn-template`'s output read by PyYAML, a YAML 1.1 reader as
/// CloudFormation is: names such as `on`, `yes`, `off` and `y` stay strings
/// (a YAML 1.2 writer leaves them plain, and YAML 1.1 reads them as booleans).
#[test]
fn the_printed_tenant_stack_reads_the_same_in_yaml_1_1() {
    use std::io::Write as _;
    let manifest = write_manifest(
        "yaml11.yaml",
        "namespace: y\nresources:\n  'on':\n    limits: {rpm: {capacity: 3}}\n\
         entities:\n  'yes': {resources: {'off': {limits: {rpm: {capacity: 1}}}}}\n",
    );
    let text = ok(&zae_limits(&[
        "cfn-template",
        "-f",
        manifest.to_str().unwrap(),
        "-n",
        "rate-limits",
    ]));
    let mut reader = Command::new(python())
        .args([
            "-c",
            "import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    reader
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let read: Value = serde_json::from_slice(&reader.wait_with_output().unwrap().stdout).unwrap();
    let props = &read["Resources"]["TenantLimits"]["Properties"];
    assert_eq!(props["Namespace"], "y", "{text}");
    assert_eq!(
        props["Resources"]["on"]["Limits"]["rpm"]["Capacity"], 3,
        "{text}"
    );
    assert_eq!(
        props["Entities"]["yes"]["Resources"]["off"]["Limits"]["rpm"]["Capacity"], 1,
        "{text}"
    );
    assert_eq!(
        props["TableName"]["Fn::ImportValue"],
        "rate-limits-TableName"
    );
}

/// `zae-limits release-owner` on moto: refused without a terminal and
/// without `--yes`; with `--yes` it names the stack and frees the
/// namespace, which a new stack's resource then claims.
#[tokio::test(flavor = "multi_thread")]
async fn release_owner_frees_a_namespace_whose_owner_is_gone() {
    use cfn_limits_resource::apply::{Caller, Ownership, Provisioner};
    use cfn_limits_resource::manifest::Manifest;
    let table = setup("limits-release");
    let store = store(&table);
    let ns = cfn_limits_resource::apply::state::namespace_id(&store, "default")
        .await
        .unwrap()
        .unwrap();
    let dead = "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant-a/1|Limits";
    let manifest = Manifest::from_yaml(
        "namespace: default\nresources: {gpt-4: {limits: {rpm: {capacity: 5}}}}\n",
    )
    .unwrap();
    let caller = Caller {
        ownership: Ownership::Claim(dead.into()),
        ..Caller::local("test")
    };
    let provisioner = Provisioner {
        store: &store,
        namespace: &ns,
    };
    provisioner.apply(&manifest, false, &caller).await.unwrap();
    let owner = || provisioner_owner(&table, &ns);
    assert_eq!(owner().as_deref(), Some(dead));

    let refused = exits(&["release-owner", "-t", &table], 64, "pass --yes");
    assert!(
        stderr(&refused).contains("stack/tenant-a/1"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        owner().as_deref(),
        Some(dead),
        "released without confirmation"
    );

    let released = zae_limits(&["release-owner", "-t", &table, "--yes"]);
    assert!(
        ok(&released).contains("released from"),
        "{}",
        stderr(&released)
    );
    assert_eq!(owner(), None);
    let again = ok(&zae_limits(&["release-owner", "-t", &table, "--yes"]));
    assert!(again.contains("nothing to release"), "{again}");
}

/// The `cfn_owner` of a namespace's `#PROVISIONER` record, on moto.
fn provisioner_owner(table: &str, namespace: &str) -> Option<String> {
    use zae_table::keys;
    let key = format!("{} {}", keys::pk_system(namespace), keys::SK_PROVISIONER);
    items(table)
        .get(&key)
        .and_then(|item| item["cfn_owner"]["S"].as_str().map(str::to_owned))
}

/// `tests/harness/fault_proxy.py` in front of moto, passing the first
/// `writes` writes and refusing every later one as a role would
/// (AccessDeniedException): its endpoint, and the process (killed when
/// dropped; it also exits with this test).
fn denying_proxy(writes: u32) -> (String, ChildGuard) {
    use std::io::BufRead;
    let mut child = Command::new(python())
        .arg(harness("fault_proxy.py"))
        .args(["--target", moto(), "--deny-after", &writes.to_string()])
        .args(["--parent-pid", &std::process::id().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the fault proxy");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .expect("the proxy's port");
    let port: u16 = line.trim().parse().expect("the proxy prints its port");
    wait_for_port(port, "fault proxy", &mut child);
    (format!("http://127.0.0.1:{port}"), ChildGuard(child))
}

struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `#PROVISIONER` record's managed set and owner, on moto.
fn managed_record(table: &str) -> (Value, Value, Value, Value) {
    let record = items(table)
        .into_iter()
        .find(|(key, _)| key.ends_with("/SYSTEM# #PROVISIONER"))
        .map(|(_, item)| item)
        .expect("the state record");
    (
        record["managed_system"].clone(),
        record["managed_resources"].clone(),
        record["managed_entities"].clone(),
        record["cfn_owner"].clone(),
    )
}

/// Issue 40, item 9, as a user met it: the built Lambda under the local
/// Runtime API on moto, its DynamoDB behind a proxy that lets the claim
/// through and refuses the next write. The CLI applied `gpt-5` at 50 and
/// `claude` at 70; a stack's Create of `gpt-5` at 100 fails after its
/// claim; its rollback Delete used to answer SUCCESS ("1 deleted") and
/// leave no `gpt-5` at all, and the managed set empty (a CLI apply that
/// dropped `claude` left it at 70). Now the real client reads the CLI's
/// levels back, and the CLI still manages them.
#[test]
fn the_rollback_of_a_failed_create_leaves_the_clis_overlapping_levels() {
    let table = setup("limits-overlap");
    let cli = "namespace: default\nsystem: {limits: {tpm: {capacity: 1000}}}\nresources:\n  \
               gpt-5: {limits: {rpm: {capacity: 50}}}\n  claude: {limits: {rpm: {capacity: 70}}}\n";
    let manifest = write_manifest("overlap-cli.yaml", cli);
    ok(&zae_limits(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let before = managed_record(&table);
    let function = format!("{table}-limits-provisioner");
    let (url, rx) = response_receiver();
    let mut properties = tenant_properties(&table, "false");
    properties["Resources"] = json!({"gpt-5": {"Limits": {"rpm": {"Capacity": "100"}}}});
    {
        let (proxy, _proxy) = denying_proxy(1);
        let log = scratch(&format!("{function}-denied.log"));
        let env = [("AWS_ENDPOINT_URL_DYNAMODB", proxy.as_str())];
        let denied = Lambda::start(&function, LAMBDA, &env, &log);
        let create = cfn_event("Create", &url, "c1", None, properties.clone());
        denied.invoke(&function, &create);
    }
    let failed = answered(&rx);
    assert_eq!(failed["Status"], "FAILED", "{failed}");
    assert!(
        failed["Reason"].as_str().unwrap().contains("AccessDenied"),
        "{failed}"
    );
    let failed_id = failed["PhysicalResourceId"].as_str().unwrap().to_owned();
    assert!(failed_id.ends_with("/failed"), "{failed_id}");
    let stack = "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/guid|TenantLimits";
    assert_eq!(managed_record(&table).3["S"], stack, "the claim landed");

    let (_, lambda) = provisioner(&table);
    let rollback = cfn_event("Delete", &url, "d1", Some(&failed_id), properties);
    lambda.invoke(&function, &rollback);
    let rolled = answered(&rx);
    assert_eq!(rolled["Status"], "SUCCESS", "{rolled}");
    let levels = ["system", "resource:gpt-5", "resource:claude"];
    let read = read_levels(&table, "default", &levels);
    assert_eq!(
        read["levels"]["resource:gpt-5"]["limits"],
        json!([limit("rpm", 50, 50, 60, false)]),
        "{rolled}"
    );
    assert_eq!(
        read["levels"]["resource:claude"]["limits"],
        json!([limit("rpm", 70, 70, 60, false)])
    );
    assert_eq!(
        read["levels"]["system"]["limits"],
        json!([limit("tpm", 1000, 1000, 60, false)])
    );
    assert_eq!(
        managed_record(&table),
        before,
        "the managed set and no owner"
    );

    // The CLI still manages `claude`: dropping it deletes it.
    let dropped = cli.replace("  claude: {limits: {rpm: {capacity: 70}}}\n", "");
    let manifest = write_manifest("overlap-cli-dropped.yaml", &dropped);
    ok(&zae_limits(&[
        "apply",
        "-f",
        manifest.to_str().unwrap(),
        "-t",
        &table,
    ]));
    let read = read_levels(&table, "default", &["resource:claude"]);
    assert_eq!(read["levels"]["resource:claude"]["limits"], json!([]));
}
// The applies that need only DynamoDB (the CLI, and the Lambda under the
// local Runtime API shim), on AWS's DynamoDB Local too.
zae_test_support::also_on_dynamodb_local!(
    a_manifest_reads_back_through_the_client_and_governs_its_acquires,
    config_items_are_the_ones_the_client_writes_and_a_plan_over_them_is_empty,
    every_validation_rule_names_its_path_and_writes_nothing,
    changes_reach_buckets_that_already_exist,
    a_large_apply_finds_buckets_with_one_sweep_and_misses_none,
    features_the_tables_lambdas_cannot_read_are_refused_before_any_write,
    a_stack_creates_restamps_and_deletes_its_levels,
    a_failed_create_and_its_rollback_leave_the_namespace_alone,
    zae_limits_creates_the_namespace_of_a_table_nobody_opened_only_when_asked,
    the_stack_initialises_its_table_and_the_unchanged_client_uses_it_without_updating_lambdas,
);
