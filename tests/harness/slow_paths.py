"""How often the real 0.17.0 client falls back to its slow path under a
steady workload: with our aggregator, with the reference (Python 0.17.0)
aggregator, or with none.

    slow_paths.py run --mode ours|reference|none --seconds S [--entities E]
                      [--rate Q] [--burst B] [--window W] [--aggregator BIN]
                      [--skew-ms MS]
    slow_paths.py drain --table T     one entity's bucket (100 a second, burst
                                      100) made, then drained by a fast path in
                                      a later second of the clock
    slow_paths.py spend --table T     one token, from a new process: the calls
                                      its acquire made, and the bucket after

E entities each send Q one-token acquires a second, paced, against a hard
per-second limit (RATE a second, burst --burst, 40 by default). The client talks to moto
through a counting proxy, which tells fast-path failures (an UpdateItem or
a transaction refused on its condition) and reads (GetItem, BatchGetItem,
Query) apart. An event-source-mapping stand-in reads the table's stream
every W seconds, filters it as each stack's template does, and hands it on
in batches of 100: to our aggregator binary running under the Lambda
stand-in (lambda_shim.py), or to the reference's `process_stream_records`,
or to nobody. Both aggregators write to the same table the client uses.
Prints one JSON object. Endpoint and credentials come from the AWS
environment (AWS_ENDPOINT_URL is moto). --skew-ms runs our aggregator's
clock that far ahead of the client's (behind when negative), through its
ZAE_CLOCK_SKEW_MS.
"""
import argparse
import asyncio
import contextlib
import http.client
import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import boto3
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import create, endpoint, region  # noqa: E402

RESOURCE = "api"
RATE = 20
READS = ("GetItem", "BatchGetItem", "Query")
REFUSED = ("ConditionalCheckFailedException", "TransactionCanceledException")


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: dict = {}
        self.refused: dict = {}

    def add(self, op: str, refused: bool) -> None:
        with self.lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            if refused:
                self.refused[op] = self.refused.get(op, 0) + 1


def counting_proxy(target: str, counts: Counts) -> str:
    host = urlparse(target)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            conn.request("POST", self.path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
            op = self.headers.get("X-Amz-Target", "").split(".")[-1]
            counts.add(op, resp.status == 400 and any(r.encode() in data for r in REFUSED))
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def entities(n: int) -> list:
    return [f"steady-{i}" for i in range(n)]


async def setup(table: str, n: int, burst: int, rate: int = RATE) -> None:
    await create(table)
    repo = await Repository.open("default", stack=table, region=region(), endpoint_url=endpoint())
    limiter = RateLimiter(repository=repo)
    for entity in entities(n):
        await limiter.create_entity(entity)
        await limiter.set_limits(entity, [Limit.per_second("rps", rate, burst=burst)], resource=RESOURCE)
    await repo.close()


async def workload(table: str, proxy: str, n: int, rate: float, seconds: float) -> dict:
    repo = await Repository.open("default", stack=table, region=region(), endpoint_url=proxy)
    limiter = RateLimiter(repository=repo)
    tally = {"requests": 0, "admitted": 0, "rejected": 0}

    async def one(entity: str) -> None:
        start = time.monotonic()
        i = 0
        while (due := start + i / rate) < start + seconds:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            i += 1
            tally["requests"] += 1
            try:
                async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"rps": 1}):
                    tally["admitted"] += 1
            except RateLimitExceeded:
                tally["rejected"] += 1

    await asyncio.gather(*(one(e) for e in entities(n)))
    await repo.close()
    return tally


def esm_filter(mode: str, record: dict) -> bool:
    """Each stack's event source mapping filter."""
    sk = record["dynamodb"].get("Keys", {}).get("SK", {}).get("S")
    if mode == "reference":
        return record["eventName"] == "MODIFY" and record["dynamodb"].get("NewImage", {}).get("SK", {}).get("S") == "#STATE"
    return record["eventName"] in ("INSERT", "MODIFY") and sk == "#STATE"


