#!/usr/bin/env bash
# The test command, in tiers (docs/testing.md says what each one proves).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

usage() {
  cat <<'EOF'
Usage: ./scripts/test.sh [--full] [-- NEXTEST-ARGS...]

default   fmt; the layout's rules (scripts/layout.py); clippy (-D warnings) on every workspace target the tests
          build, in the same compilation as the test build; the template
          and migration checks; the link check of README.md and docs/; every unit, property and model test; the
          end-to-end tests with the real zae-limiter 0.17.0 client on moto
          that are not bound by the wall clock, and a subset of them on
          AWS's DynamoDB Local 2.6 (docs/testing.md#backends; Java 17 and
          npm needed: scripts/dynamodb-local.sh). Three tests at a time
          (cargo nextest). Measured on 2 cores from a clean clone:
          7 to 12 min cold (machines of this kind differ), about 3 min
          after a one-line change in table/.
--full    CI's gate (.ci/run): the default, then the authoritative
          `cargo clippy --workspace --all-targets --all-features`, clippy
          on the aggregator's Lambda feature set, every end-to-end test
          that needs only DynamoDB on DynamoDB Local 2.6 and 3.x, the tests
          bound by the wall clock (one at a time, on a moto of their own), then the
          deploy build as docs/deploy.md gives it: `sam validate --lint`
          and `sam build` (cargo lambda, Zig's cross-build, release; into
          .aws-sam/build/), and what sam built run under `cargo lambda
          watch`. About 36 min from a clean clone on the slower machines
          of this kind.

Not here, each its own command:
  ./scripts/long.sh   the multi-minute real-time runs (about 6 min)
  ./scripts/fuzz.sh   every property with 200,000 cases, the models with
                      20,000, the hostile-item property with a million
                      batches in its own optimised build (about 45 min)

Arguments after `--` go to `cargo nextest run`, for example a filter:
  ./scripts/test.sh -- -E 'test(/refill/)'
EOF
}

full=0
nextest_args=()
run_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1; run_args=(--no-fail-fast) ;;
    -h|--help) usage; exit 0 ;;
    --) shift; nextest_args=("$@"); break ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
  shift
done

. "$ROOT/scripts/phase.sh"
mkdir -p "$ROOT/.work"

if ! cargo nextest --version >/dev/null 2>&1; then
  phase "installing cargo-nextest from crates.io (it is not on this machine)" "about 4 min on 2 cores, once"
  cargo install --locked cargo-nextest --version 0.9.143
fi

phase "cargo fmt" "seconds"
cargo fmt --all --check

# docs/architecture.md's rules: the crates' imports, no function over 100
# lines, no import circle between a crate's modules.
phase "the layout's rules (scripts/layout.py --check)" "a second"
python3 "$ROOT/scripts/layout.py" --self-test
python3 "$ROOT/scripts/layout.py" --check >"$ROOT/.work/layout.log" || { cat "$ROOT/.work/layout.log"; exit 1; }

# The Python side and the template checks need no Rust: they run beside
# the build, and the build waits for neither.
phase "in the background: Python venv (moto, the zae-limiter 0.17.0 client, cfn-lint, the SAM CLI, cargo-lambda), then the template, migration and link checks" "first time about 2 min, then about 30 s; reported after the build"
export ZAE_TEST_PYTHON="$ROOT/.venv/bin/python"
(
  "$ROOT/scripts/setup-venv.sh"
  "$ROOT/scripts/dynamodb-local.sh" install
  "$ZAE_TEST_PYTHON" "$ROOT/tests/template/check_template.py"
  "$ZAE_TEST_PYTHON" "$ROOT/tests/template/check_migration.py"
  "$ZAE_TEST_PYTHON" "$ROOT/tests/docs/check_links.py"
  "$ZAE_TEST_PYTHON" "$ROOT/tests/smoke/check_smoke.py"
) >"$ROOT/.work/python-side.log" 2>&1 &
python_side=$!

