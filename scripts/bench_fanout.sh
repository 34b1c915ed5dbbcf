#!/usr/bin/env bash
# The fan-out benchmark for docs/benchmarks.md: a system-level soft change
# fanned out to BENCH_BUCKETS (100,000) existing buckets by the release
# zae-limits, in one apply and in applies bounded by BENCH_MAX_SECONDS (30);
# then ours against the 0.17.0 Python provisioner on BENCH_SAME_INPUT
# (10,000) buckets each, same moto. About 25 minutes on 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/setup-venv.sh"
cargo build --quiet --release -p zae-limits --bin zae-limits
. "$ROOT/scripts/moto.sh"
py="$ROOT/.venv/bin/python"
prefix="fanout-$$"
for t in big ours ref; do
  "$py" tests/harness/client.py setup --table "$prefix-$t" > /dev/null
done
echo "== commit $(git rev-parse --short HEAD)"
"$py" tests/harness/bench_fanout.py --zae-limits "$ROOT/target/release/zae-limits" --tables "$prefix" \
  --buckets "${BENCH_BUCKETS:-100000}" --same-input "${BENCH_SAME_INPUT:-10000}" \
  --max-seconds "${BENCH_MAX_SECONDS:-30}"
