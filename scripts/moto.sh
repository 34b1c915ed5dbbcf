# Sourced: starts one moto server on a free loopback port for this shell and
# stops it, by PID, when the shell exits. Exports ZAE_MOTO_ENDPOINT.
moto_port="$("$ROOT/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$ROOT/.venv/bin/python" "$ROOT/tests/harness/moto_server.py" "$moto_port" --parent-pid $$ >"${MOTO_LOG:-/dev/null}" 2>&1 &
moto_pid=$!
trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  if "$ROOT/.venv/bin/python" -c "import socket,sys; socket.create_connection(('127.0.0.1',$moto_port),1)" 2>/dev/null; then break; fi
  kill -0 "$moto_pid" 2>/dev/null || { echo "moto failed to start" >&2; exit 1; }
  sleep 0.1
done
export ZAE_MOTO_ENDPOINT="http://127.0.0.1:$moto_port"
export AWS_ENDPOINT_URL="$ZAE_MOTO_ENDPOINT" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
