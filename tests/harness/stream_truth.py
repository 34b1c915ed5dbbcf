"""Independent reading of a table's stream: what the snapshots must hold.

For every bucket (#STATE) INSERT and MODIFY it sums the whole-token change of
each limit's consumption counter, and counts the debits that left a soft limit
below zero (the reference's `#od` rule, INSERTs included). What INSERTs
alone contribute is given apart, since the reference leaves it out. Prints
JSON per entity. Written separately from the Rust code on purpose.

Usage: stream_truth.py --table T
"""
import argparse
import json
import sys

import boto3


def read_stream(table: str) -> list:
    ddb, streams = boto3.client("dynamodb"), boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    records = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        after = None
        while True:
            kw = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after} if after else {"ShardIteratorType": "TRIM_HORIZON"}
            it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], **kw)["ShardIterator"]
            page = streams.get_records(ShardIterator=it, Limit=1000)["Records"]
            if not page:
                break
            for r in page:
                r["eventSourceARN"] = arn
            records += page
            after = page[-1]["dynamodb"]["SequenceNumber"]
    return records


def limits(image: dict) -> dict:
    out = {}
    for name, value in image.items():
        if not name.startswith("b_") or "_" not in name[2:]:
            continue
        limit, field = name[2:].rsplit("_", 1)
        if limit == "wcu":
            continue
        slot = out.setdefault(limit, {})
        if field in ("tc", "tk") and "N" in value:
            slot[field] = int(value["N"])
        elif field == "soft":
            slot["soft"] = True
    return out


def truth(records: list) -> dict:
    result = {}
    for r in records:
        d = r["dynamodb"]
        if r["eventName"] not in ("INSERT", "MODIFY") or d["Keys"]["SK"]["S"] != "#STATE":
            continue
        entity = d["Keys"]["PK"]["S"].split("/", 1)[1].split("#")[1]
        new, old = limits(d.get("NewImage", {})), limits(d.get("OldImage", {}))
        slot = result.setdefault(
            entity, {"counters": {}, "overdrawn": {}, "events": 0, "insert_counters": {}, "insert_events": 0}
        )
        for limit, state in new.items():
            if "tc" not in state:
                continue
            before = old.get(limit, {}).get("tc", 0)
            if state["tc"] == before:
                continue
            slot["events"] += 1
            if r["eventName"] == "INSERT":
                slot["insert_events"] += 1
                slot["insert_counters"][limit] = slot["insert_counters"].get(limit, 0) + state["tc"] // 1000 - before // 1000
            slot["counters"][limit] = slot["counters"].get(limit, 0) + state["tc"] // 1000 - before // 1000
            if state.get("soft") and state["tc"] > before and state.get("tk", 0) < 0:
                slot["overdrawn"][limit] = slot["overdrawn"].get(limit, 0) + 1
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--dump", help="also write the records, Lambda-shaped, to this file as {\"Records\": [...]}")
    args = parser.parse_args()
    records = read_stream(args.table)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump({"Records": records}, f, default=str)
    json.dump({"records": len(records), "entities": truth(records)}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
