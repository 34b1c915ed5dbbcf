"""The functions as `sam build` built them: each `rust-cargolambda` function of
template.yaml has one executable x86-64 `bootstrap` in the directory that
.aws-sam/build/template.yaml (what `sam deploy` uploads) names as its code.
Each runs under `cargo lambda watch --only-lambda-apis`, the Lambda runtime
emulator, with DynamoDB on moto:

  * the aggregator gets a stream batch recorded from the real client's
    traffic, and the client then reads the snapshots and audit events;
  * the provisioner gets a CloudFormation Create, PUTs SUCCESS to a local
    ResponseURL and writes the config items the client reads back;
  * a Create with a bad manifest gets FAILED with the path of the bad field,
    and the table is unchanged;
  * each bootstrap's first log line names the build (Cargo.toml's version)
    and the table stamp it writes.

    watch_e2e.py      (after `sam build`; moto from AWS_ENDPOINT_URL, as
                       scripts/moto.sh exports it)
"""
import http.server
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request

import boto3
from cfnlint.decode import decode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
BUILD = os.path.join(ROOT, ".aws-sam", "build")
# The binaries this script drives; each must be a function of template.yaml.
FUNCTIONS = ("aggregator", "cfn-limits-resource")
with open(os.path.join(ROOT, "Cargo.toml"), "rb") as _cargo:
    VERSION = tomllib.load(_cargo)["workspace"]["package"]["version"]


def log_of(function: str) -> str:
    """Each bootstrap's own log (stdout and stderr), for its first line."""
    return os.path.join(ROOT, "target", f"watch_e2e.{function}.log")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not listen on {port}")


