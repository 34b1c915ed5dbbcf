//! Shared by the moto end-to-end tests of this crate.

use std::path::Path;
use zae_test_support::harness::{Poll, poll_with};

/// `aggregator poll --until-idle` with this build's binary.
pub fn poll(
    table: &str,
    checkpoint: &Path,
    endpoint: &str,
    env: &[(&str, &str)],
    extra: &[&str],
) -> Poll {
    poll_with(
        env!("CARGO_BIN_EXE_aggregator"),
        table,
        checkpoint,
        endpoint,
        env,
        extra,
    )
}
