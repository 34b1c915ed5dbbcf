"""The real 0.17.0 client for the adaptive-limit tests.

    adaptive.py cascade --table T    a three-level tree org <- team <- key, team and key
                                     cascading, each with a tpm limit on gpt-4; requests from
                                     each level; prints the tokens each request asked for,
                                     counted once, and the namespace id, as JSON
"""
import argparse
import asyncio
import json

from zae_limiter import Limit, RateLimiter, Repository

from client import endpoint, open_repo, region

RESOURCE = "gpt-4"
# (entity, parent, requests, tokens each)
TREE = [("org", None, 2, 1), ("team", "org", 3, 10), ("key", "team", 5, 100)]


async def cascade(table: str) -> dict:
    raw = Repository(table, region=region(), endpoint_url=endpoint(), _skip_deprecation_warning=True)
    await raw.create_table()
    await raw.close()
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    for entity, parent, _, _ in TREE:
        await limiter.create_entity(entity, parent_id=parent, cascade=parent is not None)
        await limiter.set_limits(entity, [Limit.per_minute("tpm", 1_000_000)], resource=RESOURCE)
    asked = 0
    for entity, _, requests, tokens in TREE:
        for _ in range(requests):
            async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"tpm": tokens}):
                asked += tokens
    namespace = repo.namespace_id
    await repo.close()
    return {"namespace_id": namespace, "tokens": asked}


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cascade")
    c.add_argument("--table", required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(cascade(args.table))))


if __name__ == "__main__":
    main()
