"""The audit archive end to end, on moto: audit items the real 0.17.0 client
wrote are removed, and the aggregator puts them in an S3 bucket.

    archive.py setup --table T --bucket B   table, bucket, two entities with limits
                                            (audit events), then half of the audit
                                            items deleted, and three forged audit
                                            items (keys the acquire policy allows)
                                            put and deleted; prints what was deleted
    archive.py ttl --table T --bucket B --aggregator BIN
                                            a TTL removal (moto never expires items
                                            nor sets userIdentity, so the record is
                                            made here) handed to the built binary
                                            under the Lambda stand-in; prints its answer
    archive.py read --bucket B              every object's key and lines, and the
                                            lines kept by the documented query
                                            (one per event_id)
"""
import argparse
import asyncio
import gzip
import json
import os
import subprocess
import sys
import time

import boto3
from zae_limiter import Limit, RateLimiter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import endpoint, open_repo, region, setup as create_table  # noqa: E402


async def make_events(table: str) -> str:
    await create_table(table)
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    for entity in ("org-1", "key-1"):
        await limiter.create_entity(entity)
        await limiter.set_limits(entity, [Limit.per_minute("rpm", 100)], resource="api")
        await limiter.set_limits(entity, [Limit.per_minute("rpm", 200)], resource="api")
    namespace = repo.namespace_id
    await repo.close()
    return namespace


def audit_items(table: str, namespace: str) -> list:
    ddb = boto3.client("dynamodb")
    items = []
    for entity in ("org-1", "key-1"):
        items += ddb.query(
            TableName=table,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :a)",
            ExpressionAttributeValues={":pk": {"S": f"{namespace}/AUDIT#{entity}"}, ":a": {"S": "#AUDIT#"}},
        )["Items"]
    return items


def forge(table: str, namespace: str) -> list:
    """Items a client holding only the acquire policy may write (any key
    matching `*/BUCKET#*`), made to look like audit items with a past ttl,
    then removed: one aimed at this namespace's archive, one at a namespace
    the table does not hold, one whose key would push the archive object's
    key past S3's 1,024 bytes."""
    ddb = boto3.client("dynamodb")
    keys = [f"{namespace}/AUDIT#x/BUCKET#y", "ghost/BUCKET#e#r#0", f"{namespace}/BUCKET#{'e' * 950}#r#0"]
    forged = []
    for i, pk in enumerate(keys):
        event_id = f"forged-{i}"
        key = {"PK": {"S": pk}, "SK": {"S": f"#AUDIT#{event_id}"}}
        ddb.put_item(TableName=table, Item={**key, "event_id": {"S": event_id}, "entity_id": {"S": "x"},
                                            "action": {"S": "limits_set"},
                                            "timestamp": {"S": "2026-11-29T10:00:00Z"}, "ttl": {"N": "1"}})
        ddb.delete_item(TableName=table, Key=key)
        forged.append(event_id)
    return forged


def setup(args) -> dict:
    boto3.client("s3").create_bucket(Bucket=args.bucket)
    namespace = asyncio.run(make_events(args.table))
    items = audit_items(args.table, namespace)
    ddb = boto3.client("dynamodb")
    deleted = []
    for item in items[::2]:
        ddb.delete_item(TableName=args.table, Key={"PK": item["PK"], "SK": item["SK"]})
        deleted.append(item["event_id"]["S"])
    forged = forge(args.table, namespace)
    return {"namespace_id": namespace, "deleted": deleted, "kept": len(items) - len(deleted), "forged": forged}


def ttl(args) -> dict:
    item = audit_items(args.table, args.namespace)[0]
    record = {
        "eventID": "synthetic-ttl-1", "eventName": "REMOVE", "eventSource": "aws:dynamodb",
        "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"ApproximateCreationDateTime": time.time(), "SequenceNumber": "900000000000000000001",
                     "Keys": {"PK": item["PK"], "SK": item["SK"]}, "OldImage": item, "SizeBytes": 100},
    }
    here = os.path.dirname(os.path.abspath(__file__))
    shim = subprocess.Popen(
        [sys.executable, os.path.join(here, "lambda_shim.py"), "--function-name", "aggregator",
         "--command", args.aggregator, "--parent-pid", str(os.getpid()),
         "--env", f"TABLE_NAME={args.table}", "--env", f"ARCHIVE_BUCKET={args.bucket}",
         "--env", f"AWS_ENDPOINT_URL={endpoint()}", "--env", "AWS_ACCESS_KEY_ID=test",
         "--env", "AWS_SECRET_ACCESS_KEY=test", "--env", f"AWS_REGION={region()}",
         "--log", f"/tmp/{args.table}-lambda.log"],
        # Not our stderr: a caller reading it to its end must not wait on the
        # stand-in (it outlives us by a moment, until it sees us gone).
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = shim.stdout.readline().strip()
        lam = boto3.client("lambda", endpoint_url=url)
        answer = lam.invoke(FunctionName="aggregator", Payload=json.dumps({"Records": [record]}))
        return {"event_id": item["event_id"]["S"], "answer": json.loads(answer["Payload"].read())}
    finally:
        stop(shim)


def stop(process: subprocess.Popen) -> None:
    """Ends a helper process, by force if it does not go within 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def read(args) -> dict:
    s3 = boto3.client("s3")
    objects, lines = [], []
    for entry in s3.list_objects_v2(Bucket=args.bucket).get("Contents", []):
        body = s3.get_object(Bucket=args.bucket, Key=entry["Key"])["Body"].read()
        objects.append(entry["Key"])
        lines += [json.loads(line) for line in gzip.decompress(body).decode().splitlines()]
    # The documented query keeps one line per event_id.
    unique = {line["event_id"]: line for line in lines}
    return {"objects": objects, "lines": len(lines), "events": list(unique.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["setup", "ttl", "read"])
    parser.add_argument("--table")
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--namespace")
    parser.add_argument("--aggregator")
    args = parser.parse_args()
    print(json.dumps({"setup": setup, "ttl": ttl, "read": read}[args.command](args)))


if __name__ == "__main__":
    main()
