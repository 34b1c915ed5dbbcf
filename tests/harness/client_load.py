"""The real zae-limiter 0.17.0 client as a load generator: the Python side
of the side-by-side test and of the client benchmark, the same scenario as
`zae-load` and the same one-line JSON answer.

    client_load.py --table T [-N NAMESPACE] --entity E --resource R
                   --consume tpm=10,rpm=1 --requests N --concurrency C [--entities K]
                   [--limits rpm=100:100:60,tpm=1000:1000:60:soft | --also R2 ...]
                   [--ready-file PATH]

--consume may list alternatives separated by ';' (say day=1;win=1):
request i consumes alternative i mod their count, and "admitted_by" counts
the admitted requests per alternative, in order.

--limits: the caller's own limits for every acquire (acquire(limits=...)).
--also (repeatable): another resource taking the same --consume in the same
acquire (acquire(also=...)). Not both: 0.17.0 refuses limits= with also=.

With --ready-file, PATH is created once the namespace is open, just before
the first request: a caller that starts its own load then starts beside it.

Prints {"admitted", "rejected", "errors", "p50_ms", "p99_ms", "wall_s", "cpu_s",
"admitted_by"};
cpu_s is this process's user + system CPU time over the run. Endpoint and
credentials come from the AWS environment.
"""
import argparse
import asyncio
import json
import os
import resource as rusage
import sys
import time

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository


def consume_arg(text: str) -> dict:
    out = {}
    for part in text.split(","):
        name, sep, amount = part.partition("=")
        if not sep or not name or not amount.isdigit():
            raise SystemExit(f"--consume: '{part}' is not NAME=WHOLE_TOKENS")
        out[name] = int(amount)
    return out


def limits_arg(text: str) -> list:
    """rpm=100:100:60,tpm=1000:1000:60:soft, as zae-load's --limits."""
    out = []
    for part in text.split(","):
        name, sep, params = part.partition("=")
        fields = params.split(":")
        soft = fields[3:] == ["soft"]
        if not sep or not name or len(fields) not in (3, 4) or (len(fields) == 4 and not soft) \
                or not all(f.isdigit() for f in fields[:3]):
            raise SystemExit(f"--limits: '{part}' is not LIMIT=CAPACITY:REFILL:PERIOD_S[:soft]")
        capacity, refill, period = map(int, fields[:3])
        out.append(Limit(name=name, capacity=capacity, refill_amount=refill,
                         refill_period_seconds=period, soft=soft))
    return out


def cpu_seconds() -> float:
    usage = rusage.getrusage(rusage.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(sorted_ms: list, p: float) -> float:
    if not sorted_ms:
        return 0.0
    return round(sorted_ms[min(len(sorted_ms) - 1, int(p * len(sorted_ms)))], 3)


async def main(args) -> dict:
    repo = await Repository.open(args.namespace, stack=args.table,
                                 region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                                 endpoint_url=os.environ.get("AWS_ENDPOINT_URL"))
    limiter = RateLimiter(repository=repo)
    consumes = [consume_arg(alt) for alt in args.consume.split(";")]
    limits = {"limits": args.limits} if args.limits else {}
    counts = {"admitted": 0, "rejected": 0, "errors": 0}
    admitted_by = [0] * len(consumes)
    latencies = []
    queue = list(range(args.requests))

    async def worker():
        while queue:
            i = queue.pop()
            entity = f"{args.entity}-{i % args.entities}" if args.entities else args.entity
            consume = consumes[i % len(consumes)]
            extra = dict(limits)
            if args.also:
                extra["also"] = {r: dict(consume) for r in args.also}
            start = time.perf_counter()
            try:
                async with limiter.acquire(entity_id=entity, resource=args.resource, consume=consume, **extra):
                    pass
                counts["admitted"] += 1
                admitted_by[i % len(consumes)] += 1
            except RateLimitExceeded:
                counts["rejected"] += 1
            except Exception as e:  # counted, as zae-load counts its errors
                print(f"error: {e}", file=sys.stderr)
                counts["errors"] += 1
            latencies.append((time.perf_counter() - start) * 1000)

    if args.ready_file:
        open(args.ready_file, "w").close()
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    await repo.close()
    latencies.sort()
    return {**counts, "p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99),
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "admitted_by": admitted_by}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", "-t", required=True)
    parser.add_argument("--namespace", "-N", default="default")
    parser.add_argument("--entity", required=True)
    parser.add_argument("--resource", required=True)
    parser.add_argument("--consume", required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--entities", type=int, default=0)
    parser.add_argument("--limits", type=limits_arg)
    parser.add_argument("--also", action="append", default=[])
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    if args.requests < 0 or args.concurrency < 1 or args.entities < 0:
        raise SystemExit("--requests >= 0, --concurrency >= 1, --entities >= 0")
    if args.limits and args.also:
        raise SystemExit("--limits and --also cannot be combined (0.17.0 refuses limits= with also=)")
    print(json.dumps(asyncio.run(main(args))))
