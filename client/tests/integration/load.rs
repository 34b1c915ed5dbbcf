//! The built `zae-load` binary against moto: its one JSON line counts what
//! the limits allow (capacity only, the refill a day long), and a bad
//! argument exits 64 naming it. The limits are set by the real 0.17.0
//! client (`tests/harness/client_diff.py prepare`).

use serde_json::{Value, json};
use std::process::{Command, Output};
use zae_test_support::harness::{aws_env, moto};

/// Namespace "default" with `rpm` (hard) of `capacity` a day on resource "api".
fn prepare(capacity: i64) -> String {
    let limits = [
        json!({"name": "rpm", "capacity": capacity, "refill_amount": capacity,
                          "refill_period_s": 86_400, "soft": false}),
        json!({"name": "tpm", "capacity": 100, "refill_amount": 100,
                          "refill_period_s": 86_400, "soft": true}),
    ];
    let setup = json!([{"op": "limits", "level": "resource", "resource": "api", "limits": limits}]);
    crate::common::prepared("load", setup, 1_796_186_400_000)
}

/// `prepare(5)`'s "api" beside "other", whose own `rpm` is hard at 2 a day.
fn prepare_two_resources() -> String {
    let rpm = |capacity: i64| {
        json!({"name": "rpm", "capacity": capacity, "refill_amount": capacity,
                "refill_period_s": 86_400, "soft": false})
    };
    let setup = json!([
        {"op": "limits", "level": "resource", "resource": "api", "limits": [rpm(5)]},
        {"op": "limits", "level": "resource", "resource": "other", "limits": [rpm(2)]},
    ]);
    crate::common::prepared("load-also", setup, 1_796_186_400_000)
}

fn zae_load(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zae-load"));
    cmd.args(args);
    aws_env(&mut cmd, moto());
    cmd.output().expect("run zae-load")
}

