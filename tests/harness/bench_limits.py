"""Applies one large manifest with ours (`zae-limits`) and with the 0.17.0
Python provisioner (`on_event`, the direct-invoke path, in this process) on
the same moto, each into its own fresh table, then re-applies it unchanged.
Prints wall time and DynamoDB calls by operation, as JSON.

    bench_limits.py --ours-table A --ref-table B --zae-limits BIN [--levels 2000]

Both tables must exist with namespace `default` registered (client.py setup).
Endpoint and credentials come from the AWS environment.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter

import boto3
import yaml


def manifest(levels: int) -> dict:
    """System, then 10% resources, the rest entity levels: two limits each, one soft."""
    def limits(i: int) -> dict:
        return {
            "rpm": {"capacity": 1000 + i},
            "tpm": {"capacity": 100_000 + i, "refill_period": 86400, "soft": True},
        }

    resources_n = max(1, (levels - 1) // 10)
    entity_levels = levels - 1 - resources_n
    resources = {f"model-{i}": {"limits": limits(i)} for i in range(resources_n)}
    entities: dict = {}
    for i in range(entity_levels):
        entity = f"user-{i // 2}"
        resource = f"model-{i % 2}" if i % 2 else "_default_"
        entities.setdefault(entity, {"resources": {}})["resources"][resource] = {"limits": limits(i)}
    return {
        "namespace": "default",
        "system": {"on_unavailable": "allow", "limits": limits(0)},
        "resources": resources,
        "entities": entities,
    }


def namespace_id(table: str) -> str:
    client = boto3.client("dynamodb")
    item = client.get_item(
        TableName=table, Key={"PK": {"S": "_/SYSTEM#"}, "SK": {"S": "#NAMESPACE#default"}}
    )["Item"]
    return item["namespace_id"]["S"]


class Context:
    log_stream_name = "bench"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 900_000


def reference(table: str, body: dict) -> dict:
    from zae_limiter_provisioner.handler import on_event

    calls: Counter = Counter()

    def count(model, **_):
        calls[model.name] += 1

    boto3.setup_default_session()
    boto3.DEFAULT_SESSION.events.register("before-call.dynamodb", count)
    ns = namespace_id(table)
    runs = []
    for _ in range(2):
        calls.clear()
        start = time.perf_counter()
        result = on_event(
            {"action": "apply", "table_name": table, "namespace_id": ns, "manifest": body}, Context()
        )
        runs.append(
            {
                "wall_seconds": round(time.perf_counter() - start, 3),
                "dynamodb_calls": dict(sorted(calls.items())),
                "created": result["created"],
                "updated": result["updated"],
                "unchanged": result["unchanged"],
                "errors": len(result["errors"]),
            }
        )
    return {"first_apply": runs[0], "re_apply": runs[1]}


def ours(table: str, path: str, binary: str) -> dict:
    runs = []
    for _ in range(2):
        start = time.perf_counter()
        out = subprocess.run(
            [binary, "apply", "-f", path, "-t", table, "--json", "--stats", "--quiet", "--no-progress"],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
        report = json.loads(out.stdout)
        stats = json.loads(out.stderr.strip().splitlines()[-1])
        runs.append(
            {
                "wall_seconds": round(wall, 3),
                "dynamodb_calls": stats["dynamodb_calls"],
                "created": report["created"],
                "updated": report["updated"],
                "unchanged": report["unchanged"],
                "errors": len(report["errors"]),
            }
        )
    return {"first_apply": runs[0], "re_apply": runs[1]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours-table", required=True)
    parser.add_argument("--ref-table", required=True)
    parser.add_argument("--zae-limits", required=True)
    parser.add_argument("--levels", type=int, default=2000)
    args = parser.parse_args()
    body = manifest(args.levels)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(body, f)
        path = f.name
    try:
        result = {
            "levels": args.levels,
            "ours": ours(args.ours_table, path, args.zae_limits),
            "reference": reference(args.ref_table, body),
        }
    finally:
        os.unlink(path)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
