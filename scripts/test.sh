#!/usr/bin/env bash
# Runs every test: formatting and clippy, the template checks (cfn-lint, SAM
# translation, IAM policy), unit, property and end-to-end tests (moto + the
# real zae-limiter 0.17.0 client + the built binaries), then the Lambda
# packages built by `cargo lambda build` run under `cargo lambda watch`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
# The Lambda's own feature set (no cloudwatch) compiles clean too, and does
# not carry the CloudWatch SDK.
cargo clippy -p zae-aggregator --bins -- -D warnings
if cargo tree -p zae-aggregator -e normal --prefix none | grep -q '^aws-sdk-cloudwatch '; then
  echo "the aggregator's default build carries aws-sdk-cloudwatch" >&2; exit 1
fi
"$ROOT/scripts/setup-venv.sh"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
"$ROOT/.venv/bin/python" "$ROOT/tests/template/check_template.py"
"$ROOT/.venv/bin/python" "$ROOT/tests/template/check_migration.py"
. "$ROOT/scripts/moto.sh"
cargo test --workspace --all-targets --all-features "$@"
# cargo-lambda and Zig come from the venv.
export PATH="$ROOT/.venv/bin:$PATH"
cargo lambda build --release --output-format zip --bin aggregator --bin cfn-limits-resource
"$ROOT/.venv/bin/python" "$ROOT/tests/lambda/watch_e2e.py"
