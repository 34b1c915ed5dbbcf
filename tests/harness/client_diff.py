"""The Python half of the differential test between the real zae-limiter 0.17.0
client and zae-client: a spec run through the real client on a clock the spec
gives.

    client_diff.py prepare --table T --spec FILE
        create the table as the library defines it, open namespace "default",
        apply the spec's setup ops at setup_at_ms; prints {"table","namespace_id"}
    client_diff.py run --table T --spec FILE
        every step through one Repository/RateLimiter; prints {"steps":[{"answer","items"}...]}
    client_diff.py admin --table T --at-ms MS --json ADMIN [--stamp-ttl-ms N]
        one admin op at MS (N: the spec's stamp_ttl_ms, default 60000); prints the answer
    client_diff.py dump --table T
        the namespace's items; prints {"buckets":[...], "items":[...]}

A spec (examples in client_diff/):
    {"stamp_ttl_ms": N, "setup_at_ms": MS, "setup": [ADMIN...], "steps": [STEP...],
     ["rejection_cache_ttl_ms": N (default 0: off)]}
    ADMIN: {"op":"limits","level":"system"|"resource"|"entity", ["resource":R], ["entity":E],
            "limits":[LIMIT...], ["on_unavailable":"allow"|"block", system only]}
           {"op":"delete_limits", level fields}
           {"op":"entity","entity":E,"parent":P|null,"cascade":B}   (create_entity)
           {"op":"set_parent","entity":E,"parent":P|null}           (set_parent)
           {"op":"disable"|"enable","resource":R}
           {"op":"double_shards","entity":E,"resource":R,"from":N}
               (repository.bump_shard_count: the write the client makes when a
               shard's wcu runs out; N is the count it doubles, as the client
               passes it. The provisioner's shard_count is the other way.)
           {"op":"bypass"|"unbypass","resource":R,["entity":E]}
               (bypass_resource or bypass_entity; clear_resource_disabled or
               clear_entity_disabled)
    LIMIT: {"name","capacity","refill_amount","refill_period_s",["soft"],
            ["schedule":[{"cron","tz","scale"|"capacity","refill_amount","refill_period_s"}]],
            ["reset_schedule":[{"cron","tz"}]],["reset_after_s"]}
    STEP:  {"at_ms":MS,"admin":ADMIN}
           {"at_ms":MS,["draw":U],"acquire":{"entity","resource","consume":{name:n},
            ["lease":[{"adjust"|"release"|"consume":{name:n}}...]],["fail":B],
            ["limits":[LIMIT...]] (acquire(limits=...)),
            ["also":{resource:{name:n}}] (acquire(also=...); a lease op with
            "resource":R acts on lease.resource(R); keys sorted, as the Rust
            runner reads them)}}
Amounts are any integers, negative ones included (the client refuses a negative
consume; a negative adjust is a credit, a negative release a debit, an in-lease
consume of 0 or less takes nothing). An object with a key its kind does not list
is refused, naming the key: a spec written for a later version of this script
fails rather than running with a part ignored. To add a field or an op, add it
to KEYS (and to the check of its kind) and to this docstring.

An answer is one of:
    {"outcome":"admitted","overdrawn":[...],"lease":["ok"|ERROR...]}
    {"outcome":"admin"}
    ERROR: {"outcome":"error","kind":CLASS,["field":F],"message":M,["body":BODY]}
CLASS is the class name of what the client raised (type(e).__name__, never
renamed); F is a ValidationError's `field`; BODY is a RateLimitExceeded's
as_dict() with `message` taken out (it is M) and every float written as its
repr() string, so that the other side compares it exactly (a JSON number would
go through a float parser); a ResourceDisabled carries "entity", "resource" and
"level". overdrawn is read in the body after the lease ops; fail=true raises
after them, and the answer is still "admitted" (the rollback shows in the
items).

Items are DynamoDB JSON, read strongly consistent: every item whose PK is under
the namespace (buckets, entity META, config, audit, usage: whatever the
clients wrote), sorted by PK and SK. What is random by nature is normalised:
the namespace id is "{ns}" in every S value; an audit event's ULID (its SK and
event_id) is "{ulid}", and the wall-clock strings the library writes beside the
injected clock (created_at, updated_at, timestamp) are "{wallclock}". "buckets"
is the `#STATE` items under `/BUCKET#` alone.

The clock: the repository's `_now_ms` returns the step's at_ms for every
reading, and `_stamp_deadline(now)` returns now + stamp_ttl_ms*9//10 (the
client draws U(0.8, 1.0) there). A new entity's incarnation (`pinc`, random in
the client) is the first 16 hex digits of sha256(entity id), so that two tables
prepared from one spec hold the same items.

The shard draw: limiter.py and repository.py see a `random` whose `choice(seq)`
is seq[U % len(seq)] and `randrange(a, b)` is a + U % (b - a), with U the
step's "draw" (0 when absent); other functions are the real module's. Every
shard draw in a step is thus a function of the candidates it draws from, and
zae-client is given the same U (Options::shard_draw), so both clients land on
one shard whenever they draw from one list.

Admin ops in `run` go through a second Repository/RateLimiter (an operator's
process, as `admin` is for the other client), so that the acquiring client
learns of them only from the table. Config cache TTL 0, rejection cache
off, speculative writes on. Endpoint and credentials come from the AWS
environment (AWS_ENDPOINT_URL, ...). The last stdout line is the JSON answer;
a bad spec or a missing table exits 1 naming what is wrong.
"""
import argparse
import asyncio
import contextvars
import hashlib
import json
import os
import random
import re
import sys
from datetime import timedelta

