//! End-to-end tests of `zae-limits` on a real moto server: manifests
//! planned and applied by the built binary (and, where a test stops an apply
//! midway, by `zae_provisioner` itself), read back and exercised through the
//! real zae-limiter 0.17.0 client; its exit codes, flags and errors; the
//! tenant stacks it prints. The Lambda's are `cfn-limits-resource/tests/moto.rs`.

use serde_json::{Value, json};
use std::process::{Command, Output};
use zae_test_support::harness::*;
use zae_test_support::limits::*;

/// The stamp this build writes on a table.
const STAMP: &str = concat!("0.17.0+rust.", env!("CARGO_PKG_VERSION"));

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

fn pending_items(table: &str) -> Vec<String> {
    items(table)
        .into_keys()
        .filter(|key| key.contains(" #PROVISIONER#PENDING#"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_apply_leaves_its_fan_outs_to_the_next() {
    use zae_provisioner::apply::{ApplyError, Caller, Provisioner};
    use zae_provisioner::manifest::Manifest;
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
    let store = dynamo_store(&table);
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

const SOFT: &str = "namespace: default
resources:
  gpt-4:
    limits:
      tpm: {capacity: 500, refill_period: 86400, soft: true}
";

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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zae-limits"));
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
    use zae_provisioner::apply::{Caller, Ownership, Provisioner};
    use zae_provisioner::manifest::Manifest;
    let table = setup("limits-release");
    let store = dynamo_store(&table);
    let ns = zae_provisioner::apply::state::namespace_id(&store, "default")
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

// The applies that need only DynamoDB, on AWS's DynamoDB Local too.
zae_test_support::also_on_dynamodb_local!(
    a_manifest_reads_back_through_the_client_and_governs_its_acquires,
    config_items_are_the_ones_the_client_writes_and_a_plan_over_them_is_empty,
    every_validation_rule_names_its_path_and_writes_nothing,
    changes_reach_buckets_that_already_exist,
    a_large_apply_finds_buckets_with_one_sweep_and_misses_none,
    features_the_tables_lambdas_cannot_read_are_refused_before_any_write,
    zae_limits_creates_the_namespace_of_a_table_nobody_opened_only_when_asked,
);
