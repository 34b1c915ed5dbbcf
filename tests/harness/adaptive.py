"""The real 0.17.0 client for the adaptive-limit tests.

    adaptive.py cascade --table T    a three-level tree org <- team <- key, team and key
                                     cascading, each with a tpm limit on gpt-4; requests from
                                     each level; prints the tokens each request asked for,
                                     counted once, and the namespace id, as JSON
    adaptive.py setup --table T      the table, namespace "default"; prints its id
    adaptive.py touch --table T      one request of entity "e" on gpt-4 (creates its bucket)
    adaptive.py view --table T       what the client's config reads and list APIs return, as JSON
    adaptive.py params --table T     e's parameters as the client reads them back, nothing drawn
    adaptive.py surge --table T --tokens N
                                     entity "other", with limits of its own on gpt-4 (so not
                                     governed by an adaptive level), takes N tokens within one
                                     minute; prints the tokens taken and that minute
    adaptive.py admit --table T --seconds S
                                     drains e's bucket, then requests without pause for S
                                     seconds; prints the tokens admitted and e's parameters
                                     as the client reads them back
    adaptive.py greedy --table T --entities N --seconds S --tokens K
                                     N entities g00.. each take all they are admitted, K rps
                                     tokens a request, for S seconds: two requesters each,
                                     each waiting out a rejection's retry_after, so that the
                                     bucket is drained as tokens accrue, the requests' own
                                     latency notwithstanding; prints the tokens admitted per
                                     entity and per minute of the clock
    adaptive.py share --table T --resources R1,R2 --steady S --surge U --tokens K
                                     on each resource, entity "heavy" takes all it gets (K
                                     tokens a request) and ten light ones use half their base
                                     (25 rps tokens every 5 s) for S seconds, then take all
                                     they get too for U seconds; prints each resource's tokens
                                     admitted per minute of the clock, heavy and light apart
    adaptive.py cascade-limits --table T
                                     parent "lead" with rpm only, child "dev" with rpm and tpm,
                                     dev cascading; requests of dev; prints the tpm asked
    adaptive.py touch --table T --entity E
                                     one request of entity E (rps 1)
    adaptive.py params --table T --entity E
                                     E's rps parameters as the client reads them back
    adaptive.py own --table T --entity E --capacity C --amount A --period P
                                     one request of entity E (rps 1) with the caller's own
                                     limits, acquire(limits=[Limit("rps", C, A, P)]): its bucket
                                     takes the caller's parameters, not the stored config's
    adaptive.py set --table T --level system|resource|entity [--entity E] --capacity C --rate R
                                     the client's own set_system_defaults, set_resource_defaults
                                     or set_limits(E) of rps on gpt-4: C burst, R a second
"""
import argparse
import asyncio
import json
import time

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository

from client import create, endpoint, open_repo, region

RESOURCE = "gpt-4"
# (entity, parent, requests, tokens each)
TREE = [("org", None, 2, 1), ("team", "org", 3, 10), ("key", "team", 5, 100)]


async def cascade(table: str) -> dict:
    await create(table)
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


ENTITY, TOKENS = "e", 100


async def setup(table: str) -> dict:
    await create(table)
    repo = await open_repo(table)
    namespace = repo.namespace_id
    await repo.close()
    return {"namespace_id": namespace}


async def touch(table: str, entity: str = ENTITY) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"rps": 1}):
        pass
    await repo.close()
    return {"touched": entity}


async def own(table: str, entity: str, capacity: int, amount: int, period: int) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    mine = [Limit(name="rps", capacity=capacity, refill_amount=amount, refill_period_seconds=period)]
    async with limiter.acquire(entity_id=entity, resource=RESOURCE, consume={"rps": 1}, limits=mine):
        pass
    read = await parameters(repo, entity)
    await repo.close()
    return read


async def parameters(repo: Repository, entity: str = ENTITY) -> dict:
    states = await repo.get_buckets(entity, RESOURCE)
    rps = next(s for s in states if s.limit_name == "rps")
    return {"cp": rps.capacity_milli, "ra": rps.refill_amount_milli, "rp": rps.refill_period_ms}


async def admit(table: str, seconds: float) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    # Drain what the bucket holds, so that what follows is its refill alone.
    while True:
        try:
            async with limiter.acquire(entity_id=ENTITY, resource=RESOURCE, consume={"rps": TOKENS}):
                pass
        except RateLimitExceeded:
            break
    admitted = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            async with limiter.acquire(entity_id=ENTITY, resource=RESOURCE, consume={"rps": TOKENS}):
                admitted += TOKENS
        except RateLimitExceeded:
            await asyncio.sleep(0.02)
    read = await parameters(repo)
    await repo.close()
    return {"admitted_tokens": admitted, "seconds": seconds, **read}