import boto3
from botocore.exceptions import ClientError
import zae_limiter.limiter
import zae_limiter.repository
from client import stamp_version_record
from zae_limiter import Limit, OnUnavailable, RateLimiter, RateLimitExceeded, Repository
from zae_limiter.schedule import ScheduleEntry
import zae_limiter.exceptions as zae_exceptions
from zae_limiter.exceptions import (
    ResourceDisabled,
    ValidationError,
    ZAELimiterError,
)

NAMESPACE = "default"
BUCKET_SK = "#STATE"
NS_PLACEHOLDER = "{ns}"


def endpoint() -> str:
    return os.environ["AWS_ENDPOINT_URL"]


def region() -> str:
    return os.environ.get("AWS_DEFAULT_REGION", "us-east-1")


def dynamodb():
    return boto3.client("dynamodb", endpoint_url=endpoint(), region_name=region())


# --- spec validation: bad input names the field that is wrong ---------------


class SpecError(Exception):
    pass


def need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise SpecError(f"{where}: {what}")


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_amounts(d, where: str) -> None:
    need(isinstance(d, dict) and d, where, "expected a non-empty object of limit name -> integer")
    for k, v in d.items():
        need(is_int(v), f"{where}.{k}", f"expected an integer, got {v!r}")


# The keys each kind of object may have; any other is refused by name.
LEVEL_FIELDS = {"system": (), "resource": ("resource",), "entity": ("entity", "resource")}
KEYS = {
    "spec": {"stamp_ttl_ms", "setup_at_ms", "setup", "steps", "rejection_cache_ttl_ms"},
    "limit": {"name", "capacity", "refill_amount", "refill_period_s", "soft",
              "schedule", "reset_schedule", "reset_after_s"},
    "limits": {"op", "level", "resource", "entity", "limits", "on_unavailable"},
    "delete_limits": {"op", "level", "resource", "entity"},
    "entity": {"op", "entity", "parent", "cascade"},
    "set_parent": {"op", "entity", "parent"},
    "disable": {"op", "resource"},
    "enable": {"op", "resource"},
    "double_shards": {"op", "entity", "resource", "from"},
    "bypass": {"op", "resource", "entity"},
    "unbypass": {"op", "resource", "entity"},
    "admin_step": {"at_ms", "admin"},
    "acquire_step": {"at_ms", "draw", "acquire"},
    "acquire": {"entity", "resource", "consume", "lease", "fail", "limits", "also"},
}


def check_keys(d: dict, kind: str, where: str) -> None:
    unknown = sorted(set(d) - KEYS[kind])
    need(not unknown, where, f"unknown key(s) {unknown} for {kind!r}; known: {sorted(KEYS[kind])}")