def lambda_shape(record: dict, arn: str) -> dict:
    """A stream record as Lambda delivers it: the creation time in epoch seconds."""
    record = dict(record)
    change = dict(record["dynamodb"])
    created = change.get("ApproximateCreationDateTime")
    if hasattr(created, "timestamp"):
        change["ApproximateCreationDateTime"] = created.timestamp()
    record["dynamodb"] = change
    record["eventSourceARN"] = arn
    return record


def esm(args) -> None:
    """Reads the stream every --window seconds until --stop exists; prints counts."""
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=args.table)["Table"]["LatestStreamArn"]
    iterators = {}
    invoke = None
    if args.mode == "reference":
        from zae_limiter_aggregator.processor import process_stream_records

        def invoke(batch):
            with contextlib.redirect_stdout(io.StringIO()):
                result = process_stream_records(batch, table_name=args.table, windows=["hourly", "daily"], ttl_days=90)
            done["refills"] += result.refills_written
            done["errors"] += len(result.errors)
    elif args.mode == "ours":
        lam = boto3.client("lambda", endpoint_url=args.shim)

        def invoke(batch):
            answer = json.loads(lam.invoke(FunctionName="aggregator", Payload=json.dumps({"Records": batch}, default=str))["Payload"].read())
            body = answer.get("body", {})
            done["refills"] += body.get("refills_written", 0)
            done["errors"] += len(body.get("errors", []))
    done = {"batches": 0, "records": 0, "refills": 0, "errors": 0}
    while True:
        stopping = os.path.exists(args.stop)
        records = []
        for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            sid = shard["ShardId"]
            if sid not in iterators:
                iterators[sid] = streams.get_shard_iterator(StreamArn=arn, ShardId=sid, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
            while iterators[sid]:
                page = streams.get_records(ShardIterator=iterators[sid], Limit=1000)
                iterators[sid] = page.get("NextShardIterator")
                if not page["Records"]:
                    break
                records += page["Records"]
        batch = [lambda_shape(r, arn) for r in records if esm_filter(args.mode, r)]
        for i in range(0, len(batch), 100):
            if invoke:
                invoke(batch[i:i + 100])
            done["batches"] += 1
        done["records"] += len(batch)
        if stopping:
            break
        time.sleep(args.window)
    print(json.dumps(done))


def run(args) -> None:
    table = f"slow-{args.mode}-{uuid.uuid4().hex[:8]}"
    asyncio.run(setup(table, args.entities, args.burst))
    here = os.path.dirname(os.path.abspath(__file__))
    shim = None
    env = dict(os.environ)
    esm_args = [sys.executable, __file__, "esm", "--mode", args.mode, "--table", table,
                "--window", str(args.window), "--stop", f"/tmp/{table}.stop"]
    if args.mode == "ours":
        shim = subprocess.Popen(
            [sys.executable, os.path.join(here, "lambda_shim.py"), "--function-name", "aggregator",
             "--command", args.aggregator, "--parent-pid", str(os.getpid()),
             "--env", f"TABLE_NAME={table}", "--env", f"AWS_ENDPOINT_URL={endpoint()}",
             "--env", "AWS_ACCESS_KEY_ID=test", "--env", "AWS_SECRET_ACCESS_KEY=test",
             "--env", f"AWS_REGION={region()}", "--env", "METRICS=off", "--env", "RUST_LOG=warn",
             "--env", f"ZAE_CLOCK_SKEW_MS={args.skew_ms}",
             "--log", f"/tmp/{table}.log"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        esm_args += ["--shim", shim.stdout.readline().strip()]
    counts = Counts()
    proxy = counting_proxy(endpoint(), counts)
    feeder = subprocess.Popen(esm_args, stdout=subprocess.PIPE, text=True, env=env)
    started = time.monotonic()
    tally = asyncio.run(workload(table, proxy, args.entities, args.rate, args.seconds))
    tally["seconds"] = round(time.monotonic() - started, 1)
    open(f"/tmp/{table}.stop", "w").close()
    fed = json.loads(feeder.communicate(timeout=600)[0].strip().splitlines()[-1])
    os.remove(f"/tmp/{table}.stop")
    if shim:
        shim.terminate()
    refused = sum(counts.refused.values())
    reads = sum(counts.calls.get(op, 0) for op in READS)
    print(json.dumps({
        "mode": args.mode, "table": table, "skew_ms": args.skew_ms, **tally, "fed": fed,
        "refused_writes": refused, "reads": reads, "slow_paths": refused + reads,
        "calls": counts.calls, "refused": counts.refused,
    }))


DRAIN_RATE = 100


async def drain(table: str) -> dict:
    """The bucket made by a slow path at t0 holding all but one token, then
    emptied by a fast path (which never moves `rf`) once the clock is past
    t0's second by 100 ms: that record's time, DynamoDB's to the second, is
    then at least 100 ms past `rf`, so a refill up to it credits at least 10
    tokens. The wait is the accrual the refill is for, not synchronisation."""
    await setup(table, 1, DRAIN_RATE, DRAIN_RATE)
    repo = await Repository.open("default", stack=table, region=region(), endpoint_url=endpoint())
    limiter = RateLimiter(repository=repo)
    entity = entities(1)[0]
    async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"rps": 1}):
        pass
    made = (await repo.get_buckets(entity, RESOURCE))[0]
    due = (made.last_refill_ms // 1000 + 1) * 1000 + 100
    await asyncio.sleep(max(0.0, due / 1000 - time.time()))
    async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"rps": DRAIN_RATE - 1}):
        pass
    drained = (await repo.get_buckets(entity, RESOURCE))[0]
    await repo.close()
    return {"table": table, "made_rf": made.last_refill_ms, "tk": drained.tokens_milli, "rf": drained.last_refill_ms}


