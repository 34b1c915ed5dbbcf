#!/usr/bin/env bash
# Creates .venv with the pinned Python side of the tests and the demo
# (zae-limiter 0.17.0, moto server), unless it is already up to date.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.requirements.sha"
want="$(sha256sum "$root/tests/requirements.txt" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$root/tests/requirements.txt"
echo "$want" > "$stamp"
