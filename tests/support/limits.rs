//! What the provisioner's end-to-end tests share (`zae-limits`' and the
//! `cfn-limits-resource` Lambda's, on moto or DynamoDB Local): manifests in a
//! scratch directory, the built `zae-limits` run against the backend, tables
//! made by the client or from the schema alone, and the real 0.17.0 client's
//! reads and acquires.

use crate::harness::{aws_env, endpoint, run_json, unique_table, workspace_binary};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Output};

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zae-limits-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

pub fn write_manifest(name: &str, yaml: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, yaml).unwrap();
    path
}

/// A table made by the client, with namespace `default` registered.
pub fn setup(name: &str) -> String {
    let table = unique_table(name);
    run_json("client.py", &["setup", "--table", &table]);
    table
}

pub fn zae_limits(args: &[&str]) -> Output {
    let mut cmd = Command::new(workspace_binary("zae-limits", "zae-limits"));
    cmd.args(args);
    aws_env(&mut cmd, endpoint());
    cmd.output().expect("run zae-limits")
}

pub fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn client(args: &[&str]) -> Value {
    run_json("limits_client.py", args)
}

pub fn read_levels(table: &str, namespace: &str, levels: &[&str]) -> Value {
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

/// `times` acquires by `entity` of `consume` on gpt-4, through the real client.
pub fn acquire(table: &str, entity: &str, consume: &[&str], times: u32) -> Value {
    acquire_on(table, entity, "gpt-4", consume, times)
}

/// `times` acquires by `entity` of `consume` on `resource`, through the real client.
pub fn acquire_on(
    table: &str,
    entity: &str,
    resource: &str,
    consume: &[&str],
    times: u32,
) -> Value {
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

/// Every item of the table, keyed by `PK SK`.
pub fn items(table: &str) -> std::collections::BTreeMap<String, Value> {
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

pub fn limit(name: &str, capacity: u64, refill: u64, period: u64, soft: bool) -> Value {
    let mut l = json!({"name": name, "capacity": capacity, "refill_amount": refill, "refill_period_seconds": period});
    if soft {
        l["soft"] = json!(true);
    }
    l
}

pub const TENANT: &str = r#"
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

/// A table from the template's `Table` resource alone: no version record,
/// no namespace.
pub fn schema_only_table(name: &str) -> String {
    let table = unique_table(name);
    let made = run_json("stack_table.py", &["create", "--table", &table]);
    assert_eq!(made["items"], 0, "{made}");
    table
}

pub fn version_record(table: &str) -> Value {
    run_json("stack_table.py", &["version", "--table", table])
}

pub fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
