"""A hot bucket for the shard tests: the real 0.17.0 client creates it, its
`wcu` is run low by hand (moto cannot take the write rate that would run it
down), and the shards the aggregator doubles and pre-creates are read back
through the client.

    sharding.py setup --table T    entity "hot": a 100/s rps and a daily quota rpd
                                   of 10,000; 5 acquires create shard 0
    sharding.py heat  --table T    shard 0's b_wcu_tk to 100 tokens, rf a minute
                                   ahead (so no refill projects it back up)
    sharding.py read  --table T    every shard through the client, each quota's
                                   gc, then 20 more acquires; prints JSON
"""
import argparse
import asyncio
import json
import time

import boto3
from zae_limiter import Limit, RateLimiter, RateLimitExceeded

from client import create, endpoint, open_repo, region

ENTITY, RESOURCE = "hot", "api"


async def setup(table: str) -> dict:
    await create(table)
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    await limiter.create_entity(ENTITY)
    await limiter.set_limits(
        ENTITY, [Limit.per_second("rps", 100), Limit.quota("rpd", 10_000, cron="0 0 * * *")], resource=RESOURCE
    )
    for _ in range(5):
        async with limiter.acquire(entity_id=ENTITY, resource=RESOURCE, consume={"rps": 1, "rpd": 1}):
            pass
    namespace = repo.namespace_id
    await repo.close()
    return {"namespace_id": namespace}


def pk(namespace: str, shard: int) -> str:
    return f"{namespace}/BUCKET#{ENTITY}#{RESOURCE}#{shard}"


def heat(table: str, namespace: str) -> dict:
    ddb = boto3.client("dynamodb")
    ddb.update_item(
        TableName=table,
        Key={"PK": {"S": pk(namespace, 0)}, "SK": {"S": "#STATE"}},
        UpdateExpression="SET b_wcu_tk = :low, rf = :ahead",
        ExpressionAttributeValues={":low": {"N": "100000"}, ":ahead": {"N": str(int(time.time() * 1000) + 60_000)}},
    )
    return {"heated": pk(namespace, 0)}


async def read(table: str, namespace: str) -> dict:
    repo = await open_repo(table)
    ddb = boto3.client("dynamodb")
    shards = {}
    for shard in range(32):
        item = ddb.get_item(TableName=table, Key={"PK": {"S": pk(namespace, shard)}, "SK": {"S": "#STATE"}}, ConsistentRead=True).get("Item")
        if not item:
            continue
        states = await repo.get_buckets(ENTITY, RESOURCE, shard_id=shard)
        shards[shard] = {
            "shard_count": states[0].shard_count,
            "tokens": {s.limit_name: s.tokens_milli for s in states},
            "consumed": {s.limit_name: s.total_consumed_milli or 0 for s in states},
            "rpd_gc": int(item["b_rpd_gc"]["N"]) if "b_rpd_gc" in item else None,
        }
    limiter = RateLimiter(repository=repo)
    admitted = 0
    for _ in range(20):
        try:
            async with limiter.acquire(entity_id=ENTITY, resource=RESOURCE, consume={"rps": 1, "rpd": 1}):
                admitted += 1
        except RateLimitExceeded:
            pass
    await repo.close()
    return {"shards": shards, "admitted_after": admitted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["setup", "heat", "read"])
    parser.add_argument("--table", required=True)
    parser.add_argument("--namespace")
    args = parser.parse_args()
    if args.command == "setup":
        out = asyncio.run(setup(args.table))
    elif args.command == "heat":
        out = heat(args.table, args.namespace)
    else:
        out = asyncio.run(read(args.table, args.namespace))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