def harness(script: str, *args: str) -> dict:
    out = subprocess.run([PY, os.path.join(ROOT, "tests/harness", script), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{script} {args} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def invoke(port: int, function: str, payload: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/2015-03-31/functions/{function}/invocations",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read() or b"null")


def stream_batch(table: str) -> dict:
    """Every record of the table's stream, as Lambda's event source mapping delivers them."""
    dynamodb = boto3.client("dynamodb")
    streams = boto3.client("dynamodbstreams")
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            if not page["Records"]:
                break
            for record in page["Records"]:
                record["dynamodb"]["ApproximateCreationDateTime"] = record["dynamodb"][
                    "ApproximateCreationDateTime"
                ].timestamp()
                record["eventSourceARN"] = arn
                records.append(record)
            iterator = page.get("NextShardIterator")
    return {"Records": records}


class Receiver(http.server.BaseHTTPRequestHandler):
    """A local ResponseURL: each PUT body goes on the queue."""

    bodies: "queue.Queue[dict]" = queue.Queue()

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        Receiver.bodies.put(json.loads(body))

    def log_message(self, *args):
        pass


def cfn_event(url: str, request: str, table: str, capacity: str) -> dict:
    return {
        "RequestType": "Create",
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:cfn-limits-resource",
        "ResponseURL": f"{url}?request={request}",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/tenant/guid",
        "RequestId": request,
        "LogicalResourceId": "TenantLimits",
        "ResourceType": "Custom::ZaeLimiterLimits",
        "ResourceProperties": {
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:cfn-limits-resource",
            "TableName": table,
            "Namespace": "default",
            "Resources": {"gpt-4": {"Limits": {
                "tpm": {"Capacity": "5000", "RefillPeriod": "86400", "Soft": "true"},
                "rpm": {"Capacity": capacity},
            }}},
        },
    }


def load(path: str) -> dict:
    template, errors = decode(path)
    if errors or template is None:
        raise SystemExit(f"cannot read {path}: {errors}")
    return template


def built() -> dict:
    """Each Rust function's `bootstrap`, by binary name, where `sam build` put it."""
    source = load(os.path.join(ROOT, "template.yaml"))["Resources"]
    built_template = os.path.join(BUILD, "template.yaml")
    if not os.path.exists(built_template):
        raise SystemExit(f"{built_template} is missing: run `sam build` first")
    resources = load(built_template)["Resources"]
    binaries = {}
    for name, resource in source.items():
        metadata = resource.get("Metadata") or {}
        if metadata.get("BuildMethod") != "rust-cargolambda":
            continue
        binary = metadata["BuildProperties"]["Binary"]
        if name not in resources:
            raise SystemExit(f"{built_template} has no {name}: run `sam build` again")
        properties = resources[name]["Properties"]
        code = os.path.join(BUILD, properties["CodeUri"])
        entries = sorted(os.listdir(code)) if os.path.isdir(code) else None
        check(entries == ["bootstrap"], f"{name}: .aws-sam/build/{properties['CodeUri']} holds {entries}, one bootstrap")
        path = os.path.join(code, "bootstrap")
        with open(path, "rb") as f:
            header = f.read(20)
        # ELF, 64-bit, little-endian, e_machine 62 (x86-64): the template's default architecture.
        check(header[:6] == b"\x7fELF\x02\x01" and int.from_bytes(header[18:20], "little") == 62,
              f"{name}: bootstrap is an x86-64 ELF executable")
        check(os.access(path, os.X_OK), f"{name}: bootstrap is executable")
        binaries[binary] = path
    check(sorted(binaries) == sorted(FUNCTIONS), f"sam built {sorted(binaries)}, the functions this script runs")
    return binaries


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"FAILED: {message}")
    print(f"ok: {message}")


def main() -> None:
    moto = os.environ["AWS_ENDPOINT_URL"]
    binaries = built()
    port = free_port()
    logs = open(os.path.join(ROOT, "target/watch_e2e.log"), "w")
    watch = subprocess.Popen(
        ["cargo", "lambda", "watch", "--only-lambda-apis", "--invoke-address", "127.0.0.1", "--invoke-port", str(port)],
        cwd=ROOT, stdout=logs, stderr=subprocess.STDOUT,
    )
    children = [watch]
    try:
        wait_for(port, watch, "cargo lambda watch")
        table = f"watch-{os.getpid()}"
        harness("client.py", "setup", "--table", table)
        for function, binary in binaries.items():
            env = dict(
                os.environ,
                AWS_LAMBDA_RUNTIME_API=f"http://127.0.0.1:{port}/.rt/{function}",
                AWS_LAMBDA_FUNCTION_NAME=function,
                AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256",
                AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
                TABLE_NAME=table,
                AWS_ENDPOINT_URL=moto,
            )
            own = open(log_of(function), "w")
            children.append(subprocess.Popen([binary], env=env, stdout=own, stderr=subprocess.STDOUT))

        # The aggregator, on a batch of the real client's traffic.
        driven = harness("client.py", "drive", "--table", table, "--requests", "12")
        batch = stream_batch(table)
        answer = invoke(port, "aggregator", batch)
        check(answer.get("batchItemFailures") == [] and answer.get("statusCode") == 200,
              f"aggregator answered {answer} for {len(batch['Records'])} records")
        read = harness("client.py", "read", "--table", table)
        for entity, consumed in driven["consumed"].items():
            hourly = [s for s in read["entities"][entity]["snapshots"] if s["window"] == "hourly"]
            totals = {k: sum(s["counters"].get(k, 0) for s in hourly) for k in consumed}
            check(totals == consumed, f"{entity}: snapshots {totals} equal the client's consumption {consumed}")
        overdrawn = [e for e in read["entities"]["key-a"]["audit_events"] if e["action"] == "limit_overdrawn"]
        check(len(overdrawn) >= 1, f"key-a has {len(overdrawn)} limit_overdrawn audit event(s)")

        # The provisioner, through CloudFormation.
        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{receiver.server_address[1]}/response"
        invoke(port, "cfn-limits-resource", cfn_event(url, "create-1", table, "50"))
        created = Receiver.bodies.get(timeout=120)
        check(created["Status"] == "SUCCESS", f"Create answered {created['Status']}: {created['Reason']}")
        limits = harness(
            "limits_client.py", "read", "--table", table, "--levels", json.dumps(["resource:gpt-4"])
        )["levels"]["resource:gpt-4"]["limits"]
        check(
            [(l["name"], l["capacity"], l.get("soft", False)) for l in limits] == [("rpm", 50, False), ("tpm", 5000, True)],
            f"the client reads back the resource's limits {limits}",
        )
        before = harness("limits_client.py", "items", "--table", table)["items"]
        invoke(port, "cfn-limits-resource", cfn_event(url, "create-2", table, "lots"))
        failed = Receiver.bodies.get(timeout=120)
        check(failed["Status"] == "FAILED", f"a bad manifest answered {failed['Status']}")
        check("Resources.gpt-4.Limits.rpm.Capacity" in failed["Reason"], f"the reason names the field: {failed['Reason']}")
        after = harness("limits_client.py", "items", "--table", table)["items"]
        check(sorted(map(json.dumps, after)) == sorted(map(json.dumps, before)), "a failed Create wrote nothing")
        receiver.shutdown()

        # Both have started by now: the first line each logged.
        for function in FUNCTIONS:
            with open(log_of(function)) as f:
                first = f.readline()
            try:
                line = json.loads(first)
            except ValueError:
                line = {}
            check(
                line.get("version") == VERSION and line.get("table_stamp") == f"0.17.0+rust.{VERSION}",
                f"{function}'s first log line names build {VERSION} and its table stamp: {first.strip()}",
            )
    finally:
        for child in reversed(children):
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


if __name__ == "__main__":
    main()