async def spend(table: str) -> dict:
    entity = entities(1)[0]
    # Read apart from the process that acquires, so that nothing it caches
    # comes from this read.
    reader = await Repository.open("default", stack=table, region=region(), endpoint_url=endpoint())
    before = (await reader.get_buckets(entity, RESOURCE))[0]
    await reader.close()
    counts = Counts()
    proxy = counting_proxy(endpoint(), counts)
    repo = await Repository.open("default", stack=table, region=region(), endpoint_url=proxy)
    limiter = RateLimiter(repository=repo)
    opened = dict(counts.calls)
    async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"rps": 1}):
        pass
    calls = {op: n - opened.get(op, 0) for op, n in counts.calls.items() if n > opened.get(op, 0)}
    refused = sum(counts.refused.values())
    await repo.close()
    return {
        "before": {"tk": before.tokens_milli, "rf": before.last_refill_ms, "cp": before.capacity_milli},
        "calls": calls, "refused_writes": refused,
        "slow_paths": refused + sum(calls.get(op, 0) for op in READS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=["ours", "reference", "none"], required=True)
    r.add_argument("--seconds", type=float, default=20)
    r.add_argument("--entities", type=int, default=3)
    r.add_argument("--rate", type=float, default=15)
    r.add_argument("--burst", type=int, default=40)
    r.add_argument("--window", type=float, default=1.0)
    r.add_argument("--aggregator")
    r.add_argument("--skew-ms", type=int, default=0)
    e = sub.add_parser("esm")
    e.add_argument("--mode", required=True)
    e.add_argument("--table", required=True)
    e.add_argument("--window", type=float, required=True)
    e.add_argument("--stop", required=True)
    e.add_argument("--shim")
    for name in ("drain", "spend"):
        sub.add_parser(name).add_argument("--table", required=True)
    args = parser.parse_args()
    if args.command == "drain":
        print(json.dumps(asyncio.run(drain(args.table))))
    elif args.command == "spend":
        print(json.dumps(asyncio.run(spend(args.table))))
    else:
        run(args) if args.command == "run" else esm(args)


if __name__ == "__main__":
    main()
