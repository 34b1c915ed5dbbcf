#!/usr/bin/env bash
# The refill benchmark for docs/benchmarks.md: how often the real 0.17.0
# client falls back to its slow path under a steady workload, with our
# aggregator (release build, under the Lambda stand-in), with the reference
# Python aggregator, and with none; one moto, the same stream feeder for
# both aggregators. Three workloads against a 20/s limit: 15/s per entity
# with a burst of 40, 25/s with a burst of 40, and 15/s with a burst of 10
# (less than a second's demand). BENCH_SECONDS (60) each; about 13 minutes
# on 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
cargo build --quiet --release -p zae-aggregator --bin aggregator
. "$ROOT/scripts/moto.sh"
py="$ROOT/.venv/bin/python"
out="$(mktemp)"
echo "== commit $(git rev-parse --short HEAD)"
for workload in 15:40 25:40 15:10; do
  rate="${workload%:*}" burst="${workload#*:}"
  for mode in none reference ours; do
    "$py" tests/harness/slow_paths.py run --mode "$mode" --rate "$rate" --burst "$burst" \
      --seconds "${BENCH_SECONDS:-60}" --aggregator "$ROOT/target/release/aggregator" 2>/dev/null \
      | tail -1 | sed "s/^{/{\"workload\": \"$rate\/s, burst $burst\", /" >> "$out"
  done
done
"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| demand per entity | aggregator | requests | seconds | admitted | refused fast writes | reads | slow paths | refill writes | vs none | vs reference |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    same = {x["mode"]: x for x in rows if x["workload"] == r["workload"]}
    ratio = lambda other: f'{r["slow_paths"] / max(1, same[other]["slow_paths"]):.2f}'
    print(f'| {r["workload"]} | {r["mode"]} | {r["requests"]} | {r["seconds"]} | {r["admitted"]} | {r["refused_writes"]} | {r["reads"]} '
          f'| {r["slow_paths"]} | {r["fed"]["refills"]} | {ratio("none")} | {ratio("reference")} |')
PY
rm -f "$out"
