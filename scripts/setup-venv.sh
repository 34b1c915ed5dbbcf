#!/usr/bin/env bash
# Creates .venv with the pinned Python side, unless it is already up to date:
#   setup-venv.sh        everything the tests use (tests/requirements.txt)
#   setup-venv.sh demo   only what the demo needs (tests/requirements-demo.txt:
#                        the client and moto; no cfn-lint, SAM CLI, cargo-lambda or Zig)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.requirements.sha"
full="$(cat "$root/tests/requirements.txt" "$root/tests/requirements-demo.txt" | sha256sum | cut -d' ' -f1)"
demo="demo-$(sha256sum "$root/tests/requirements-demo.txt" | cut -d' ' -f1)"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "${1:-all}" = demo ]; then
  want="$demo"; file="$root/tests/requirements-demo.txt"
  # A venv with everything has what the demo needs.
  [ -x "$venv/bin/python" ] && [ "$have" = "$full" ] && exit 0
else
  want="$full"; file="$root/tests/requirements.txt"
fi
if [ -x "$venv/bin/python" ] && [ "$have" = "$want" ]; then
  exit 0
fi
echo "setup-venv: installing $(basename "$file") into .venv (first time about 1 min)" >&2
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$file"
echo "$want" > "$stamp"