async def params(table: str, entity: str = ENTITY) -> dict:
    repo = await open_repo(table)
    read = await parameters(repo, entity)
    await repo.close()
    return read


async def take_all(limiter, name: str, resource: str, tokens: int, until: float, count) -> None:
    """Takes all `name` is admitted on `resource` until `until` (monotonic):
    a request as soon as the last one is through, or as soon as a
    rejection's retry_after has passed; `count(tokens)` for each admitted."""
    while time.monotonic() < until:
        try:
            async with limiter.acquire(entity_id=name, resource=resource, consume={"rps": tokens}):
                pass
        except RateLimitExceeded as e:
            wait = getattr(e, "retry_after_seconds", None) or 0.05
            await asyncio.sleep(min(max(wait, 0.01), 1.0))
            continue
        count(tokens)


def per_minute_counter(table: dict):
    """A counter of tokens by minute of the clock (epoch ms of its start)."""
    def count(tokens: int) -> None:
        minute = int(time.time() // 60) * 60_000
        table[minute] = table.get(minute, 0) + tokens
    return count


async def greedy(table: str, entities: int, seconds: float, tokens: int) -> dict:
    """Each entity takes all it is admitted."""
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    names = [f"g{i:02d}" for i in range(entities)]
    per_entity = {n: 0 for n in names}
    per_minute: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    minute_count = per_minute_counter(per_minute)

    def counter(name):
        def count(t):
            per_entity[name] += t
            minute_count(t)
        return count

    await asyncio.gather(*(take_all(limiter, n, RESOURCE, tokens, deadline, counter(n))
                           for n in names for _ in range(REQUESTERS)))
    await repo.close()
    return {"per_entity": per_entity, "per_minute": sorted(per_minute.items())}


# The demand-share scenario: one heavy entity that takes all it gets and ten
# light ones at half their base (25 tokens every 5 s of 10 a second), on each resource;
# after `steady` seconds the light ones take all they get too.
HEAVY, LIGHT = "heavy", [f"light{i}" for i in range(10)]


async def share(table: str, resources: list, steady: float, surge: float, tokens: int) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    start, surge_wall = time.monotonic(), time.time() + steady
    surge_at, end = start + steady, start + steady + surge
    counts = {r: {"heavy": {}, "light": {}} for r in resources}

    async def light(name: str, resource: str) -> None:
        # 25 tokens every 5 s on a schedule of its own (not after each
        # answer): 5 a second, whatever the round trips.
        count = per_minute_counter(counts[resource]["light"])
        due = time.monotonic()
        while due < surge_at:
            try:
                async with limiter.acquire(entity_id=name, resource=resource, consume={"rps": 25}):
                    pass
                count(25)
            except RateLimitExceeded:
                pass
            due += 5.0
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        await asyncio.gather(*(take_all(limiter, name, resource, tokens, end, count)
                               for _ in range(REQUESTERS)))

    tasks = []
    for r in resources:
        heavy = per_minute_counter(counts[r]["heavy"])
        tasks += [take_all(limiter, HEAVY, r, tokens, end, heavy) for _ in range(REQUESTERS)]
        tasks += [light(name, r) for name in LIGHT]
    await asyncio.gather(*tasks)
    await repo.close()
    return {
        "surge_ms": int(surge_wall * 1000),
        "per_minute": {r: {k: sorted(v.items()) for k, v in c.items()} for r, c in counts.items()},
    }


# Requesters per greedy entity: one alone leaves tokens unused while its
# requests are on the wire.
REQUESTERS = 2

LEAD, DEV = "lead", "dev"


async def cascade_limits(table: str) -> dict:
    """A parent that tracks rpm only, a child that tracks rpm and tpm: the
    client debits the parent only for rpm, so dev's tpm has no copy above."""
    await create(table)
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    await limiter.create_entity(LEAD)
    await limiter.create_entity(DEV, parent_id=LEAD, cascade=True)
    await limiter.set_limits(LEAD, [Limit.per_minute("rpm", 1_000_000)], resource=RESOURCE)
    await limiter.set_limits(
        DEV, [Limit.per_minute("rpm", 1_000_000), Limit.per_minute("tpm", 1_000_000)], resource=RESOURCE
    )
    asked = 0
    for tokens in (100, 250, 40):
        async with limiter.acquire(entity_id=DEV, resource=RESOURCE, consume={"rpm": 1, "tpm": tokens}):
            asked += tokens
    namespace = repo.namespace_id
    await repo.close()
    return {"namespace_id": namespace, "tpm": asked}


async def set_level(table: str, level: str, entity: str, capacity: int, rate: int) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    limit = Limit.per_second("rps", rate, burst=capacity)
    if level == "system":
        await limiter.set_system_defaults([limit])
    elif level == "resource":
        await limiter.set_resource_defaults(RESOURCE, [limit])
    else:
        await limiter.set_limits(entity, [limit], resource=RESOURCE)
    await repo.close()
    return {"set": level, "capacity": capacity, "rate": rate}


OTHER, SURGE_CHUNK = "other", 5_000


async def surge(table: str, tokens: int) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    await limiter.set_limits(OTHER, [Limit.per_second("rps", 1_000_000)], resource=RESOURCE)
    # All of it in one minute of the stream's clock: a few requests take well
    # under a second, so start afresh if the minute is about to end.
    left = 60 - time.time() % 60
    if left < 10:
        await asyncio.sleep(left + 0.5)
    started = time.time()
    taken = 0
    while taken < tokens:
        chunk = min(SURGE_CHUNK, tokens - taken)
        async with limiter.acquire(entity_id=OTHER, resource=RESOURCE, consume={"rps": chunk}):
            taken += chunk
    ended = time.time()
    await repo.close()
    minute = int(started // 60) * 60_000
    return {"tokens": taken, "minute_ms": minute, "one_minute": int(ended // 60) * 60_000 == minute}


def limits(found) -> list:
    return sorted([l.name, l.capacity, l.refill_amount, l.refill_period_seconds] for l in found)


async def view(table: str) -> dict:
    repo = await open_repo(table)
    limiter = RateLimiter(repository=repo)
    system, on_unavailable = await limiter.get_system_defaults()
    entities, _ = await limiter.list_entities_with_custom_limits(RESOURCE)
    capacity = await limiter.get_resource_capacity(RESOURCE, "rps")
    out = {
        "resource_defaults": limits(await limiter.get_resource_defaults(RESOURCE)),
        "resources_with_defaults": sorted(await limiter.list_resources_with_defaults()),
        "resources_with_entity_configs": sorted(await limiter.list_resources_with_entity_configs()),
        "system_defaults": limits(system),
        "on_unavailable": str(on_unavailable),
        "entity_limits": limits(await limiter.get_limits(ENTITY, RESOURCE)),
        "entities_with_custom_limits": sorted(entities),
        "capacity_entities": sorted(e.entity_id for e in capacity.entities),
    }
    await repo.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("cascade", "cascade-limits", "setup", "touch", "admit", "view", "params", "surge",
                 "greedy", "set", "share", "own"):
        c = sub.add_parser(name)
        c.add_argument("--table", required=True)
        if name in ("admit", "greedy"):
            c.add_argument("--seconds", type=float, required=True)
        if name in ("surge", "greedy", "share"):
            c.add_argument("--tokens", type=int, required=True)
        if name == "share":
            c.add_argument("--resources", required=True)
            c.add_argument("--steady", type=float, required=True)
            c.add_argument("--surge", type=float, required=True)
        if name in ("touch", "params", "set", "own"):
            c.add_argument("--entity", default=ENTITY)
        if name == "own":
            for flag in ("--capacity", "--amount", "--period"):
                c.add_argument(flag, type=int, required=True)
        if name == "greedy":
            c.add_argument("--entities", type=int, required=True)
        if name == "set":
            c.add_argument("--level", choices=["system", "resource", "entity"], required=True)
            c.add_argument("--capacity", type=int, required=True)
            c.add_argument("--rate", type=int, required=True)
    args = parser.parse_args()
    run = {
        "cascade": lambda: cascade(args.table),
        "cascade-limits": lambda: cascade_limits(args.table),
        "setup": lambda: setup(args.table),
        "touch": lambda: touch(args.table, args.entity),
        "own": lambda: own(args.table, args.entity, args.capacity, args.amount, args.period),
        "admit": lambda: admit(args.table, args.seconds),
        "view": lambda: view(args.table),
        "params": lambda: params(args.table, args.entity),
        "surge": lambda: surge(args.table, args.tokens),
        "greedy": lambda: greedy(args.table, args.entities, args.seconds, args.tokens),
        "set": lambda: set_level(args.table, args.level, args.entity, args.capacity, args.rate),
        "share": lambda: share(args.table, args.resources.split(","), args.steady, args.surge,
                               args.tokens),
    }[args.command]
    print(json.dumps(asyncio.run(run())))


if __name__ == "__main__":
    main()