def check_limit(limit, w: str) -> None:
    need(isinstance(limit, dict), w, "expected an object")
    check_keys(limit, "limit", w)
    need(isinstance(limit.get("name"), str), f"{w}.name", "expected a string")
    for field in ("capacity", "refill_amount", "refill_period_s"):
        need(is_int(limit.get(field)), f"{w}.{field}", f"expected an integer, got {limit.get(field)!r}")
    need(isinstance(limit.get("soft", False), bool), f"{w}.soft", "expected true or false")


def check_level(op: dict, where: str) -> None:
    level = op.get("level")
    need(level in LEVEL_FIELDS, f"{where}.level", f"expected one of {sorted(LEVEL_FIELDS)}, got {level!r}")
    for field in LEVEL_FIELDS[level]:
        need(isinstance(op.get(field), str), f"{where}.{field}", f"level {level!r} needs a string")


def check_admin(op, where: str) -> None:
    need(isinstance(op, dict), where, "expected an object")
    kind = op.get("op")
    admin_ops = sorted(k for k in KEYS if k not in ("spec", "limit", "admin_step", "acquire_step", "acquire"))
    need(kind in admin_ops, f"{where}.op", f"expected one of {admin_ops}, got {kind!r}")
    check_keys(op, kind, where)
    if kind in ("limits", "delete_limits"):
        check_level(op, where)
        if kind == "limits":
            limits = op.get("limits")
            need(isinstance(limits, list) and limits, f"{where}.limits", "expected a non-empty list")
            for i, limit in enumerate(limits):
                check_limit(limit, f"{where}.limits[{i}]")
            if "on_unavailable" in op:
                need(op["level"] == "system", f"{where}.on_unavailable", "only the system level has it")
                need(op["on_unavailable"] in ("allow", "block"), f"{where}.on_unavailable", "expected allow or block")
    elif kind in ("entity", "set_parent"):
        need(isinstance(op.get("entity"), str), f"{where}.entity", "expected a string")
        need(op.get("parent") is None or isinstance(op["parent"], str), f"{where}.parent", "expected a string or null")
        need(isinstance(op.get("cascade", False), bool), f"{where}.cascade", "expected true or false")
    elif kind == "double_shards":
        for field in ("entity", "resource"):
            need(isinstance(op.get(field), str), f"{where}.{field}", "expected a string")
        need(is_int(op.get("from")) and op["from"] > 0, f"{where}.from", "expected a positive integer")
    elif kind in ("bypass", "unbypass"):
        check_bypass(op, where)
    else:
        need(isinstance(op.get("resource"), str), f"{where}.resource", "expected a string")


def check_bypass(op, where: str) -> None:
    need(isinstance(op.get("resource"), str), f"{where}.resource", "expected a string")
    need(op.get("entity") is None or isinstance(op["entity"], str), f"{where}.entity", "expected a string")


def check_limits(limits, where: str) -> None:
    """An acquire's `limits` (the client's limits= override): a list as an ADMIN op's."""
    need(isinstance(limits, list) and limits, where, "expected a non-empty list")
    for i, limit in enumerate(limits):
        check_limit(limit, f"{where}[{i}]")


def check_step(step, where: str) -> None:
    need(isinstance(step, dict), where, "expected an object")
    need(is_int(step.get("at_ms")), f"{where}.at_ms", f"expected an integer (epoch ms), got {step.get('at_ms')!r}")
    if "admin" in step:
        check_keys(step, "admin_step", where)
        check_admin(step["admin"], f"{where}.admin")
        return
    check_keys(step, "acquire_step", where)
    need(is_int(step.get("draw", 0)) and step.get("draw", 0) >= 0, f"{where}.draw", "expected an integer >= 0")
    acq = step.get("acquire")
    need(isinstance(acq, dict), where, "expected an \"acquire\" or an \"admin\" object")
    w = f"{where}.acquire"
    check_keys(acq, "acquire", w)
    need(isinstance(acq.get("entity"), str), f"{w}.entity", "expected a string")
    need(isinstance(acq.get("resource"), str), f"{w}.resource", "expected a string")
    check_amounts(acq.get("consume"), f"{w}.consume")
    need(isinstance(acq.get("lease", []), list), f"{w}.lease", "expected a list")
    for i, op in enumerate(acq.get("lease", [])):
        need(isinstance(op, dict) and len(op) == 1 + ("resource" in op), f"{w}.lease[{i}]", "expected one of {adjust|release|consume: {...}}")
        (name, amounts), = ((k, v) for k, v in op.items() if k != "resource")
        need(name in ("adjust", "release", "consume"), f"{w}.lease[{i}]", f"unknown lease op {name!r}")
        check_amounts(amounts, f"{w}.lease[{i}].{name}")
    need(isinstance(acq.get("fail", False), bool), f"{w}.fail", "expected true or false")
    if "limits" in acq:
        check_limits(acq["limits"], f"{w}.limits")
    if "also" in acq:
        need(isinstance(acq["also"], dict), f"{w}.also", "expected {resource: {name: n}}")
        for resource, amounts in acq["also"].items():
            check_amounts(amounts, f"{w}.also.{resource}")


