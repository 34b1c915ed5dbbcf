"""The real zae-limiter 0.17.0 client's entity, usage and audit API, for the
Rust client's tests of the same calls (namespace "default").

    entity_client.py create  --table T --entity E [--parent P] [--cascade] [--name N]
                             [--meta K=V ...] [--principal P]
    entity_client.py get     --table T --entity E          the entity as get_entity reads it, or null
    entity_client.py move    --table T --entity E [--parent P] [--principal P]
                             set_parent; prints {"stamped": n}
    entity_client.py acquire --table T --entity E --resource R --consume rpm=1 [...]
                             one acquire, committed; prints {"outcome": "admitted"} or the rejection
    entity_client.py bucket  --table T --entity E --resource R
                             each limit's tokens_milli on E's buckets of R (shard 0), or null
    entity_client.py usage   --table T [--entity E] [--resource R] [--window W] [--start ISO]
                             [--end ISO] [--limit N] [--next-key JSON]
                             one page of get_usage_snapshots: {"snapshots": [...], "next_key": ...}
    entity_client.py pages   (the usage arguments) every page, following next_key: a list of pages
    entity_client.py summary (the usage arguments but --limit, --next-key) get_usage_summary
    entity_client.py audit   --table T --entity E [--limit N] [--start-event-id ID]
                             get_audit_events: a list of events

A refusal prints {"error": <the exception's class>, "message": ...} and exits 0.
Times (--start, --end) are ISO 8601 in UTC, as the client formats them.
Endpoint and credentials come from the AWS environment (AWS_ENDPOINT_URL).
"""
import argparse
import asyncio
import dataclasses
import json
import os
from datetime import datetime

from zae_limiter import RateLimiter, RateLimitExceeded, Repository
from zae_limiter.exceptions import ZAELimiterError


def endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ["AWS_ENDPOINT_URL"]


async def open_limiter(table: str) -> tuple[Repository, RateLimiter]:
    repo = await Repository.open(
        "default",
        stack=table,
        region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        endpoint_url=endpoint(),
        config_cache_ttl=0,
        rejection_cache_ttl=0,
    )
    return repo, RateLimiter(repository=repo)


def entity_out(e) -> dict | None:
    if e is None:
        return None
    return {
        "id": e.id,
        "name": e.name,
        "parent_id": e.parent_id,
        "cascade": e.cascade,
        "metadata": e.metadata,
        "created_at": e.created_at,
        "parent_generation": e.parent_generation,
        "incarnation": e.incarnation,
    }


def when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


async def usage_page(limiter: RateLimiter, a, next_key) -> dict:
    snapshots, cursor = await limiter.get_usage_snapshots(
        entity_id=a.entity,
        resource=a.resource,
        window_type=a.window,
        start_time=when(a.start),
        end_time=when(a.end),
        limit=a.limit,
        next_key=next_key,
    )
    return {"snapshots": [dataclasses.asdict(s) for s in snapshots], "next_key": cursor}


async def command(a) -> object:
    repo, limiter = await open_limiter(a.table)
    try:
        if a.command == "create":
            meta = dict(kv.split("=", 1) for kv in a.meta)
            made = await limiter.create_entity(
                a.entity, name=a.name, parent_id=a.parent, cascade=a.cascade,
                metadata=meta or None, principal=a.principal,
            )
            return entity_out(made)
        if a.command == "get":
            return entity_out(await limiter.get_entity(a.entity))
        if a.command == "move":
            return {"stamped": await limiter.set_parent(a.entity, a.parent, principal=a.principal)}
        if a.command == "acquire":
            consume = {k: int(v) for k, v in (kv.split("=", 1) for kv in a.consume)}
            try:
                async with limiter.acquire(entity_id=a.entity, resource=a.resource, consume=consume):
                    pass
            except RateLimitExceeded as e:
                return {"outcome": "rejected", "violations": sorted(s.limit_name for s in e.violations)}
            return {"outcome": "admitted"}
        if a.command == "bucket":
            buckets = await repo.get_buckets(a.entity, a.resource)
            return {b.limit_name: b.tokens_milli for b in buckets} or None
        if a.command == "usage":
            return await usage_page(limiter, a, json.loads(a.next_key) if a.next_key else None)
        if a.command == "summary":
            summary = await limiter.get_usage_summary(
                entity_id=a.entity, resource=a.resource, window_type=a.window,
                start_time=when(a.start), end_time=when(a.end),
            )
            return dataclasses.asdict(summary)
        if a.command == "pages":
            pages, cursor = [], None
            while True:
                page = await usage_page(limiter, a, cursor)
                pages.append(page)
                cursor = page["next_key"]
                if cursor is None:
                    return pages
        events = await limiter.get_audit_events(a.entity, limit=a.limit, start_event_id=a.start_event_id)
        return [dataclasses.asdict(e) for e in events]
    except (ZAELimiterError, ValueError) as e:
        return {"error": type(e).__name__, "message": str(e)}
    finally:
        await repo.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["create", "get", "move", "acquire", "bucket", "usage", "pages", "summary", "audit"])
    p.add_argument("--table", required=True)
    p.add_argument("--entity")
    p.add_argument("--parent")
    p.add_argument("--cascade", action="store_true")
    p.add_argument("--name")
    p.add_argument("--meta", action="append", default=[])
    p.add_argument("--principal")
    p.add_argument("--resource")
    p.add_argument("--consume", action="append", default=[])
    p.add_argument("--window")
    p.add_argument("--start")
    p.add_argument("--end")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--next-key")
    p.add_argument("--start-event-id")
    print(json.dumps(asyncio.run(command(p.parse_args()))))


if __name__ == "__main__":
    main()
