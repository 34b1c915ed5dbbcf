"""A system-level soft change fanned out to many existing buckets: ours
(`zae-limits apply`, release build) and the 0.17.0 Python provisioner
(`on_event`, in this process), on the same moto, each on its own table.

    bench_fanout.py --zae-limits BIN --tables PREFIX [--buckets 100000]
                    [--same-input 10000] [--max-seconds 30]

1. ours on --buckets buckets, in one apply: wall time, peak RSS (the
   process's maximum resident set, from the kernel), calls, buckets stamped;
2. ours again, the change reverted, in applies bounded by --max-seconds,
   repeated until nothing is pending: each apply's wall time and peak RSS;
3. ours and the reference on --same-input buckets each (the same input):
   wall time, peak RSS, buckets stamped.

Tables PREFIX-big, PREFIX-ours, PREFIX-ref must exist with namespace `default`
registered (client.py setup). Prints JSON.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import boto3

from bench_limits import Context, namespace_id

HARD = {"namespace": "default", "system": {"limits": {"rpm": {"capacity": 100}}}}
SOFT = {"namespace": "default", "system": {"limits": {"rpm": {"capacity": 100, "soft": True}}}}


def seed(table: str, count: int) -> None:
    """Buckets as the client leaves them: keys, index keys, one limit."""
    ns = namespace_id(table)
    client = boto3.client("dynamodb")
    s = lambda v: {"S": v}  # noqa: E731
    n = lambda v: {"N": str(v)}  # noqa: E731
    batch = []
    for i in range(count):
        entity = f"user-{i:06d}"
        batch.append({"PutRequest": {"Item": {
            "PK": s(f"{ns}/BUCKET#{entity}#gpt-4#0"), "SK": s("#STATE"),
            "GSI2PK": s(f"{ns}/RESOURCE#gpt-4"), "GSI2SK": s(f"BUCKET#{entity}#0"),
            "GSI3PK": s(f"{ns}/ENTITY#{entity}"), "GSI3SK": s("BUCKET#gpt-4#0"),
            "GSI4PK": s(ns), "GSI4SK": s(f"BUCKET#{entity}#gpt-4#0"),
            "b_rpm_cp": n(100_000), "b_rpm_tk": n(100_000), "b_rpm_ra": n(100_000),
            "b_rpm_rp": n(60_000), "b_rpm_tc": n(0), "rf": n(0), "shard_count": n(1),
        }}})
        if len(batch) == 25:
            client.batch_write_item(RequestItems={table: batch})
            batch = []
    if batch:
        client.batch_write_item(RequestItems={table: batch})


def stamped(table: str) -> int:
    """Buckets carrying a soft stamp."""
    paginator = boto3.client("dynamodb").get_paginator("scan")
    total = 0
    for page in paginator.paginate(
        TableName=table, FilterExpression="attribute_exists(b_rpm_soft)", Select="COUNT"
    ):
        total += page["Count"]
    return total


def write(body: dict) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
        return f.name


def ours(binary: str, table: str, body: dict, max_seconds: int | None = None) -> dict:
    """One `zae-limits apply` under /usr/bin/time: its own peak RSS."""
    path = write(body)
    cmd = ["/usr/bin/time", "-f", "TIME %M %e", binary, "apply", "-f", path, "-t", table,
           "--json", "--stats", "--quiet"]
    if max_seconds:
        cmd += ["--max-seconds", str(max_seconds)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
        # 6: stopped at --max-seconds with fan-outs left, as asked.
        if out.returncode not in (0, 6):
            raise subprocess.CalledProcessError(out.returncode, cmd, out.stdout, out.stderr)
    finally:
        os.unlink(path)
    rss_kb, wall = next(line for line in out.stderr.splitlines() if line.startswith("TIME "))[5:].split()
    stats = next(json.loads(line) for line in out.stderr.splitlines() if line.startswith("{"))
    report = json.loads(out.stdout)
    return {
        "wall_seconds": float(wall),
        "peak_rss_mb": round(int(rss_kb) / 1024, 1),
        "pending": report["pending"],
        "errors": len(report["errors"]),
        "dynamodb_calls": stats["dynamodb_calls"],
    }


def reference(table: str, body: dict) -> dict:
    from zae_limiter_provisioner.handler import on_event

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    result = on_event(
        {"action": "apply", "table_name": table, "namespace_id": namespace_id(table), "manifest": body},
        Context(),
    )
    return {
        "wall_seconds": round(time.perf_counter() - start, 2),
        "peak_rss_mb_of_this_python": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_rss_mb_before": round(before / 1024, 1),
        "errors": len(result["errors"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zae-limits", required=True)
    parser.add_argument("--tables", required=True)
    parser.add_argument("--buckets", type=int, default=100_000)
    parser.add_argument("--same-input", type=int, default=10_000)
    parser.add_argument("--max-seconds", type=int, default=30)
    args = parser.parse_args()
    big, mine, ref = (f"{args.tables}-{x}" for x in ("big", "ours", "ref"))
    result: dict = {"buckets": args.buckets, "same_input_buckets": args.same_input}

    ours(args.zae_limits, big, HARD)
    seed(big, args.buckets)
    one = ours(args.zae_limits, big, SOFT)
    one["buckets_stamped"] = stamped(big)
    result["ours_one_apply"] = one

    bounded = []
    while True:
        run = ours(args.zae_limits, big, HARD, args.max_seconds)
        bounded.append(run)
        if run["pending"] == 0 or len(bounded) >= 100:
            break
    result["ours_bounded_applies"] = {
        "max_seconds": args.max_seconds,
        "applies": len(bounded),
        "longest_wall_seconds": max(r["wall_seconds"] for r in bounded),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in bounded),
        "buckets_left_stamped": stamped(big),
        "runs": bounded,
    }

    ours(args.zae_limits, mine, HARD)
    seed(mine, args.same_input)
    same = ours(args.zae_limits, mine, SOFT)
    same["buckets_stamped"] = stamped(mine)
    reference(ref, HARD)
    seed(ref, args.same_input)
    theirs = reference(ref, SOFT)
    theirs["buckets_stamped"] = stamped(ref)
    result["same_input"] = {"ours": same, "reference": theirs,
                            "wall_ratio": round(theirs["wall_seconds"] / max(same["wall_seconds"], 1e-9), 2)}
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
