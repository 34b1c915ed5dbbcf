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
#
# `bench_client.sh features`: instead, the slow path's cost with each
# feature beside a plain limit (tests/harness/client_diff/bench_features.json:
# a scheduled limit, a duration window, a calendar quota, config bypass,
# the caller's limits, a second resource). Every acquire is an entity's
# first, so every one takes the slow path. ROUNDS (3) rounds, each on one
# fresh table, Python and Rust interleaved per case; BENCH_REQUESTS (400)
# acquires per run, BENCH_CONCURRENCY (16) at a time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
. "$ROOT/scripts/phase.sh"

# One case per line: its name, then its zae-load / client_load.py arguments.
FEATURE_CASES='plain limit|--resource plain
scheduled limit|--resource sched
duration window|--resource window
calendar quota|--resource quota
config bypass|--resource bypassed
caller limits (--limits)|--resource plain --limits rpm=1000000:1000000:60,tpm=10000000:10000000:60:soft
two resources (--also)|--resource plain --also other'

bench_features() {
  local requests="${BENCH_REQUESTS:-400}" concurrency="${BENCH_CONCURRENCY:-16}" out
  out="$(mktemp)"
  echo "== commit $(git rev-parse --short HEAD), features: $requests slow-path acquires per run, $concurrency at a time"
  for round in $(seq 1 "${ROUNDS:-3}"); do
    local table="bench-features-$round-$$"
    "$py" tests/harness/client_diff.py prepare --table "$table" \
      --spec tests/harness/client_diff/bench_features.json >/dev/null
    local n=0
    while IFS='|' read -r name case_args; do
      n=$((n + 1))
      for client in python rust; do
        # A fresh entity per acquire: each acquire creates its buckets.
        # shellcheck disable=SC2206
        local args=(--entity "$client-$n" --consume rpm=1,tpm=10 --requests "$requests"
                    --concurrency "$concurrency" --entities "$requests" $case_args)
        local line
        if [ "$client" = python ]; then
          line="$("$py" tests/harness/client_load.py --table "$table" "${args[@]}" | tail -1)"
        else
          line="$(target/release/zae-load -t "$table" -N default "${args[@]}" | tail -1)"
        fi
        echo "{\"case\": \"$name\", \"client\": \"$client\", \"round\": $round, \"run\": $line}" >> "$out"
        echo "  $name, $client, round $round: $line"
      done
    done <<< "$FEATURE_CASES"
  done
  "$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mean = lambda v: sum(v) / len(v)
print("| case | Python acquires / s | Rust acquires / s | Rust / Python | Python CPU ms per acquire | Rust CPU ms per acquire | Python / Rust CPU | p50 ms Python, Rust | errors, rejections |")
print("|---|---|---|---|---|---|---|---|---|")
for case in dict.fromkeys(r["case"] for r in rows):
    runs = {c: [r["run"] for r in rows if r["case"] == case and r["client"] == c] for c in ("python", "rust")}
    rate = {c: mean([r["admitted"] / r["wall_s"] for r in v]) for c, v in runs.items()}
    cpu = {c: mean([r["cpu_s"] * 1000 / max(1, r["admitted"]) for r in v]) for c, v in runs.items()}
    p50 = {c: mean([r["p50_ms"] for r in v]) for c, v in runs.items()}
    bad = {c: f'{sum(r["errors"] for r in v)}, {sum(r["rejected"] for r in v)}' for c, v in runs.items()}
    print(f'| {case} | {rate["python"]:.0f} | {rate["rust"]:.0f} | {rate["rust"] / rate["python"]:.2f} '
          f'| {cpu["python"]:.2f} | {cpu["rust"]:.2f} | {cpu["python"] / cpu["rust"]:.1f} '
          f'| {p50["python"]:.1f}, {p50["rust"]:.1f} | {bad["python"]}; {bad["rust"]} |')
PY
  rm -f "$out"
}
"$ROOT/scripts/setup-venv.sh"
phase "release build of zae-load and the in-memory benchmark" "4 to 8 min cold, seconds warm"
cargo build --quiet --release -p zae-client --bin zae-load --example bench_memory
. "$ROOT/scripts/moto.sh"
start_moto
trap stop_moto EXIT
py="$ROOT/.venv/bin/python"
if [ "${1:-}" = features ]; then
  bench_features
  exit 0
fi
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
