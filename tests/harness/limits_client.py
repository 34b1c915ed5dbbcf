"""The real zae-limiter 0.17.0 client as the provisioner's tests use it: it
writes limits itself, reads back what the provisioner wrote, and acquires.

    limits_client.py register --table T --namespace N         register N; prints its id
    limits_client.py read     --table T --namespace N --levels LEVELS
                              limits per level, registries and audit events, as JSON
    limits_client.py set      --table T --namespace N --manifest FILE
                              write a manifest's levels through the client's own setters
    limits_client.py acquire  --table T --namespace N --entity E --resource R
                              --consume tpm=100 [--consume rpm=1] [--times K]
    limits_client.py entity   --table T --namespace N --entity E [--parent P] [--cascade]
    limits_client.py items    --table T   every item, as DynamoDB JSON
    limits_client.py usage    --table T --namespace N --entity E
                              the entity's usage snapshots, as get_usage_snapshots reads them
    limits_client.py lambda-version --table T --version V
                              stamp the version record as if Lambdas at V were deployed
    limits_client.py write-own --table T --entity E --resource R --set shard_count=-1 [--set ...]
                              one UpdateItem per --set on E's own shard-0 bucket of R, as a
                              principal with the acquire policy may write it
    limits_client.py copy-own --table T --entity E --resource R --as ID
                              put a copy of E's shard-0 bucket of R under entity id ID
                              (E replaced by ID in its key and every text attribute, an index sort
                              key past 1,024 bytes left out), as
                              a principal with the acquire policy may write it

LEVELS is a JSON list of "system", "resource:<r>" and "entity:<e>/<r>".
Endpoint and credentials come from the AWS environment
(AWS_ENDPOINT_URL_DYNAMODB, else AWS_ENDPOINT_URL).
"""
import argparse
import asyncio
import json
import os
import sys
from datetime import timedelta

import boto3
import yaml
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository, ScheduleEntry


def endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ["AWS_ENDPOINT_URL"]


def region() -> str:
    return os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


async def open_repo(table: str, namespace: str) -> Repository:
    return await Repository.open(namespace, stack=table, region=region(), endpoint_url=endpoint())


def limit_dict(limit: Limit) -> dict:
    d = limit.to_dict()
    return {k: v for k, v in sorted(d.items())}


def limits_out(limits) -> list:
    return sorted((limit_dict(l) for l in limits), key=lambda d: d["name"])


def limit_from_manifest(name: str, d: dict) -> Limit:
    """The client-API spelling of one manifest limit (manifest defaults applied)."""
    capacity = d.get("burst", d["capacity"])
    schedule = tuple(
        ScheduleEntry(**{k: v for k, v in e.items()}) for e in (d.get("schedule") or ())
    )
    reset = tuple(ScheduleEntry.reset(e["cron"], e.get("tz", "UTC")) for e in (d.get("reset_schedule") or ()))
    reset_after = d.get("reset_after_seconds")
    resets = bool(reset) or reset_after is not None
    return Limit(
        name=name,
        capacity=capacity,
        refill_amount=d.get("refill_amount", 0 if resets else capacity),
        refill_period_seconds=d.get("refill_period", 60),
        schedule=schedule,
        reset_schedule=reset,
        reset_after=timedelta(seconds=reset_after) if reset_after is not None else None,
        soft=d.get("soft", False),
    )


def limits_from(level: dict) -> list:
    return [limit_from_manifest(n, d) for n, d in (level.get("limits") or {}).items()]


async def register(table: str, namespace: str) -> dict:
    repo = await open_repo(table, namespace)
    out = {"namespace_id": repo.namespace_id}
    await repo.close()
    return out