. "$ROOT/scripts/build-env.sh"
phase "build and lint every test (clippy's driver as the workspace's compiler, --all-features)" "cold: 4.5 to 8 min on 2 cores; after a one-line change in table/: about 30 s"
# ZAE_TIMINGS=1: cargo's --timings report of this build, in target/cargo-timings/.
timings=()
[ "${ZAE_TIMINGS:-0}" = 1 ] && timings=(--timings)
cargo nextest run "${test_build_flags[@]}" --no-run "${timings[@]}"
if cargo tree -p zae-aggregator -e normal --prefix none | grep -q '^aws-sdk-cloudwatch '; then
  echo "the aggregator's default build carries aws-sdk-cloudwatch" >&2; exit 1
fi

phase "waiting for the Python side and the template checks" "usually done by now"
if ! wait "$python_side"; then
  cat "$ROOT/.work/python-side.log" >&2
  echo "the venv or the template checks failed (above; also .work/python-side.log)" >&2
  exit 1
fi
cat "$ROOT/.work/python-side.log"

. "$ROOT/scripts/moto.sh"
start_py_runner
# DynamoDB Local 2.6 for the default tier's subset; 3.x too in the full tier.
. "$ROOT/scripts/dynamodb-local.sh"
trap 'stop_py_runner; stop_moto; stop_dynamodb_local' EXIT
start_dynamodb_local 2.6
phase "unit, property, model and end-to-end tests (moto; a subset on DynamoDB Local 2.6)" "2 to 4 min; three at a time; nextest prints each test as it ends"
cargo nextest run "${test_build_flags[@]}" "${run_args[@]}" "${nextest_args[@]}"

if [ "$full" = 0 ]; then
  phase "default tier passed (./scripts/test.sh --full adds clippy's own run, the wall-clock tests and the Lambda packages)" "done"
  exit 0
fi

# Clippy's own runs, without the wrapper: the authoritative one over every
# target, then the Lambda's own feature set (no cloudwatch, no
# dev-dependencies), which compiles clean too.
phase "cargo clippy --workspace --all-targets --all-features, then the aggregator's Lambda feature set (their own check builds)" "cold: 2 to 4 min; warm: seconds"
(
  unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
  cargo clippy --workspace --all-targets --all-features -- -D warnings
  cargo clippy -p zae-aggregator --bins -- -D warnings
)

start_dynamodb_local 3
phase "the rest of the end-to-end tests on DynamoDB Local 2.6, and all of them on 3.x" "about 4 min; three at a time"
cargo nextest run "${test_build_flags[@]}" --profile dynamodb-local "${run_args[@]}" "${nextest_args[@]}"

restart_moto
phase "the tests bound by the wall clock, one at a time on a fresh moto" "about 6 min, the longest a 3.5-minute adaptive run"
cargo nextest run "${test_build_flags[@]}" --profile realtime "${run_args[@]}" "${nextest_args[@]}"

# The Lambda packages as docs/deploy.md builds them. sam, cargo-lambda and Zig
# come from the venv; neither command reaches AWS. `sam build` runs `cargo
# lambda build --release --bin <Binary>` per function in this workspace (its
# target/, so a warm build is incremental) and copies each bootstrap to
# .aws-sam/build/<Function>/. By rustc alone: clippy's driver turns MIR
# optimisations off, which changes the code (7.38 MB against 7.28 MB zipped).
# No standard input: a SAM that asked to confirm a beta builder would fail here.
export PATH="$ROOT/.venv/bin:$PATH" SAM_CLI_TELEMETRY=0
phase "sam validate --lint (cfn-lint through SAM; no AWS call)" "about 10 s"
sam validate --lint </dev/null
phase "sam build: both functions with cargo lambda (Zig cross-build, release), one after the other; sam shows no progress until it ends" "cold: 8 to 13 min; after a change in table/: 3 to 8 min; unchanged: seconds"
# SAM prints nothing while cargo builds: a line a minute says it still runs.
( while sleep 60; do echo "   sam build still running ($(date -u +%H:%M:%S) UTC)"; done ) &
heartbeat=$!
stop_heartbeat() { pkill -P "$heartbeat" 2>/dev/null || true; kill "$heartbeat" 2>/dev/null || true; wait "$heartbeat" 2>/dev/null || true; }
(
  unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
  sam build </dev/null
) || { stop_heartbeat; exit 1; }
stop_heartbeat
phase "what sam built: a bootstrap per function, run under cargo lambda watch" "about 15 s"
"$ZAE_TEST_PYTHON" "$ROOT/tests/lambda/watch_e2e.py"
phase "full tier passed" "done"
