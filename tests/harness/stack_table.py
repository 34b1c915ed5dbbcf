"""A table as this project's stack makes it, with no client involved, and the
unchanged 0.17.0 client opening it afterwards.

    stack_table.py create --table T    the table from template.yaml's `Table` resource
                                       alone (keys, indexes, stream, TTL); nothing written
    stack_table.py open --table T      Repository.open("default", stack=T) with its defaults
                                       (auto_update=True), recording every AWS call the
                                       client makes; then a soft limit set through the
                                       client's own setter (its version gate) and one
                                       acquire; prints the calls and what was read, as JSON
    stack_table.py version --table T   the version record, as JSON
    stack_table.py gates --table T     what the client's version checks make of the record:
                                       check_compatibility, Repository.connect (its strict
                                       check), and one write through each feature gate that
                                       reads lambda_version (reset_after, soft limits, cascade
                                       policy, parent move, top-up): "accepted", or the
                                       VersionMismatchError's message

Endpoint and credentials come from the AWS environment (AWS_ENDPOINT_URL, ...).
"""
import argparse
import asyncio
import json
import os
from datetime import timedelta

import boto3
import yaml
from aiobotocore.client import AioBaseClient
from zae_limiter import Limit, RateLimiter, Repository, ScheduleEntry, __version__
from zae_limiter.exceptions import EntityExistsError, VersionMismatchError
from zae_limiter.version import InfrastructureVersion, check_compatibility

from client import endpoint, region

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "template.yaml")


class _Tagged(yaml.SafeLoader):
    """Reads CloudFormation's short-form tags (!Ref, !If, ...) as plain values."""


def _any_tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node, deep=True)}
    return {suffix: loader.construct_mapping(node, deep=True)}


_Tagged.add_multi_constructor("!", _any_tag)


def table_definition() -> dict:
    with open(TEMPLATE) as f:
        template = yaml.load(f, Loader=_Tagged)
    return template["Resources"]["Table"]["Properties"]


def create(table: str) -> dict:
    props = table_definition()
    ddb = boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())
    ddb.create_table(
        TableName=table,
        BillingMode=props["BillingMode"],
        AttributeDefinitions=props["AttributeDefinitions"],
        KeySchema=props["KeySchema"],
        GlobalSecondaryIndexes=props["GlobalSecondaryIndexes"],
        LocalSecondaryIndexes=props["LocalSecondaryIndexes"],
        StreamSpecification={"StreamEnabled": True, **props["StreamSpecification"]},
    )
    ttl = props["TimeToLiveSpecification"]
    ddb.update_time_to_live(
        TableName=table,
        TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": ttl["Enabled"]},
    )
    items = ddb.scan(TableName=table)["Items"]
    return {"table": table, "items": len(items)}


CALLS: list = []
_make_api_call = AioBaseClient._make_api_call


async def _recorded(self, operation_name, api_params):
    CALLS.append(f"{self.meta.service_model.service_name}:{operation_name}")
    return await _make_api_call(self, operation_name, api_params)


async def open_table(table: str) -> dict:
    AioBaseClient._make_api_call = _recorded
    repo = await Repository.open("default", stack=table, region=region(), endpoint_url=endpoint())
    opened = list(CALLS)
    limiter = RateLimiter(repository=repo)
    await limiter.set_limits("e", [Limit.per_minute("tpm", 1_000, soft=True)], resource="gpt-4")
    async with limiter.acquire(entity_id="e", resource="gpt-4", consume={"tpm": 10}):
        pass
    limits = [l.to_dict() for l in await limiter.get_limits("e", "gpt-4")]
    namespace = repo.namespace_id
    await repo.close()
    return {"open_calls": opened, "calls": CALLS, "namespace_id": namespace, "limits": limits}


def version(table: str) -> dict:
    ddb = boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())
    item = ddb.get_item(TableName=table, Key={"PK": {"S": "_/SYSTEM#"}, "SK": {"S": "#VERSION"}})
    return {k: next(iter(v.values())) for k, v in item.get("Item", {}).items()}


async def _gated(write) -> str:
    try:
        await write
    except VersionMismatchError as e:
        return f"refused: {e}"
    return "accepted"


async def gates(table: str) -> dict:
    record = version(table)
    compat = check_compatibility(__version__, InfrastructureVersion.from_record(record))
    out = {
        "lambda_version": record.get("lambda_version"),
        "compatibility": {
            "is_compatible": compat.is_compatible,
            "requires_lambda_update": compat.requires_lambda_update,
            "message": compat.message,
        },
    }
    try:
        connected = await Repository.connect("default", stack=table, region=region(), endpoint_url=endpoint())
        await connected.close()
        out["connect"] = "accepted"
    except VersionMismatchError as e:
        out["connect"] = f"refused: {e}"
    # Each write through the client's public API, on a repository made
    # without the version check, so a refused stamp still reaches every gate.
    base = Repository(table, region(), endpoint(), _skip_deprecation_warning=True)
    repo = await base.namespace("default")
    quota = Limit(name="q", capacity=10, refill_amount=0, refill_period_seconds=86_400,
                  reset_schedule=(ScheduleEntry.reset("0 0 * * *", "UTC"),))
    session = Limit(name="s", capacity=10, refill_amount=0, refill_period_seconds=3_600,
                    reset_after=timedelta(hours=1))
    await repo.set_limits("gate-e", [quota], resource="gate-quota")
    for entity, parent in (("gate-p1", None), ("gate-p2", None), ("gate-c", "gate-p1")):
        try:
            await repo.create_entity(entity, parent_id=parent)
        except EntityExistsError:
            pass  # an earlier run's, on the same table
    out["gates"] = {
        "reset_after": await _gated(repo.set_limits("gate-e", [session], resource="gate-session")),
        "non_enforcing": await _gated(
            repo.set_limits("gate-e", [Limit.per_minute("rpm", 100, soft=True)], resource="gate-soft")
        ),
        "cascade_policy": await _gated(repo.set_resource_cascade("gate-quota", True)),
        "parent_move": await _gated(repo.set_parent("gate-c", "gate-p2")),
        "top_up": await _gated(repo.top_up("gate-e", "gate-quota", {"q": 5})),
    }
    await base.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["create", "open", "version", "gates"])
    parser.add_argument("--table", required=True)
    args = parser.parse_args()
    if args.command == "create":
        out = create(args.table)
    elif args.command == "open":
        out = asyncio.run(open_table(args.table))
    elif args.command == "gates":
        out = asyncio.run(gates(args.table))
    else:
        out = version(args.table)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
