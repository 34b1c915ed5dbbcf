//! The `aggregator` command line outside Lambda.

use std::process::Command;

/// Run by hand with no subcommand, it says what it is and how to use it,
/// instead of failing inside the Lambda runtime.
#[test]
fn without_a_subcommand_or_a_lambda_runtime_it_prints_its_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_aggregator"))
        .env_remove("AWS_LAMBDA_RUNTIME_API")
        .output()
        .expect("run the aggregator");
    assert_eq!(out.status.code(), Some(64));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("AWS_LAMBDA_RUNTIME_API is unset"), "{said}");
    assert!(said.contains("Usage: aggregator"), "{said}");
    for command in ["poll", "control"] {
        assert!(said.contains(command), "{said}");
    }
}

/// `--version`: the build (Cargo.toml's version) and the stamp it writes on a table.
#[test]
fn it_names_its_build_and_table_stamp() {
    let out = Command::new(env!("CARGO_BIN_EXE_aggregator"))
        .arg("--version")
        .output()
        .expect("run the aggregator");
    assert!(out.status.success(), "{out:?}");
    let v = env!("CARGO_PKG_VERSION");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("aggregator {v} (table stamp 0.17.0+rust.{v})\n")
    );
}

/// Started as a Lambda, its first log line names its build and table stamp,
/// before anything can fail (here its configuration: no TABLE_NAME), and at
/// a log level of `error` too.
#[test]
fn its_first_log_line_as_a_lambda_names_its_build() {
    let out = Command::new(env!("CARGO_BIN_EXE_aggregator"))
        .env("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9")
        .env("RUST_LOG", "error")
        .env_remove("AWS_LAMBDA_LOG_LEVEL")
        .env_remove("TABLE_NAME")
        .output()
        .expect("run the aggregator");
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    let first: serde_json::Value = serde_json::from_str(said.lines().next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {said}"));
    let v = env!("CARGO_PKG_VERSION");
    assert_eq!(first["version"], v, "{said}");
    assert_eq!(first["table_stamp"], format!("0.17.0+rust.{v}"), "{said}");
    assert!(said.contains("TABLE_NAME"), "{said}");
}
