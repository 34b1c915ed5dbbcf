"""One Python interpreter for the harness scripts of a whole test run.

Importing boto3 and the zae-limiter client costs about 0.7 s of CPU, and the
end-to-end tests run some 180 scripts; on two cores that was a third of the
default tier's test time. This server imports them once, then runs each
script in a fork of itself, as `python SCRIPT ARGS...` would: its own
process, the caller's environment and working directory, `__name__ ==
"__main__"`, its exit status, its stdout and stderr.

    runner.py SOCKET --parent-pid PID

It listens on the Unix socket SOCKET. A request is one line of JSON,
`{"argv": [script, args...], "env": {...}, "cwd": "..."}`; the answer, once
the script has ended, is one JSON object `{"status": N, "stdout": "...",
"stderr": "..."}` and the end of the connection. The server exits when
process PID is gone. `zae_test_support::harness::run_json` uses it when
`ZAE_PY_RUNNER` names its socket, and runs the script itself otherwise.
"""
import atexit
import json
import os
import runpy
import signal
import socket
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


def preload() -> None:
    """What the scripts import, so that each fork starts with it. Only
    imports: no session, client, event loop or thread exists before a fork."""
    sys.path.insert(0, HERE)
    import boto3  # noqa: F401
    import zae_limiter  # noqa: F401
    import client  # noqa: F401
    import limits_client  # noqa: F401
    import adaptive  # noqa: F401


def exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def run(conn: socket.socket) -> None:
    """In the fork: one script, as its own `python` process would run it."""
    with conn.makefile("rb") as lines:
        request = json.loads(lines.readline())
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    status = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = exit_code(e)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    answer = {"status": status}
    for name, file in (("stdout", out), ("stderr", err)):
        file.seek(0)
        answer[name] = file.read().decode("utf-8", "replace")
    conn.sendall(json.dumps(answer).encode())
    conn.close()


def serve(path: str, parent: int) -> None:
    preload()
    # Forks are never waited for: the kernel reaps them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    if os.path.exists(path):
        os.remove(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    server.settimeout(0.5)
    while True:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            try:
                os.kill(parent, 0)
            except OSError:
                os.remove(path)
                return
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                run(conn)
            finally:
                os._exit(0)
        conn.close()


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[2] != "--parent-pid":
        sys.exit(__doc__)
    serve(sys.argv[1], int(sys.argv[3]))


if __name__ == "__main__":
    main()
