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
