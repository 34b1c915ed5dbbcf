#!/usr/bin/env bash
# The operators' smoke test of a deployed stack, after each deploy:
#   scripts/smoke.sh -n STACK [--region R] [--endpoint-url URL] [--timeout S]
# `scripts/smoke.sh --help` says what it does and its exit codes
# (docs/deploy.md shows its output). The checks are scripts/smoke.py, with
# the real zae-limiter 0.17.0 client from the venv this makes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
for arg in "$@"; do
  case "$arg" in
    # Help needs no venv: the standard library prints it.
    -h|--help) exec "$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3 )" "$ROOT/scripts/smoke.py" --help ;;
  esac
done
# A no-op when .venv is current; else it says it installs (about 1 min).
"$ROOT/scripts/setup-venv.sh" demo
exec "$ROOT/.venv/bin/python" "$ROOT/scripts/smoke.py" "$@"
