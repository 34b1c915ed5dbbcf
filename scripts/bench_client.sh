#!/usr/bin/env bash
# The client benchmark for docs/benchmarks.md: zae-load against the real
# 0.17.0 Python client (tests/harness/client_load.py) on the same moto, the
# same scenario, interleaved, ROUNDS (3) times; then zae-client alone with
# the table in memory (client/examples/bench_memory.rs, one core). Release
# build. About 6 minutes on 2 cores after the build (cold build: 4 to 8 min).
#
#   BENCH_REQUESTS (2000)  acquires per run, each committed at once
#   BENCH_CONCURRENCY (16) at a time
#   BENCH_ENTITIES (50)    spread over this many entities (the first acquire
#                          of each takes the slow path, the rest the fast one)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/phase.sh"
"$ROOT/scripts/setup-venv.sh"
phase "release build of zae-load and the in-memory benchmark" "4 to 8 min cold, seconds warm"
cargo build --quiet --release -p zae-client --bin zae-load --example bench_memory
. "$ROOT/scripts/moto.sh"
start_moto
trap stop_moto EXIT
py="$ROOT/.venv/bin/python"
requests="${BENCH_REQUESTS:-2000}" concurrency="${BENCH_CONCURRENCY:-16}" entities="${BENCH_ENTITIES:-50}"
out="$(mktemp)"
echo "== commit $(git rev-parse --short HEAD), $requests acquires, $concurrency at a time, $entities entities"
for round in $(seq 1 "${ROUNDS:-3}"); do
  for client in python rust; do
    table="bench-client-$client-$round-$$"
    "$py" tests/harness/client_diff.py prepare --table "$table" \
      --spec tests/harness/client_diff/bench.json >/dev/null
    args=(--entity user --resource api --consume rpm=1,tpm=10 --requests "$requests"
          --concurrency "$concurrency" --entities "$entities")
    if [ "$client" = python ]; then
      line="$("$py" tests/harness/client_load.py --table "$table" "${args[@]}" | tail -1)"
    else
      line="$(target/release/zae-load -t "$table" -N default "${args[@]}" | tail -1)"
    fi
    echo "{\"client\": \"$client\", \"round\": $round, \"run\": $line}" >> "$out"
    echo "  $client round $round: $line"
  done
done
memory="$(taskset -c 0 target/release/examples/bench_memory 200000 100 | tail -1)"
"$py" - "$out" "$memory" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def stats(client):
    runs = [r["run"] for r in rows if r["client"] == client]
    rate = [r["admitted"] / r["wall_s"] for r in runs]
    cpu = [r["cpu_s"] * 1000 / max(1, r["admitted"]) for r in runs]
    return {"rate": rate, "p50": [r["p50_ms"] for r in runs], "p99": [r["p99_ms"] for r in runs], "cpu": cpu,
            "errors": sum(r["errors"] for r in runs), "rejected": sum(r["rejected"] for r in runs)}
py, rs = stats("python"), stats("rust")
span = lambda v, f="{:.0f}": f"{f.format(min(v))}-{f.format(max(v))}"
print("| client | acquires / s | p50 ms | p99 ms | CPU s per 1,000 acquires | errors, rejections |")
print("|---|---|---|---|---|---|")
for name, s in (("Python 0.17.0", py), ("zae-client (zae-load)", rs)):
    print(f'| {name} | {span(s["rate"])} | {span(s["p50"], "{:.1f}")} | {span(s["p99"], "{:.1f}")} | {span(s["cpu"], "{:.3f}")} | {s["errors"]}, {s["rejected"]} |')
ratio = lambda a, b: sum(a) / len(a) / (sum(b) / len(b))
print(f'\nzae-client / Python: {ratio(rs["rate"], py["rate"]):.2f}x the acquires per second, '
      f'{ratio(py["cpu"], rs["cpu"]):.1f}x less CPU per acquire.')
m = json.loads(sys.argv[2])
print(f'\nIn memory (one core, 200,000 acquires over 100 entities): {m["acquires_per_s"]:.0f} acquires / s, '
      f'{m["cpu_s_per_1000"]:.4f} CPU s per 1,000.')
PY
rm -f "$out"