def load_spec(path: str) -> dict:
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"client_diff.py: cannot read spec {path}: {e}")
    try:
        need(isinstance(spec, dict), "spec", "expected an object")
        check_keys(spec, "spec", "spec")
        need(is_int(spec.get("stamp_ttl_ms")) and spec["stamp_ttl_ms"] > 0, "stamp_ttl_ms", "expected a positive integer")
        need(is_int(spec.get("setup_at_ms")), "setup_at_ms", "expected an integer (epoch ms)")
        cache_ttl = spec.get("rejection_cache_ttl_ms", 0)
        need(is_int(cache_ttl) and cache_ttl >= 0, "rejection_cache_ttl_ms", "expected an integer >= 0")
        need(isinstance(spec.get("setup", []), list), "setup", "expected a list")
        for i, op in enumerate(spec.get("setup", [])):
            check_admin(op, f"setup[{i}]")
        need(isinstance(spec.get("steps"), list), "steps", "expected a list")
        for i, step in enumerate(spec["steps"]):
            check_step(step, f"steps[{i}]")
    except SpecError as e:
        raise SystemExit(f"client_diff.py: bad spec {path}: {e}")
    return spec


# --- the clock and the client -----------------------------------------------


class Clock:
    def __init__(self, now_ms: int, stamp_ttl_ms: int) -> None:
        self.now_ms = now_ms
        self.stamp_ttl_ms = stamp_ttl_ms


class PinnedDraw:
    """`random` as limiter.py and repository.py see it: the shard draws pick
    by the step's draw U; everything else is the real module."""

    def __init__(self) -> None:
        self.u = 0

    def choice(self, seq):
        return seq[self.u % len(seq)]

    def randrange(self, start: int, stop: int | None = None) -> int:
        if stop is None:
            start, stop = 0, start
        return start + self.u % (stop - start)

    def __getattr__(self, name: str):
        return getattr(random, name)


DRAW = PinnedDraw()
zae_limiter.limiter.random = DRAW
zae_limiter.repository.random = DRAW


# The entity create_entity is making, for its incarnation (the client's
# `_new_incarnation` takes no argument).
_creating = contextvars.ContextVar("creating", default=None)


class StepTime:
    """`time` as zae_limiter.exceptions sees it: as_dict() reads the wall
    clock to find a calendar quota's next reset (resets_at_ms); pinned to the
    step's clock like every other reading, so that both clients judge one
    instant."""

    def __init__(self, clock: "Clock") -> None:
        self.clock = clock

    def time(self) -> float:
        return self.clock.now_ms / 1000


def install_clock(repo: Repository, clock: Clock) -> None:
    zae_exceptions.time = StepTime(clock)
    repo._now_ms = lambda: clock.now_ms
    repo._stamp_deadline = lambda now_ms: now_ms + clock.stamp_ttl_ms * 9 // 10

    def new_incarnation() -> str:
        entity = _creating.get()
        if entity is None:
            raise RuntimeError("client_diff.py: an incarnation drawn outside create_entity")
        return hashlib.sha256(entity.encode()).hexdigest()[:16]

    repo._new_incarnation = new_incarnation


def require_table(table: str) -> None:
    try:
        dynamodb().describe_table(TableName=table)
    except ClientError as e:
        if e.response["Error"]["Code"] == "ResourceNotFoundException":
            raise SystemExit(f"client_diff.py: table {table} not found at {endpoint()}: run `prepare` first")
        raise


