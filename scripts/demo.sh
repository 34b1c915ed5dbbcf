#!/usr/bin/env bash
# The main job on one machine: moto, a table created by the real client, real
# client traffic (a cascade with a soft tpm and a hard rpm), the aggregator's
# poller until idle, then what it produced, read back through the client.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
cargo build --quiet --release -p zae-aggregator
. "$ROOT/scripts/moto.sh"
py="$ROOT/.venv/bin/python"
work="$(mktemp -d)"
table="zae-demo"
echo "== moto at $ZAE_MOTO_ENDPOINT; creating table $table with the zae-limiter 0.17.0 client"
"$py" tests/harness/client.py setup --table "$table" >/dev/null
echo "== driving traffic: key-a and key-b cascade into proj-1; tpm is soft, rpm is hard"
"$py" tests/harness/client.py drive --table "$table" --requests "${DEMO_REQUESTS:-40}" > "$work/driven.json"
echo "== aggregator poll --until-idle"
"$ROOT/target/release/aggregator" poll --table "$table" --until-idle --checkpoint "$work/checkpoint.json" \
  > "$work/emf.jsonl" 2> "$work/aggregator.log"
"$py" tests/harness/client.py read --table "$table" > "$work/read.json"
"$py" tests/harness/show.py "$work/driven.json" "$work/read.json" "$work/emf.jsonl" "$work/aggregator.log"
rm -rf "$work"
