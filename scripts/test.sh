#!/usr/bin/env bash
# Runs every test: formatting and clippy, the template checks (cfn-lint, SAM
# translation, IAM policy), unit, property and end-to-end tests (moto + the
# real zae-limiter 0.17.0 client + the built binaries), then the Lambda
# packages built by `cargo lambda build` run under `cargo lambda watch`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/phase.sh"
phase "cargo fmt and clippy over the workspace" "cold: builds every crate, about 5 min on 2 cores; warm: seconds"
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The Lambda's own feature set (no cloudwatch) compiles clean too, and does
# not carry the CloudWatch SDK.
cargo clippy -p zae-aggregator --bins -- -D warnings
if cargo tree -p zae-aggregator -e normal --prefix none | grep -q '^aws-sdk-cloudwatch '; then
  echo "the aggregator's default build carries aws-sdk-cloudwatch" >&2; exit 1
fi
phase "Python venv: moto, the zae-limiter 0.17.0 client, cfn-lint, cargo-lambda, Zig" "first time: about 1.5 min; then checked in a second"
"$ROOT/scripts/setup-venv.sh"
phase "template checks: cfn-lint, SAM translation, IAM policy" "about 30 s"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
"$ROOT/.venv/bin/python" "$ROOT/tests/template/check_template.py"
"$ROOT/.venv/bin/python" "$ROOT/tests/template/check_migration.py"
. "$ROOT/scripts/moto.sh"
phase "cargo test: unit, property and moto end-to-end tests" "cold build about 8 min, then about 12 min of tests, the longest a 5-minute real-time adaptive run"
cargo test --workspace --all-targets --all-features "$@"
# cargo-lambda and Zig come from the venv.
export PATH="$ROOT/.venv/bin:$PATH"
phase "Lambda packages with cargo lambda (Zig cross-build)" "cold: about 11 min (release, cross-built); warm: seconds"
cargo lambda build --release --output-format zip --bin aggregator --bin cfn-limits-resource
phase "the built packages under cargo lambda watch" "about 1 min"
"$ROOT/.venv/bin/python" "$ROOT/tests/lambda/watch_e2e.py"
phase "all tests passed" "done"