async def open_limiter(
    table: str, clock: Clock, rejection_cache_ttl_ms: int = 0
) -> tuple[Repository, RateLimiter]:
    require_table(table)
    repo = await Repository.open(
        NAMESPACE,
        stack=table,
        region=region(),
        endpoint_url=endpoint(),
        config_cache_ttl=0,
        rejection_cache_ttl=rejection_cache_ttl_ms / 1000,
        stamp_ttl=clock.stamp_ttl_ms / 1000,
    )
    install_clock(repo, clock)
    return repo, RateLimiter(repository=repo, speculative_writes=True)


def to_entry(d: dict) -> ScheduleEntry:
    """One schedule entry as the spec spells it (`cron`, `tz`, and `scale` or
    `capacity`/`refill_amount`/`refill_period_s`)."""
    return ScheduleEntry(
        cron=d["cron"],
        tz=d.get("tz", "UTC"),
        scale=d.get("scale"),
        capacity=d.get("capacity"),
        refill_amount=d.get("refill_amount"),
        refill_period_seconds=d.get("refill_period_s"),
    )


def to_limit(d: dict) -> Limit:
    limit = Limit(
        name=d["name"],
        capacity=d["capacity"],
        refill_amount=d["refill_amount"],
        refill_period_seconds=d["refill_period_s"],
        soft=d.get("soft", False),
        # A quota's reset (`reset_schedule`: [{cron, tz}]) or a duration
        # window (`reset_after_s`), as Limit's constructor takes them.
        reset_schedule=tuple(ScheduleEntry.reset(e["cron"], e.get("tz", "UTC")) for e in d.get("reset_schedule", [])),
        reset_after=timedelta(seconds=d["reset_after_s"]) if "reset_after_s" in d else None,
    )
    # A parameter schedule (`schedule`: [entry]), as Limit.with_schedule takes it.
    if d.get("schedule"):
        limit = limit.with_schedule(tuple(to_entry(e) for e in d["schedule"]))
    return limit


def exact(value):
    """A body with every float as its repr() string (compared exactly)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [exact(v) for v in value]
    return value


def error_answer(e: BaseException) -> dict:
    """What the client raised, by its own class name, never renamed."""
    answer = {"outcome": "error", "kind": type(e).__name__, "message": str(e)}
    if isinstance(e, ValidationError):
        answer["field"] = e.field
    if isinstance(e, RateLimitExceeded):
        body = e.as_dict()
        answer["message"] = body.pop("message")
        answer["body"] = exact(body)
    if isinstance(e, ResourceDisabled):
        answer.update(entity=e.entity_id, resource=e.resource, level=e.level)
    return answer


async def apply_limits(limiter: RateLimiter, op: dict) -> None:
    if op["op"] == "limits":
        limits = [to_limit(d) for d in op["limits"]]
        if op["level"] == "system":
            mode = OnUnavailable(op["on_unavailable"]) if "on_unavailable" in op else None
            await limiter.set_system_defaults(limits, on_unavailable=mode)
        elif op["level"] == "resource":
            await limiter.set_resource_defaults(op["resource"], limits)
        else:
            await limiter.set_limits(op["entity"], limits, resource=op["resource"])
    elif op["level"] == "system":
        await limiter.delete_system_defaults()
    elif op["level"] == "resource":
        await limiter.delete_resource_defaults(op["resource"])
    else:
        await limiter.delete_limits(op["entity"], resource=op["resource"])


async def apply_admin(limiter: RateLimiter, repo: Repository, op: dict) -> dict:
    """One ADMIN op through the client's own admin API; its answer."""
    kind = op["op"]
    try:
        if kind in ("limits", "delete_limits"):
            await apply_limits(limiter, op)
        elif kind == "entity":
            token = _creating.set(op["entity"])
            try:
                await limiter.create_entity(op["entity"], parent_id=op.get("parent"), cascade=op.get("cascade", False))
            finally:
                _creating.reset(token)
        elif kind == "set_parent":
            await limiter.set_parent(op["entity"], op.get("parent"))
        elif kind == "double_shards":
            await repo.bump_shard_count(op["entity"], op["resource"], op["from"])
        elif kind == "disable":
            await repo.disable_resource(op["resource"])
        elif kind in ("bypass", "unbypass"):
            await apply_bypass(repo, op)
        else:
            await repo.enable_resource(op["resource"])
    except (ZAELimiterError, ClientError) as e:
        return error_answer(e)
    return {"outcome": "admin"}


