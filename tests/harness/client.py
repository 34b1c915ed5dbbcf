"""The real zae-limiter 0.17.0 client, as the tests and the demo use it.

    client.py setup --table T                 create the table as the library defines it, TTL on, namespace "default"
    client.py drive --table T [--requests N] [--limits-applied]
    client.py drive-uniform --table T [--entities E] [--requests N]
                                              N requests spread evenly over E entities (no
                                              parents), each its own bucket: many buckets per batch
                                              limits and traffic; prints what was consumed, as JSON;
                                              with --limits-applied the limits come from
                                              examples/limits.yaml, applied beforehand
    client.py read  --table T                 snapshots, summaries, audit events and buckets, as JSON
    client.py keys  --table T                 create the table as setup does, then print every key
                                              attribute of the table and its indexes, as
                                              DescribeTable gives them: {name: [key type, attribute type]}

Endpoint and credentials come from the AWS environment (AWS_ENDPOINT_URL, ...).
"""
import argparse
import asyncio
import json
import os
import sys

import boto3
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository

RESOURCE = "gpt-4"
PARENT, CHILD, HARD_CHILD = "proj-1", "key-a", "key-b"
ENTITIES = (PARENT, CHILD, HARD_CHILD)
# Soft tpm refills per day, so no materialising write during a test run can
# lift a balance out of debt: every transition below is one the driver caused.
CAPACITY = {CHILD: 2000, PARENT: 4000, HARD_CHILD: 2000}
ACQUIRE_TPM, ADJUST_TPM, BIG_TPM = 100, 150, 20_000


def endpoint() -> str:
    return os.environ["AWS_ENDPOINT_URL"]


def region() -> str:
    return os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


async def open_repo(table: str) -> Repository:
    return await Repository.open("default", stack=table, region=region(), endpoint_url=endpoint())


async def create(table: str) -> None:
    """The table as the library defines it, and its version record."""
    raw = Repository(table, region=region(), endpoint_url=endpoint(), _skip_deprecation_warning=True)
    await raw.create_table()
    await stamp_version_record(raw)
    await raw.close()


async def stamp_version_record(raw: Repository) -> None:
    """The version record as a deployed stack leaves it: Lambdas at 0.17.0.

    The client writes it on its first open, stamping `lambda_version` only
    when it can see that the stack has no Lambda older than itself. moto
    answers its Lambda probe ("no such function"), so the stamp is 0.17.0;
    DynamoDB Local has no Lambda API, the probe cannot tell, and the client
    then refuses soft limits. A real table gets the stamp from its stack
    (TableInit); here the same record is written on every backend, through
    the client's own writer (conditional: an existing record is kept).
    """
    from zae_limiter import __version__

    raw._deployed_lambda_version = __version__
    await raw._initialize_version_record()


