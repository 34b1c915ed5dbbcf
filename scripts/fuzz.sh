#!/usr/bin/env bash
# The long tier's fuzzing run (with ./scripts/long.sh): every property test
# of the stream-record parser and planner (hostile archive keys included),
# of the compact-schedule decoder, and of the manifest parser and the
# CloudFormation coercion, with ZAE_FUZZ_CASES cases each (default 200000:
# seven properties, 1.4 million cases in all); the demand share's
# water-filling and the adaptive controller's simulation with
# CONTROLLER_CASES (300000); the refill and shard models (MODEL_CASES, 20000
# runs each; the shard models with sibling reads failing, siblings
# unparseable and doublings racing the clones); the generated histories of a
# demand-shared namespace (HISTORY_CASES, 5000); the schedule oracle against
# the client's own code (ORACLE_CASES, 3000); every item a client may write
# through the whole batch path (HOSTILE_CASES, 1000000, in the `fuzz` cargo
# profile: optimised, overflow checks on). The default test tier runs the
# same properties with a few hundred to a few thousand cases every time.
# The dev profile is used on purpose: its overflow checks are on.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/phase.sh"
. "$ROOT/scripts/build-env.sh"
cases="${1:-200000}"
"$ROOT/scripts/setup-venv.sh"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
phase "build (shared with ./scripts/test.sh)" "warm: seconds; cold: about 5 min"
cargo nextest run "${test_build_flags[@]}" --no-run
# `fuzz N FILTERSET`: the tests of FILTERSET with N cases each.
fuzz() {
  ZAE_FUZZ_CASES="$1" cargo nextest run "${test_build_flags[@]}" --profile fuzz -E "$2"
}
phase "parser, planner, decoder and manifest properties, $cases cases each" "about 4 min at 200,000"
fuzz "$cases" 'package(zae-aggregator) & kind(lib) & test(/^plan::tests::the_/)
  | package(zae-table) & test(/^schedule::tests::any_stored_string/)
  | package(zae-provisioner) & kind(lib) & test(/^manifest::properties::/)'
phase "the demand share's water-filling and the controller's simulation, ${CONTROLLER_CASES:-300000} scenarios each" "about 5 min"
fuzz "${CONTROLLER_CASES:-300000}" 'package(zae-table) & test(/^adaptive::share::/)
  | binary_id(zae-aggregator::integration) & test(/^controller_model::/)'
phase "generated histories of a demand-shared namespace, ${HISTORY_CASES:-5000} of them" "about 3 min"
fuzz "${HISTORY_CASES:-5000}" 'package(zae-aggregator) & kind(lib) & test(/^control::demand::tests::no_history/)'
phase "the bucket models, ${MODEL_CASES:-20000} runs each, and the schedule oracle, ${ORACLE_CASES:-3000} schedules" "about 3 min"
fuzz "${MODEL_CASES:-20000}" 'binary_id(zae-aggregator::integration) & test(/^(refill_model|shard_model)::/)'
fuzz "${ORACLE_CASES:-3000}" 'binary_id(zae-aggregator::integration) & test(/^schedule_oracle::/)'
phase "generated sequences through the Python 0.17.0 client and zae-client, ${DIFF_CASES:-200} of them" "about 11 min at 200 (3.3 s each)"
fuzz "${DIFF_CASES:-200}" 'binary_id(zae-client::integration) & test(/^generated::/) & not test(/::dynamodb_local_/)'
phase "every item a client may write through the whole batch path, ${HOSTILE_CASES:-1000000} batches (its own optimised build, overflow checks on)" "build 6 to 13 min cold; a million batches in about 20 min"
ZAE_FUZZ_CASES="${HOSTILE_CASES:-1000000}" cargo nextest run --cargo-profile fuzz -p zae-aggregator --test integration --all-features \
  --profile fuzz -E 'test(/^hostile::/)'
phase "fuzzing passed" "done"
