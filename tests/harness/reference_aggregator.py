"""Runs the reference Python aggregator (zae-limiter 0.17.0) on a table's stream.

The records are read from SOURCE's stream, filtered as the 0.17.0 template's
event source mapping does (MODIFY of #STATE items), cut into batches of 100 and
handed to `process_stream_records`, which writes into TARGET (a second table
with the same definition, so the two aggregators never share items). Then
TARGET's snapshots are read back through the client's own deserializer.
Prints JSON: summed snapshots per entity and window type, and call counts and
timings per batch.

Usage: reference_aggregator.py --source T --target T2 --namespace NS
"""
import argparse
import asyncio
import collections
import contextlib
import io
import json
import os
import sys
import time

import boto3
from zae_limiter import Repository

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import ENTITIES, endpoint, region  # noqa: E402
from stream_truth import read_stream  # noqa: E402

BATCH = 100


def esm_filter(r: dict) -> bool:
    return r["eventName"] == "MODIFY" and r["dynamodb"].get("NewImage", {}).get("SK", {}).get("S") == "#STATE"


async def create_target(table: str) -> Repository:
    repo = Repository(table, region=region(), endpoint_url=endpoint(), _skip_deprecation_warning=True)
    await repo.create_table()
    return repo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args()

    reader = asyncio.run(create_target(args.target))
    records = [r for r in read_stream(args.source) if esm_filter(r)]

    boto3.setup_default_session()
    calls = collections.Counter()
    boto3.DEFAULT_SESSION.events.register(
        "after-call.dynamodb", lambda model, **kw: calls.__setitem__(model.name, calls[model.name] + 1)
    )
    from zae_limiter_aggregator.processor import process_stream_records

    batches, errors = 0, 0
    started = time.perf_counter()
    for i in range(0, len(records), BATCH):
        batches += 1
        with contextlib.redirect_stdout(io.StringIO()):
            result = process_stream_records(records[i:i + BATCH], table_name=args.target, windows=["hourly", "daily"], ttl_days=90)
        errors += len(result.errors)
    elapsed = time.perf_counter() - started

    ddb = boto3.client("dynamodb")
    sums = {}
    for entity in ENTITIES:
        items = ddb.query(
            TableName=args.target,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :u)",
            ExpressionAttributeValues={":pk": {"S": f"{args.namespace}/ENTITY#{entity}"}, ":u": {"S": "#USAGE#"}},
        )["Items"]
        per_window = sums.setdefault(entity, {})
        for item in items:
            snap = reader._deserialize_usage_snapshot(item)
            slot = per_window.setdefault(snap.window_type, {"counters": {}, "overdrawn": {}, "total_events": 0, "keys": []})
            slot["keys"].append(snap.window_start)
            slot["total_events"] += snap.total_events
            for k, v in snap.counters.items():
                slot["counters"][k] = slot["counters"].get(k, 0) + v
            for k, v in snap.overdrawn.items():
                slot["overdrawn"][k] = slot["overdrawn"].get(k, 0) + v
    asyncio.run(reader.close())
    json.dump(
        {
            "records": len(records),
            "batches": batches,
            "errors": errors,
            "calls": dict(calls),
            "seconds": elapsed,
            "snapshots": sums,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
