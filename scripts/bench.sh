#!/usr/bin/env bash
# Benchmarks for docs/benchmarks.md, on this machine, in one run, printing
# the tables themselves (tests/harness/bench_report.py) with the commit:
#  1. parse + aggregate throughput on one core, I/O stubbed;
#  2. the adaptive controller's DynamoDB calls per tick;
#  3. on recorded streams, in the same moto, ours against the reference
#     Python aggregator: DynamoDB writes and wall time per 100-record batch,
#     for two key mixes: a hot entity (a few buckets per batch) and uniform
#     keys (BENCH_ENTITIES, 200, entities: many buckets per batch);
#  4. a limits manifest of BENCH_LEVELS (2,000) levels applied, then re-applied
#     unchanged, by zae-limits and by the 0.17.0 Python provisioner, each into
#     a fresh table on the same moto: wall time and DynamoDB calls.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
cargo build --quiet --release -p zae-aggregator -p zae-limits --example bench_plan --example bench_control --bin aggregator --bin zae-limits
py="$ROOT/.venv/bin/python"
out="${BENCH_OUT:-$(mktemp -d)}"
mkdir -p "$out"
echo "== parse + aggregate (one core)"
taskset -c 0 "$ROOT/target/release/examples/bench_plan" | tee "$out/plan.txt"
echo "== adaptive controller: DynamoDB calls per tick"
"$ROOT/target/release/examples/bench_control" | tee "$out/control.txt"
. "$ROOT/scripts/moto.sh"

# One recorded stream: ours (aggregator poll) and the reference, same moto.
aggregate() {
  local scenario="$1" table="$2" ns="$3"
  echo "== $scenario: ours, aggregator poll (batch size 100)"
  local start end
  start=$(date +%s.%N)
  "$ROOT/target/release/aggregator" poll --table "$table" --until-idle --checkpoint "$out/$scenario.ckpt" \
    > /dev/null 2> "$out/$scenario-ours.log"
  end=$(date +%s.%N)
  "$py" -c "import json,sys; s=[json.loads(l) for l in open('$out/$scenario-ours.log') if l.startswith('{\"poll_summary')][0]; s['wall_seconds']=$end-$start; print(json.dumps(s))" \
    > "$out/agg-$scenario-ours.json"
  echo "== $scenario: reference, process_stream_records, batches of 100, same stream"
  "$py" tests/harness/reference_aggregator.py --source "$table" --target "$table-ref" --namespace "$ns" \
    > "$out/agg-$scenario-ref.json"
}
namespace() { "$py" -c "import json; print(json.load(open('$1'))['namespace_id'])"; }

hot="bench-hot-$$"
"$py" tests/harness/client.py setup --table "$hot" > "$out/hot-setup.json"
"$py" tests/harness/client.py drive --table "$hot" --requests "${BENCH_REQUESTS:-300}" > /dev/null
aggregate hot-entity "$hot" "$(namespace "$out/hot-setup.json")"

uniform="bench-uniform-$$"
"$py" tests/harness/client.py setup --table "$uniform" > "$out/uniform-setup.json"
"$py" tests/harness/client.py drive-uniform --table "$uniform" --entities "${BENCH_ENTITIES:-200}" \
  --requests "${BENCH_UNIFORM_REQUESTS:-800}" > /dev/null
aggregate uniform-keys "$uniform" "$(namespace "$out/uniform-setup.json")"

echo "== limits: ${BENCH_LEVELS:-2000}-level manifest, zae-limits against the 0.17.0 provisioner, same moto"
"$py" tests/harness/client.py setup --table "bench-limits-ours-$$" > /dev/null
"$py" tests/harness/client.py setup --table "bench-limits-ref-$$" > /dev/null
"$py" tests/harness/bench_limits.py --ours-table "bench-limits-ours-$$" --ref-table "bench-limits-ref-$$" \
  --zae-limits "$ROOT/target/release/zae-limits" --levels "${BENCH_LEVELS:-2000}" > "$out/limits.json"

echo
"$py" tests/harness/bench_report.py "$out"
[ -n "${BENCH_OUT:-}" ] || rm -rf "$out"
