#!/usr/bin/env bash
# The long fuzzing run: every property test of the stream-record parser and
# planner (hostile archive keys included), of the compact-schedule decoder,
# and of the manifest parser and the CloudFormation coercion, with
# ZAE_FUZZ_CASES cases each (default 200000: seven properties, 1.4 million
# cases in all). The test command runs the same
# properties with a few hundred to a few thousand cases every time.
# Then the refill and shard models (MODEL_CASES, 20000 runs each; the shard
# models with sibling reads failing, siblings unparseable and doublings racing
# the clones) and the
# schedule oracle against the client's own code (ORACLE_CASES, 3000).
# The dev profile is used on purpose: its overflow checks are on.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export ZAE_FUZZ_CASES="${1:-200000}"
echo "== $ZAE_FUZZ_CASES cases per property"
cargo test -p zae-aggregator --lib plan::tests::the_ -- --nocapture
cargo test -p zae-table --lib schedule::tests::any_stored_string -- --nocapture
cargo test -p cfn-limits-resource --lib manifest::properties -- --nocapture
# The demand share's water-filling, in CONTROLLER_CASES scenarios each.
ZAE_FUZZ_CASES="${CONTROLLER_CASES:-300000}" cargo test -p zae-table --lib adaptive::share -- --nocapture
# The bucket models and the schedule oracle (the client's own code) cost more per case.
"$ROOT/scripts/setup-venv.sh"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
ZAE_FUZZ_CASES="${MODEL_CASES:-20000}" cargo test -p zae-aggregator --test refill_model --test shard_model -- --nocapture
ZAE_FUZZ_CASES="${ORACLE_CASES:-3000}" cargo test -p zae-aggregator --test schedule_oracle -- --nocapture
# The adaptive controller's simulation: its safety properties with
# CONTROLLER_CASES scenarios each, and its convergence populations of that size.
ZAE_FUZZ_CASES="${CONTROLLER_CASES:-300000}" cargo test -p zae-aggregator --test controller_model -- --nocapture