async def apply_bypass(repo: Repository, op: dict) -> None:
    """bypass/unbypass: the repository's own admin calls, resource or entity."""
    entity = op.get("entity")
    if op["op"] == "bypass":
        if entity is None:
            await repo.bypass_resource(op["resource"])
        else:
            await repo.bypass_entity(entity, op["resource"])
    elif entity is None:
        await repo.clear_resource_disabled(op["resource"])
    else:
        await repo.clear_entity_disabled(entity, op["resource"])


class BodyFailed(Exception):
    """What a step with fail=true raises inside the lease, for the rollback."""


def override_of(acq: dict) -> dict:
    """The acquire's limits= keyword, when the step names limits."""
    return {"limits": [to_limit(d) for d in acq["limits"]]} if "limits" in acq else {}


def also_of(acq: dict) -> dict:
    """The acquire's also= keyword (several resources), when the step names it."""
    return {"also": {r: dict(a) for r, a in acq["also"].items()}} if "also" in acq else {}


async def acquire(limiter: RateLimiter, acq: dict) -> dict:
    lease_answers: list = []
    overdrawn: list = []
    try:
        async with limiter.acquire(
            entity_id=acq["entity"], resource=acq["resource"], consume=dict(acq["consume"]),
            **override_of(acq), **also_of(acq),
        ) as lease:
            for op in acq.get("lease", []):
                (name, amounts), = ((k, v) for k, v in op.items() if k != "resource")
                target = lease.resource(op["resource"]) if "resource" in op else lease
                try:
                    await getattr(target, name)(**amounts)
                    lease_answers.append("ok")
                except (ZAELimiterError, ClientError) as e:
                    # An in-lease consume is all-or-none and in memory: the lease goes on.
                    lease_answers.append(error_answer(e))
            overdrawn = sorted(lease.overdrawn)
            if acq.get("fail", False):
                raise BodyFailed()
    except BodyFailed:
        pass
    except (ZAELimiterError, ClientError) as e:
        return error_answer(e)
    return {"outcome": "admitted", "overdrawn": overdrawn, "lease": lease_answers}


# --- reading the buckets back -----------------------------------------------


def namespace_id(table: str) -> str:
    item = dynamodb().get_item(
        TableName=table,
        Key={"PK": {"S": "_/SYSTEM#"}, "SK": {"S": f"#NAMESPACE#{NAMESPACE}"}},
        ConsistentRead=True,
    ).get("Item")
    if item is None:
        raise SystemExit(f"client_diff.py: namespace {NAMESPACE!r} not registered in {table}: run `prepare` first")
    return item["namespace_id"]["S"]


WALLCLOCK_FIELDS = {"created_at", "updated_at", "timestamp"}
ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")


def normalise(value, ns: str, key: str = ""):
    """DynamoDB JSON with what is random by nature replaced (see the docstring)."""
    if isinstance(value, dict):
        if key in WALLCLOCK_FIELDS and "S" in value:
            return {"S": "{wallclock}"}
        out = {}
        for k, v in value.items():
            if k == "S":
                v = v.replace(ns, NS_PLACEHOLDER)
                if key in ("SK", "event_id") and (key == "event_id" or v.startswith("#AUDIT#")):
                    v = ULID.sub("{ulid}", v)
                out[k] = v
            else:
                out[k] = normalise(v, ns, k)
        return out
    if isinstance(value, list):
        return [normalise(v, ns, key) for v in value]
    return value


def scan(table: str, **filters) -> list:
    items = []
    for page in dynamodb().get_paginator("scan").paginate(TableName=table, ConsistentRead=True, **filters):
        items.extend(page["Items"])
    return items