async def read(table: str, namespace: str, levels: list) -> dict:
    repo = await open_repo(table, namespace)
    out = {"namespace_id": repo.namespace_id, "levels": {}, "audit": {}}
    for level in levels:
        if level == "system":
            limits, on_unavailable = await repo.get_system_defaults()
            out["levels"][level] = {"limits": limits_out(limits), "on_unavailable": on_unavailable}
            audit_id = "$SYSTEM"
        elif level.startswith("resource:"):
            resource = level.split(":", 1)[1]
            out["levels"][level] = {"limits": limits_out(await repo.get_resource_defaults(resource))}
            audit_id = f"$RESOURCE:{resource}"
        else:
            entity, resource = level.split(":", 1)[1].split("/", 1)
            out["levels"][level] = {"limits": limits_out(await repo.get_limits(entity, resource))}
            audit_id = entity
        events = await repo.get_audit_events(audit_id, limit=1000)
        out["audit"][audit_id] = sorted(
            ({"action": e.action, "resource": e.resource, "principal": e.principal} for e in events),
            key=lambda e: (e["action"], e["resource"] or ""),
        )
    out["resources_with_defaults"] = await repo.list_resources_with_defaults()
    out["resources_with_entity_configs"] = await repo.list_resources_with_entity_configs()
    entity_configs = {}
    for resource in out["resources_with_entity_configs"]:
        entities, _ = await repo.list_entities_with_custom_limits(resource)
        entity_configs[resource] = sorted(entities)
    out["entities_with_custom_limits"] = entity_configs
    await repo.close()
    return out


async def set_manifest(table: str, namespace: str, path: str) -> dict:
    with open(path) as f:
        manifest = yaml.safe_load(f)
    repo = await open_repo(table, namespace)
    system = manifest.get("system")
    if system is not None:
        await repo.set_system_defaults(limits_from(system), on_unavailable=system.get("on_unavailable"))
    for resource, level in (manifest.get("resources") or {}).items():
        flags = {k: level[k] for k in ("disabled", "cascade") if k in level}
        await repo.set_resource_defaults(resource, limits_from(level), **flags)
    for entity, decl in (manifest.get("entities") or {}).items():
        for resource, level in (decl.get("resources") or {}).items():
            flags = {k: level[k] for k in ("disabled", "cascade") if k in level}
            await repo.set_limits(entity, limits_from(level), resource=resource, **flags)
    await repo.close()
    return {"namespace_id": repo.namespace_id}


async def acquire(table: str, namespace: str, entity: str, resource: str, consume: dict, times: int) -> dict:
    repo = await open_repo(table, namespace)
    limiter = RateLimiter(repository=repo)
    ok, rejected, violated, overdrawn = 0, 0, [], []
    for _ in range(times):
        try:
            async with limiter.acquire(entity_id=entity, resource=resource, consume=consume) as lease:
                overdrawn.extend(lease.overdrawn)
            ok += 1
        except RateLimitExceeded as exc:
            rejected += 1
            violated.extend(sorted({s.limit_name for s in exc.violations}))
    buckets = {
        b.limit_name: {"tokens_milli": b.tokens_milli, "capacity_milli": b.capacity_milli}
        for b in await repo.get_buckets(entity, resource)
    }
    await repo.close()
    return {
        "ok": ok,
        "rejected": rejected,
        "violated": sorted(set(violated)),
        "overdrawn": sorted(set(overdrawn)),
        "buckets": buckets,
    }


async def entity(table: str, namespace: str, entity_id: str, parent: str | None, cascade: bool) -> dict:
    repo = await open_repo(table, namespace)
    limiter = RateLimiter(repository=repo)
    await limiter.create_entity(entity_id, parent_id=parent, cascade=cascade)
    await repo.close()
    return {"entity": entity_id}


async def usage(table: str, namespace: str, entity_id: str) -> dict:
    repo = await open_repo(table, namespace)
    limiter = RateLimiter(repository=repo)
    snaps, _ = await limiter.get_usage_snapshots(entity_id=entity_id)
    await repo.close()
    return {
        "snapshots": [
            {"window": s.window_type, "counters": s.counters, "overdrawn": s.overdrawn, "total_events": s.total_events}
            for s in snaps
        ]
    }


def items(table: str) -> dict:
    client = boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())
    found, start = [], None
    while True:
        page = client.scan(TableName=table, **({"ExclusiveStartKey": start} if start else {}))
        found.extend(page["Items"])
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    return {"items": found}


