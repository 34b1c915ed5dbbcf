#!/usr/bin/env bash
# The long real-time scenarios, not in the test command (which runs a short
# version of each): the demand share over five minutes of the unchanged
# client's traffic, with its per-minute table (docs/testing.md). About six
# minutes, most of it waiting for the clock.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/phase.sh"
phase "Python venv" "checked in a second once made"
"$ROOT/scripts/setup-venv.sh"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
. "$ROOT/scripts/moto.sh"
phase "the demand share, five minutes in real time" "about 6 min, the table printed at the end"
cargo test -p zae-aggregator --test moto_adaptive -- --ignored --nocapture
phase "long scenarios passed" "done"
