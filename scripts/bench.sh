#!/usr/bin/env bash
# Benchmarks for docs/benchmarks.md, on this machine, in one run:
#  1. parse + aggregate throughput on one core, I/O stubbed;
#  2. on one recorded stream with a hot entity, in the same moto: DynamoDB
#     writes per 100-record batch and wall time per batch, ours against the
#     reference Python aggregator;
#  3. a limits manifest of BENCH_LEVELS (2,000) levels applied, then re-applied
#     unchanged, by zae-limits and by the 0.17.0 Python provisioner, each into
#     a fresh table on the same moto: wall time and DynamoDB calls.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
cargo build --quiet --release -p zae-aggregator -p cfn-limits-resource --example bench_plan --example bench_control --bin aggregator --bin zae-limits
echo "== parse + aggregate (one core)"
taskset -c 0 "$ROOT/target/release/examples/bench_plan"
echo "== adaptive controller: DynamoDB calls per tick"
"$ROOT/target/release/examples/bench_control"
. "$ROOT/scripts/moto.sh"
py="$ROOT/.venv/bin/python"
work="$(mktemp -d)"
table="bench-$$"
"$py" tests/harness/client.py setup --table "$table" > "$work/setup.json"
ns="$("$py" -c "import json,sys; print(json.load(open('$work/setup.json'))['namespace_id'])")"
"$py" tests/harness/client.py drive --table "$table" --requests "${BENCH_REQUESTS:-300}" > /dev/null
echo "== ours: aggregator poll (batch size 100)"
start=$(date +%s.%N)
"$ROOT/target/release/aggregator" poll --table "$table" --until-idle --checkpoint "$work/ckpt.json" > /dev/null 2> "$work/ours.log"
end=$(date +%s.%N)
grep '"poll_summary"' "$work/ours.log"
echo "{\"wall_seconds\": $(echo "$end - $start" | bc)}"
echo "== reference: process_stream_records, batches of 100, same stream, same moto"
"$py" tests/harness/reference_aggregator.py --source "$table" --target "$table-ref" --namespace "$ns" \
  | "$py" -c "import json,sys; d=json.load(sys.stdin); d.pop('snapshots'); print(json.dumps(d))"
echo "== limits: ${BENCH_LEVELS:-2000}-level manifest, zae-limits against the 0.17.0 provisioner, same moto"
"$py" tests/harness/client.py setup --table "$table-limits-ours" > /dev/null
"$py" tests/harness/client.py setup --table "$table-limits-ref" > /dev/null
"$py" tests/harness/bench_limits.py --ours-table "$table-limits-ours" --ref-table "$table-limits-ref" \
  --zae-limits "$ROOT/target/release/zae-limits" --levels "${BENCH_LEVELS:-2000}"
rm -rf "$work"