/// The run's one stdout line, as JSON, after checking it is the only one.
fn report(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "zae-load failed:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line, got:\n{stdout}");
    let fields = [
        "admitted", "rejected", "errors", "p50_ms", "p99_ms", "wall_s", "cpu_s",
    ];
    let at: Vec<Option<usize>> = fields
        .iter()
        .map(|f| lines[0].find(&format!("\"{f}\":")))
        .collect();
    assert!(
        at.iter().all(Option::is_some) && at.is_sorted(),
        "fields in this order: {fields:?}: {stdout}"
    );
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn count(report: &Value, field: &str) -> u64 {
    report[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {report}"))
}

#[test]
fn zae_load_admits_exactly_the_capacity_and_counts_the_rest_rejected() {
    let table = prepare(5);
    let args = [
        "-t",
        &table,
        "-N",
        "default",
        "--entity",
        "e",
        "--resource",
        "api",
        "--consume",
        "rpm=1,tpm=10",
        "--requests",
        "20",
        "--concurrency",
        "4",
    ];
    let report = report(&zae_load(&args));
    assert_eq!(
        (
            count(&report, "admitted"),
            count(&report, "rejected"),
            count(&report, "errors")
        ),
        (5, 15, 0),
        "{report}"
    );
    let p50 = report["p50_ms"].as_f64().expect("p50_ms");
    let p99 = report["p99_ms"].as_f64().expect("p99_ms");
    assert!(0.0 < p50 && p50 <= p99, "{report}");
    assert!(report["wall_s"].as_f64().expect("wall_s") > 0.0, "{report}");
    assert!(report["cpu_s"].as_f64().expect("cpu_s") > 0.0, "{report}");
}

#[test]
fn zae_load_spreads_requests_over_the_entities_each_with_its_own_capacity() {
    let table = prepare(5);
    // -n: the stack's name is its table's.
    let args = [
        "-n",
        &table,
        "--entity",
        "e",
        "--resource",
        "api",
        "--consume",
        "rpm=1",
        "--requests",
        "21",
        "--concurrency",
        "3",
        "--entities",
        "3",
    ];
    let report = report(&zae_load(&args));
    // Seven requests for each of e-0, e-1, e-2; five of each admitted.
    assert_eq!(
        (count(&report, "admitted"), count(&report, "rejected")),
        (15, 6),
        "{report}"
    );
}

/// The run's (admitted, rejected, errors).
fn counts(report: &Value) -> (u64, u64, u64) {
    let [a, r, e] = ["admitted", "rejected", "errors"].map(|f| count(report, f));
    (a, r, e)
}

#[test]
fn zae_load_with_limits_admits_the_callers_capacity_not_the_stored_one() {
    let table = prepare(5);
    let base = ["-t", &table, "--entity", "e", "--resource", "api"];
    let run = [
        "--consume",
        "rpm=1,tpm=10",
        "--requests",
        "10",
        "--concurrency",
        "2",
    ];
    // Stored: rpm 5 a day (hard), tpm soft. The caller's: rpm 3 a day,
    // tpm soft; the stored 5 would admit five.
    let limits = ["--limits", "rpm=3:3:86400,tpm=100:100:86400:soft"];
    let args: Vec<&str> = base.iter().chain(&run).chain(&limits).copied().collect();
    let report = report(&zae_load(&args));
    assert_eq!(counts(&report), (3, 7, 0), "{report}");
}

#[test]
fn zae_load_with_also_is_gated_by_the_other_resources_limit_too() {
    let table = prepare_two_resources();
    let base = ["-t", &table, "--entity", "e", "--resource", "api"];
    let run = [
        "--consume",
        "rpm=1",
        "--requests",
        "10",
        "--concurrency",
        "2",
    ];
    // "api" alone would admit five; "other" holds two.
    let args: Vec<&str> = base
        .iter()
        .chain(&run)
        .chain(&["--also", "other"])
        .copied()
        .collect();
    let report = report(&zae_load(&args));
    assert_eq!(counts(&report), (2, 8, 0), "{report}");
}

#[test]
fn zae_load_exits_64_naming_a_bad_argument() {
    for (args, named) in [
        (
            vec![
                "-t",
                "x",
                "--entity",
                "e",
                "--resource",
                "r",
                "--consume",
                "rpm",
                "--requests",
                "1",
            ],
            "--consume",
        ),
        (
            vec![
                "-t",
                "x",
                "--entity",
                "e",
                "--resource",
                "r",
                "--consume",
                "rpm=1",
                "--requests",
                "0",
            ],
            "--requests",
        ),
        (
            vec![
                "--entity",
                "e",
                "--resource",
                "r",
                "--consume",
                "rpm=1",
                "--requests",
                "1",
            ],
            "--name",
        ),
        (
            vec![
                "-t",
                "x",
                "--entity",
                "e",
                "--resource",
                "r",
                "--consume",
                "rpm=1",
                "--requests",
                "1",
                "--limits",
                "rpm=1:1:60",
                "--also",
                "s",
            ],
            "--limits",
        ),
        (
            vec![
                "-t",
                "x",
                "--entity",
                "e",
                "--resource",
                "r",
                "--consume",
                "rpm=1",
                "--requests",
                "1",
                "--limits",
                "rpm=1:1",
            ],
            "'rpm=1:1' is not LIMIT=CAPACITY:REFILL:PERIOD_S[:soft]",
        ),
    ] {
        let out = zae_load(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?} should name {named}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed a report");
    }
}

#[test]
fn zae_load_names_a_namespace_the_table_does_not_have() {
    let table = prepare(5);
    let args = [
        "-t",
        &table,
        "-N",
        "nowhere",
        "--entity",
        "e",
        "--resource",
        "api",
        "--consume",
        "rpm=1",
        "--requests",
        "1",
    ];
    let out = zae_load(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("namespace nowhere is not registered"),
        "{stderr}"
    );
}
