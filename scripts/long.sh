#!/usr/bin/env bash
# The long tier, with ./scripts/fuzz.sh: the multi-minute real-time
# scenarios, not in ./scripts/test.sh (whose default tier has their
# counterparts on the in-memory twin and whose --full tier has the short
# real-time runs): the demand share over five minutes of the unchanged
# client's traffic, with its per-minute table (docs/testing.md). About six
# minutes, most of it waiting for the clock.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/phase.sh"
. "$ROOT/scripts/build-env.sh"
phase "Python venv" "checked in a second once made"
"$ROOT/scripts/setup-venv.sh"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
phase "build (shared with ./scripts/test.sh)" "warm: seconds; cold: about 5 min"
cargo nextest run "${test_build_flags[@]}" --no-run
. "$ROOT/scripts/moto.sh"
start_py_runner
phase "the demand share, five minutes in real time" "about 6 min, the table printed at the end"
cargo nextest run "${test_build_flags[@]}" --profile realtime --run-ignored only --no-capture \
  -E 'test(/spare_capacity_goes_to_the_entity_that_wants_it/)'
phase "long scenarios passed" "done"