def buckets(table: str, ns: str) -> list:
    items = scan(
        table,
        FilterExpression="SK = :sk AND begins_with(PK, :prefix)",
        ExpressionAttributeValues={":sk": {"S": BUCKET_SK}, ":prefix": {"S": f"{ns}/BUCKET#"}},
    )
    items = [normalise(item, ns) for item in items]
    return sorted(items, key=lambda item: item["PK"]["S"])


def namespace_items(table: str, ns: str) -> list:
    """Every item of the namespace, normalised, in one order."""
    items = scan(
        table,
        FilterExpression="begins_with(PK, :prefix)",
        ExpressionAttributeValues={":prefix": {"S": f"{ns}/"}},
    )
    items = [normalise(item, ns) for item in items]
    return sorted(items, key=lambda item: (item["PK"]["S"], item["SK"]["S"], json.dumps(item, sort_keys=True)))


# --- commands ---------------------------------------------------------------


async def prepare(table: str, spec: dict) -> dict:
    raw = Repository(table, region=region(), endpoint_url=endpoint(), _skip_deprecation_warning=True)
    await raw.create_table()
    await stamp_version_record(raw)
    await raw.close()
    dynamodb().update_time_to_live(
        TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    repo, limiter = await open_limiter(table, Clock(spec["setup_at_ms"], spec["stamp_ttl_ms"]))
    try:
        for i, op in enumerate(spec.get("setup", [])):
            answer = await apply_admin(limiter, repo, op)
            if answer["outcome"] != "admin":
                raise SystemExit(f"client_diff.py: setup[{i}] ({op['op']}) failed: {answer['kind']}: {answer['message']}")
        return {"table": table, "namespace_id": repo.namespace_id}
    finally:
        await repo.close()


async def run(table: str, spec: dict) -> dict:
    clock = Clock(spec["setup_at_ms"], spec["stamp_ttl_ms"])
    repo, limiter = await open_limiter(table, clock, spec.get("rejection_cache_ttl_ms", 0))
    # The operator's process: admin ops do not teach the acquiring client.
    op_repo, op_limiter = await open_limiter(table, clock)
    ns = repo.namespace_id
    out = []
    try:
        for step in spec["steps"]:
            clock.now_ms = step["at_ms"]
            DRAW.u = step.get("draw", 0)
            if "admin" in step:
                answer = await apply_admin(op_limiter, op_repo, step["admin"])
            else:
                answer = await acquire(limiter, step["acquire"])
            out.append({"answer": answer, "items": namespace_items(table, ns)})
    finally:
        await repo.close()
        await op_repo.close()
    return {"steps": out}


async def admin(table: str, at_ms: int, stamp_ttl_ms: int, op: dict) -> dict:
    repo, limiter = await open_limiter(table, Clock(at_ms, stamp_ttl_ms))
    try:
        return await apply_admin(limiter, repo, op)
    finally:
        await repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["prepare", "run", "admin", "dump"])
    parser.add_argument("--table", required=True)
    parser.add_argument("--spec", help="spec file (prepare, run)")
    parser.add_argument("--at-ms", type=int, help="clock for admin, epoch ms")
    parser.add_argument("--json", help="one ADMIN op, as JSON (admin)")
    parser.add_argument("--stamp-ttl-ms", type=int, default=60000, help="admin: the spec's stamp_ttl_ms")
    args = parser.parse_args()
    if args.command in ("prepare", "run"):
        if not args.spec:
            parser.error(f"{args.command} needs --spec FILE")
        spec = load_spec(args.spec)
        result = asyncio.run(prepare(args.table, spec) if args.command == "prepare" else run(args.table, spec))
    elif args.command == "admin":
        if args.at_ms is None or args.json is None:
            parser.error("admin needs --at-ms MS and --json ADMIN")
        if args.stamp_ttl_ms <= 0:
            parser.error("--stamp-ttl-ms must be positive")
        try:
            op = json.loads(args.json)
            check_admin(op, "--json")
        except json.JSONDecodeError as e:
            parser.error(f"--json is not JSON: {e}")
        except SpecError as e:
            parser.error(str(e))
        result = asyncio.run(admin(args.table, args.at_ms, args.stamp_ttl_ms, op))
    else:
        require_table(args.table)
        ns = namespace_id(args.table)
        result = {"buckets": buckets(args.table, ns), "items": namespace_items(args.table, ns)}
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
