#!/usr/bin/env bash
# Runs every test: unit, property and end-to-end (moto + the real zae-limiter
# 0.17.0 client + the built aggregator binary).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
. "$ROOT/scripts/moto.sh"
cargo test --workspace --all-targets "$@"
