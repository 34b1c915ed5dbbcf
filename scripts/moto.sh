# Sourced: starts one moto server on a free loopback port for this shell and
# stops it, by PID, when the shell exits. Exports ZAE_MOTO_ENDPOINT (and the
# AWS environment pointing at it). `restart_moto` stops it and starts a
# fresh one, for a phase that must not share moto with what ran before.
# `start_py_runner` (the tests only) starts tests/harness/runner.py, one
# Python for every harness script of the run, and exports ZAE_PY_RUNNER.
start_moto() {
  moto_port="$("$ROOT/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "$ROOT/.venv/bin/python" "$ROOT/tests/harness/moto_server.py" "$moto_port" --parent-pid $$ >"${MOTO_LOG:-/dev/null}" 2>&1 &
  moto_pid=$!
  for _ in $(seq 1 300); do
    if "$ROOT/.venv/bin/python" -c "import socket,sys; socket.create_connection(('127.0.0.1',$moto_port),1)" 2>/dev/null; then break; fi
    kill -0 "$moto_pid" 2>/dev/null || { echo "moto failed to start" >&2; exit 1; }
    sleep 0.1
  done
  export ZAE_MOTO_ENDPOINT="http://127.0.0.1:$moto_port"
  export AWS_ENDPOINT_URL="$ZAE_MOTO_ENDPOINT" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
}
stop_moto() {
  kill "$moto_pid" 2>/dev/null || true
  wait "$moto_pid" 2>/dev/null || true
}
restart_moto() {
  stop_moto
  start_moto
}
start_py_runner() {
  py_runner_socket="$ROOT/.work/py-runner-$$.sock"
  mkdir -p "$ROOT/.work"
  "$ROOT/.venv/bin/python" "$ROOT/tests/harness/runner.py" "$py_runner_socket" --parent-pid $$ \
    >"$ROOT/.work/py-runner.log" 2>&1 &
  py_runner_pid=$!
  for _ in $(seq 1 300); do
    [ -S "$py_runner_socket" ] && break
    kill -0 "$py_runner_pid" 2>/dev/null || { cat "$ROOT/.work/py-runner.log" >&2; echo "the Python runner failed to start" >&2; exit 1; }
    sleep 0.1
  done
  export ZAE_PY_RUNNER="$py_runner_socket"
}
stop_py_runner() {
  [ -n "${py_runner_pid:-}" ] || return 0
  kill "$py_runner_pid" 2>/dev/null || true
  wait "$py_runner_pid" 2>/dev/null || true
  rm -f "$py_runner_socket"
}
trap 'stop_py_runner; stop_moto' EXIT
start_moto