async def setup(table: str) -> dict:
    await create(table)
    boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region()).update_time_to_live(
        TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    repo = await open_repo(table)
    namespace = repo.namespace_id
    await repo.close()
    return {"table": table, "namespace_id": namespace}


class Ledger:
    """What the driver consumed, and how many debits left a soft balance below zero."""

    def __init__(self) -> None:
        self.consumed = {e: {"rpm": 0, "tpm": 0} for e in ENTITIES}
        self.balance = dict(CAPACITY)
        self.overdrawn_records = {e: 0 for e in ENTITIES}
        self.transitions = {e: {"limit_overdrawn": 0, "limit_recovered": 0} for e in ENTITIES}

    def debit(self, entity: str, rpm: int, tpm: int) -> None:
        self.consumed[entity]["rpm"] += rpm
        self.consumed[entity]["tpm"] += tpm
        before = self.balance[entity]
        self.balance[entity] -= tpm
        if tpm > 0 and self.balance[entity] < 0:
            self.overdrawn_records[entity] += 1
        if before >= 0 > self.balance[entity]:
            self.transitions[entity]["limit_overdrawn"] += 1

    def restore(self, entity: str) -> None:
        if self.balance[entity] < 0:
            self.transitions[entity]["limit_recovered"] += 1
        self.balance[entity] = CAPACITY[entity]


async def drive(table: str, requests: int, limits_applied: bool) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    ledger = Ledger()
    if not limits_applied:
        await limiter.set_system_defaults([Limit.per_minute("rpm", 100_000), Limit.per_minute("tpm", 10_000_000)])
        await limiter.set_resource_defaults(
            RESOURCE, [Limit.per_minute("rpm", 10_000), Limit.per_day("tpm", 5_000, soft=True)]
        )
    await limiter.create_entity(PARENT, name="Project 1")
    await limiter.create_entity(CHILD, parent_id=PARENT, cascade=True)
    await limiter.create_entity(HARD_CHILD, parent_id=PARENT, cascade=True)
    rpm = {PARENT: 20_000, CHILD: 5_000, HARD_CHILD: 5}
    for entity in ENTITIES if not limits_applied else ():
        await limiter.set_limits(
            entity,
            [Limit.per_minute("rpm", rpm[entity]), Limit.per_day("tpm", CAPACITY[entity], soft=True)],
            resource=RESOURCE,
        )

    # The hard rpm of 5 rejects the 6th and 7th call; a rejection consumes nothing.
    rejected = 0
    for _ in range(7):
        try:
            async with limiter.acquire(entity_id=HARD_CHILD, resource=RESOURCE, consume={"rpm": 1, "tpm": 10}):
                pass
            for entity in (HARD_CHILD, PARENT):
                ledger.debit(entity, 1, 10)
        except RateLimitExceeded:
            rejected += 1

    async def soft_traffic(count: int) -> None:
        for _ in range(count):
            async with limiter.acquire(
                entity_id=CHILD, resource=RESOURCE, consume={"rpm": 1, "tpm": ACQUIRE_TPM}
            ) as lease:
                for entity in (CHILD, PARENT):
                    ledger.debit(entity, 1, ACQUIRE_TPM)
                await lease.adjust(tpm=ADJUST_TPM)
                for entity in (CHILD, PARENT):
                    ledger.debit(entity, 0, ADJUST_TPM)

    await soft_traffic(requests)
    # Forgive key-a's debt: a soft limit that recovers.
    await repo.reset_bucket(CHILD, RESOURCE, limits=["tpm"])
    ledger.restore(CHILD)
    await soft_traffic(max(requests // 2, 10))
    async with limiter.acquire(entity_id=CHILD, resource=RESOURCE, consume={"rpm": 1, "tpm": BIG_TPM}) as lease:
        overdrawn = list(lease.overdrawn)
    for entity in (CHILD, PARENT):
        ledger.debit(entity, 1, BIG_TPM)
    await repo.close()
    return {
        "consumed": ledger.consumed,
        "overdrawn_records": ledger.overdrawn_records,
        "transitions": ledger.transitions,
        "hard_rejections": rejected,
        "big_acquire_overdrawn": overdrawn,
    }


async def read(table: str) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    out = {"namespace_id": repo.namespace_id, "entities": {}, "resource_scoped": []}
    for entity in ENTITIES:
        snaps, _ = await limiter.get_usage_snapshots(entity_id=entity, resource=RESOURCE)
        summaries = {}
        for window in ("hourly", "daily", "monthly"):
            s = await limiter.get_usage_summary(entity_id=entity, resource=RESOURCE, window_type=window)
            summaries[window] = {"snapshot_count": s.snapshot_count, "total": s.total}
        events = await limiter.get_audit_events(entity)
        buckets = await repo.get_buckets(entity, RESOURCE)
        out["entities"][entity] = {
            "snapshots": [
                {
                    "window": s.window_type,
                    "window_start": s.window_start,
                    "window_end": s.window_end,
                    "counters": s.counters,
                    "overdrawn": s.overdrawn,
                    "total_events": s.total_events,
                }
                for s in snaps
            ],
            "summary": summaries,
            "audit_events": [
                {
                    "event_id": e.event_id,
                    "action": e.action,
                    "timestamp": e.timestamp,
                    "principal": e.principal,
                    "resource": e.resource,
                    "details": e.details,
                }
                for e in events
            ],
            "buckets": {
                b.limit_name: {"tokens_milli": b.tokens_milli, "consumed_milli": b.total_consumed_milli}
                for b in buckets
            },
        }
    snaps, _ = await limiter.get_usage_snapshots(resource=RESOURCE)
    out["resource_scoped"] = [
        {"entity": s.entity_id, "window": s.window_type, "window_start": s.window_start, "counters": s.counters}
        for s in snaps
    ]
    await repo.close()
    return out


async def drive_uniform(table: str, entities: int, requests: int) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    await limiter.set_system_defaults([Limit.per_minute("rpm", 100_000), Limit.per_minute("tpm", 10_000_000)])
    names = [f"user-{i:04d}" for i in range(entities)]
    for i in range(requests):
        async with limiter.acquire(
            entity_id=names[i % entities], resource=RESOURCE, consume={"rpm": 1, "tpm": ACQUIRE_TPM}
        ):
            pass
    await repo.close()
    return {"entities": entities, "requests": requests}


def keys(table: str) -> dict:
    """The table's key attributes and those of every index, as the service declares them."""
    described = boto3.client("dynamodb", region_name=region(), endpoint_url=endpoint()).describe_table(TableName=table)["Table"]
    types = {a["AttributeName"]: a["AttributeType"] for a in described["AttributeDefinitions"]}
    schemas = [described["KeySchema"]] + [
        index["KeySchema"]
        for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")
        for index in described.get(kind, [])
    ]
    return {k["AttributeName"]: [k["KeyType"], types[k["AttributeName"]]] for schema in schemas for k in schema}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["setup", "drive", "drive-uniform", "read", "keys"])
    parser.add_argument("--table", required=True)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--entities", type=int, default=200)
    parser.add_argument("--limits-applied", action="store_true")
    args = parser.parse_args()
    if args.command == "setup":
        result = asyncio.run(setup(args.table))
    elif args.command == "drive":
        result = asyncio.run(drive(args.table, args.requests, args.limits_applied))
    elif args.command == "drive-uniform":
        result = asyncio.run(drive_uniform(args.table, args.entities, args.requests))
    elif args.command == "keys":
        asyncio.run(create(args.table))
        result = keys(args.table)
    else:
        result = asyncio.run(read(args.table))
    json.dump(result, sys.stdout, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
