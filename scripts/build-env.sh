# Sourced: how every test script builds, so that they share one build.
# Clippy's driver compiles the workspace's crates as rustc would, with
# clippy's lints denied (CLIPPY_ARGS is how `cargo clippy` hands the driver
# its arguments), so the tests' build is also their lint: the crate graph
# is compiled once for both. Cargo rebuilds the workspace's crates (not the
# dependencies) when the wrapper changes, so a plain `cargo test` after
# this costs about a minute.
export RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver)"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The flags every test build uses: the whole workspace, every feature
# (the aggregator's cloudwatch feature has unit tests of its own).
test_build_flags=(--workspace --all-features)