def lambda_version(table: str, version: str) -> dict:
    client = boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())
    client.update_item(
        TableName=table,
        Key={"PK": {"S": "_/SYSTEM#"}, "SK": {"S": "#VERSION"}},
        UpdateExpression="SET lambda_version = :v",
        ExpressionAttributeValues={":v": {"S": version}},
    )
    return {"lambda_version": version}


def write_own(table: str, entity_id: str, resource: str, sets: list[str]) -> dict:
    client = boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())
    suffix = f"/BUCKET#{entity_id}#{resource}#0"
    pks = [i["PK"]["S"] for i in items(table)["items"] if i["PK"]["S"].endswith(suffix)]
    if len(pks) != 1:
        raise SystemExit(f"write-own: expected one bucket ending {suffix}, found {pks}")
    for assignment in sets:
        name, value = assignment.split("=", 1)
        client.update_item(
            TableName=table,
            Key={"PK": {"S": pks[0]}, "SK": {"S": "#STATE"}},
            UpdateExpression="SET #a = :v",
            ExpressionAttributeNames={"#a": name},
            ExpressionAttributeValues={":v": {"N": value}},
        )
    return {"pk": pks[0], "writes": len(sets)}


def copy_own(table: str, entity_id: str, resource: str, new_id: str) -> dict:
    client = boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())
    suffix = f"/BUCKET#{entity_id}#{resource}#0"
    found = [i for i in items(table)["items"] if i["PK"]["S"].endswith(suffix) and i["SK"]["S"] == "#STATE"]
    if len(found) != 1:
        raise SystemExit(f"copy-own: expected one bucket ending {suffix}, found {len(found)}")
    copy = {
        k: {"S": v["S"].replace(entity_id, new_id)} if "S" in v else v
        for k, v in found[0].items()
    }
    # DynamoDB refuses an index sort key over 1,024 bytes (moto does not):
    # such a key is left out, and the copy is in no index through it.
    dropped = sorted(k for k in copy if k.startswith("GSI") and k.endswith("SK") and len(copy[k]["S"].encode()) > 1024)
    for k in dropped:
        del copy[k]
    client.put_item(TableName=table, Item=copy)
    return {"pk": copy["PK"]["S"], "pk_bytes": len(copy["PK"]["S"].encode()), "dropped": dropped}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["register", "read", "set", "acquire", "entity", "items", "usage", "lambda-version", "write-own", "copy-own"])
    parser.add_argument("--table", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--levels", default="[]")
    parser.add_argument("--manifest")
    parser.add_argument("--entity")
    parser.add_argument("--resource")
    parser.add_argument("--parent")
    parser.add_argument("--cascade", action="store_true")
    parser.add_argument("--consume", action="append", default=[])
    parser.add_argument("--times", type=int, default=1)
    parser.add_argument("--version")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--as", dest="as_id")
    args = parser.parse_args()
    if args.command == "register":
        result = asyncio.run(register(args.table, args.namespace))
    elif args.command == "read":
        result = asyncio.run(read(args.table, args.namespace, json.loads(args.levels)))
    elif args.command == "set":
        result = asyncio.run(set_manifest(args.table, args.namespace, args.manifest))
    elif args.command == "acquire":
        consume = {k: int(v) for k, v in (c.split("=", 1) for c in args.consume)}
        result = asyncio.run(acquire(args.table, args.namespace, args.entity, args.resource, consume, args.times))
    elif args.command == "entity":
        result = asyncio.run(entity(args.table, args.namespace, args.entity, args.parent, args.cascade))
    elif args.command == "usage":
        result = asyncio.run(usage(args.table, args.namespace, args.entity))
    elif args.command == "lambda-version":
        result = lambda_version(args.table, args.version)
    elif args.command == "write-own":
        result = write_own(args.table, args.entity, args.resource, args.set)
    elif args.command == "copy-own":
        result = copy_own(args.table, args.entity, args.resource, args.as_id)
    else:
        result = items(args.table)
    json.dump(result, sys.stdout, default=str)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
