"""The operators' smoke test of a deployed stack (template.yaml); run it
through scripts/smoke.sh, which makes the venv. docs/deploy.md shows its
output. It reads the stack, drives the real zae-limiter 0.17.0 client on a
throwaway entity, waits for what the stack's aggregator and controller must
write, prints what it saw, and cleans the entity up.

Only the client's API and `zae-limits` read the table here: no table key is
spelled in this file (table/ is the one place that spells them).
"""
import argparse
import asyncio
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXIT_PASSED, EXIT_MISSING, EXIT_CANNOT_RUN, EXIT_USAGE = 0, 1, 2, 64

DESCRIPTION = """\
Smoke test of a deployed zae-limiter-rs stack (this repository's template.yaml).

Reads the stack's outputs and parameters (CloudFormation DescribeStacks), then,
with the real zae-limiter 0.17.0 client, creates a throwaway entity
(zae-smoke-<time>-<random>) with a small soft limit on resource zae-smoke and
drives 3 requests past it. It waits, polling, up to --timeout seconds for:
  1. the entity's usage snapshot, written by the aggregator, counting all 3;
  2. the limit_overdrawn audit event the aggregator writes for the soft limit;
  3. with AdaptiveLimits=enabled, a controller tick newer than the start
     (read with `zae-limits adaptive utilization`).
It prints what it saw, line by line, deletes the entity, its limits, buckets
and snapshots, and says what it cannot delete (its audit events)."""

EPILOG = """\
Exit codes:
  0   everything seen
  1   something missing, or the throwaway entity not cleaned up: each is named
  2   the test could not run: no such stack, not this project's stack, no
      credentials or region, the table refused or did not answer the client's
      reads within --timeout, zae-limits not found
  64  bad command line

Needs: AWS credentials allowed cloudformation:DescribeStacks on the stack and
the table's item calls (the stack's <stack>-full policy grants those); with
AdaptiveLimits=enabled,
the zae-limits binary (cargo install --locked --path limits-cli --bin zae-limits).
On AWS the controller ticks once a minute: keep --timeout above 75 s."""

RESOURCE = "zae-smoke"
SOFT_TPM = 100
REQUEST_TPM = 60
REQUESTS = 3
POLL_SECONDS = 1.0
# Statuses in which every resource of the stack's current template is in place.
# The *_CLEANUP_IN_PROGRESS states only remove what the stack no longer uses.
USABLE = {
    "CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE",
    "IMPORT_ROLLBACK_COMPLETE", "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
    "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS",
}
REFUSED_CREDENTIALS = {
    "ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId",
    "UnrecognizedClientException", "SignatureDoesNotMatch",
}
NEEDED_OUTPUTS = ("TableName", "AggregatorName")
NEEDED_PARAMETERS = ("AdaptiveLimits", "SnapshotWindows", "SnapshotTtlDays", "Namespaces")


class CannotRun(Exception):
    """The test could not run: says why and what to do."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        self.print_usage(sys.stderr)
        print(f"smoke: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse_args(argv: list) -> argparse.Namespace:
    parser = Parser(
        prog="scripts/smoke.sh",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", "--name", required=True, metavar="STACK", help="the stack deployed from template.yaml")
    parser.add_argument("--region", help="its AWS region (default: the AWS environment's)")
    parser.add_argument("--endpoint-url", metavar="URL", help="send every AWS call here (moto, LocalStack)")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=180, metavar="SECONDS",
        help="how long to wait for what the stack writes (default: 180)",
    )
    parser.add_argument(
        "--namespace", metavar="NAME",
        help="the namespace to test in (default: 'default' if the stack registers it, else its first)",
    )
    parser.add_argument(
        "--zae-limits", metavar="PATH",
        help="the zae-limits binary (default: on PATH, else target/release or target/debug here)",
    )
    return parser.parse_args(argv)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds")
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text}: give more than 0 and at most 3600 seconds")
    return value


def say(line: str) -> None:
    print(line, flush=True)


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the stack ---------------------------------------------------------------


def describe_stack(args: argparse.Namespace) -> dict:
    import boto3
    import botocore.exceptions as bx

    # botocore reads AWS_DEFAULT_REGION; AWS_REGION is the other SDKs' (zae-limits').
    session = boto3.Session(region_name=args.region or os.environ.get("AWS_REGION") or None)
    region = session.region_name
    if not region:
        raise CannotRun("no AWS region: pass --region, or set AWS_REGION or a profile's region")
    try:
        credentials = session.get_credentials()
    except bx.BotoCoreError as e:
        raise CannotRun(f"AWS credentials could not be loaded: {e}")
    if credentials is None:
        raise CannotRun(
            "no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run where a role is attached"
        )
    cfn = session.client("cloudformation", endpoint_url=args.endpoint_url)
    try:
        stacks = cfn.describe_stacks(StackName=args.name)["Stacks"]
    except bx.ClientError as e:
        code, message = e.response["Error"].get("Code", ""), e.response["Error"].get("Message", "")
        if code == "ValidationError" and "does not exist" in message:
            raise CannotRun(f"stack '{args.name}' does not exist in {region} (check --name and --region)")
        if code in REFUSED_CREDENTIALS:
            raise CannotRun(f"AWS refused the credentials: {code}: {message}")
        raise CannotRun(f"CloudFormation refused DescribeStacks for '{args.name}': {code}: {message}")
    except bx.NoCredentialsError:
        raise CannotRun("no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError) as e:
        raise CannotRun(f"cannot reach CloudFormation: {e}")
    except bx.BotoCoreError as e:
        raise CannotRun(f"DescribeStacks for '{args.name}' failed: {e}")
    return read_stack(stacks[0], args.name, region)


def read_stack(stack: dict, name: str, region: str) -> dict:
    """What the test needs of a DescribeStacks entry, or why it cannot run."""
    # The status first: a stack still being made (or rolled back) has no
    # outputs yet, and is not "not ours".
    status = stack["StackStatus"]
    if status not in USABLE:
        if status.endswith("_IN_PROGRESS"):
            raise CannotRun(f"stack '{name}' is {status}: run the smoke test once it is done")
        raise CannotRun(f"stack '{name}' is {status}: its resources are not all in place")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ResolvedValue", p.get("ParameterValue", "")) for p in stack.get("Parameters", [])}
    missing = [f"output {o}" for o in NEEDED_OUTPUTS if o not in outputs]
    missing += [f"parameter {p}" for p in NEEDED_PARAMETERS if p not in parameters]
    if missing:
        if "EnableAggregator" in parameters or "AggregatorFunctionName" in outputs:
            raise CannotRun(
                f"stack '{name}' is the zae-limiter Python library's stack, not one of this "
                "repository's template.yaml: run the smoke test on the stack attached to its table"
            )
        raise CannotRun(
            f"stack '{name}' is not one of this repository's template.yaml: it has no "
            + ", ".join(missing)
        )
    return {"region": region, "status": status, "outputs": outputs, "parameters": parameters}


def pick_namespace(args: argparse.Namespace, parameters: dict) -> str:
    registered = [n.strip() for n in parameters["Namespaces"].split(",") if n.strip()]
    if args.namespace:
        return args.namespace
    return "default" if "default" in registered or not registered else registered[0]


# -- the controller's tick, through zae-limits ----------------------------------


def find_zae_limits(args: argparse.Namespace) -> str:
    if args.zae_limits:
        if not os.access(args.zae_limits, os.X_OK):
            raise CannotRun(f"--zae-limits {args.zae_limits} is not an executable file")
        return args.zae_limits
    found = shutil.which("zae-limits")
    if found:
        return found
    for build in ("release", "debug"):
        path = os.path.join(ROOT, "target", build, "zae-limits")
        if os.access(path, os.X_OK):
            return path
    raise CannotRun(
        "AdaptiveLimits is enabled, and the controller's tick is read with zae-limits, which is not "
        "on PATH nor built here: cargo install --locked --path limits-cli --bin zae-limits "
        "(or pass --zae-limits PATH)"
    )


class TickReader:
    """`zae-limits adaptive utilization --json`: its `ticked_at` is the
    controller's last tick of the table (epoch ms, 0 for never)."""

    def __init__(self, binary: str, table: str, namespace: str, region: str, endpoint: str | None) -> None:
        self.argv = [binary, "adaptive", "utilization", "-t", table, "-N", namespace, "--json", "--region", region]
        if endpoint:
            self.argv += ["--endpoint-url", endpoint]

    def read(self, seconds: float = 60) -> int:
        # Bounded by what is left of --timeout (at least a second).
        run = subprocess.run(self.argv, capture_output=True, text=True, timeout=max(1.0, seconds))
        if run.returncode != 0:
            lines = (run.stderr.strip() or run.stdout.strip()).splitlines()
            raise RuntimeError(f"exit {run.returncode}: {lines[-1] if lines else 'no message'}")
        return int(json.loads(run.stdout)["ticked_at"])


# -- the client's side -------------------------------------------------------


async def connect(table: str, namespace: str, region: str, endpoint: str | None):
    from zae_limiter import RateLimiter, Repository
    from zae_limiter.exceptions import (
        InfrastructureNotFoundError,
        NamespaceNotFoundError,
        VersionMismatchError,
    )

    try:
        try:
            # connect, not open: it never creates a table, a namespace or a stack.
            repo = await Repository.connect(namespace, stack=table, region=region, endpoint_url=endpoint)
        except Exception:
            # The client leaves its HTTP session open when connect fails; its
            # warning at exit would bury the reason.
            logging.getLogger("asyncio").setLevel(logging.CRITICAL)
            raise
    except InfrastructureNotFoundError:
        raise CannotRun(f"table '{table}' is missing or has no version record (the stack's TableInit writes it)")
    except NamespaceNotFoundError:
        raise CannotRun(
            f"namespace '{namespace}' is not registered in table '{table}': pick one of the stack's "
            "Namespaces parameter with --namespace"
        )
    except VersionMismatchError as e:
        raise CannotRun(f"the 0.17.0 client refuses table '{table}': {e}")
    except Exception as e:  # credentials refused, network: the client's own words
        raise CannotRun(f"the 0.17.0 client could not open table '{table}': {type(e).__name__}: {e}")
    return repo, RateLimiter(repository=repo)


def snapshot_totals(snapshots: list, window: str) -> tuple:
    """The counters of every snapshot of one window type, summed (a run
    across an hour's end has two hourly snapshots)."""
    counters, overdrawn, windows = {}, {}, []
    for s in snapshots:
        if s.window_type != window:
            continue
        windows.append(s.window_start)
        for name, value in (s.counters or {}).items():
            counters[name] = counters.get(name, 0) + value
        for name, value in (getattr(s, "overdrawn", None) or {}).items():
            overdrawn[name] = overdrawn.get(name, 0) + value
    return counters, overdrawn, windows


async def smoke(args: argparse.Namespace, stack: dict) -> int:
    started = time.monotonic()
    out, params = stack["outputs"], stack["parameters"]
    table, aggregator = out["TableName"], out["AggregatorName"]
    adaptive = params["AdaptiveLimits"] == "enabled"
    window = params["SnapshotWindows"].split(",")[0]
    namespace = pick_namespace(args, params)
    say(f"stack {args.name} ({stack['status']}, {stack['region']}): table {table}, aggregator {aggregator}")
    if stack["status"] == "UPDATE_ROLLBACK_COMPLETE":
        say("  note: the stack's last update was rolled back: this tests the version before it")
    say(f"  AdaptiveLimits={params['AdaptiveLimits']}, SnapshotWindows={params['SnapshotWindows']}, namespace {namespace}")

    ticks = None
    if adaptive:
        ticks = TickReader(find_zae_limits(args), table, namespace, stack["region"], args.endpoint_url)
    repo, limiter = await connect(table, namespace, stack["region"], args.endpoint_url)
    tick_before = 0
    if adaptive:
        try:
            tick_before = ticks.read()
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
            await repo.close()
            raise CannotRun(f"zae-limits could not read the controller's tick: {e}")
        last = utc(tick_before) if tick_before else "never"
        say(f"  controller's last tick before the test: {last}")
    else:
        say("  controller tick: not checked (AdaptiveLimits=disabled: the stack schedules no tick)")
    entity = f"zae-smoke-{datetime.now(timezone.utc):%Y%m%d%H%M%S}-{secrets.token_hex(3)}"
    seen = {"snapshot": False, "overdraw": False, "tick": not adaptive}
    try:
        try:
            await drive(limiter, entity)
        except Exception as e:  # access denied, throttling: the client's own words
            raise CannotRun(f"the client's writes to table '{table}' failed: {type(e).__name__}: {e}")
        say(f"waiting up to {args.timeout:g} s for the stack's aggregator{' and controller' if adaptive else ''}:")
        await wait_for(args, limiter, entity, window, ticks, tick_before, seen, started)
    finally:
        cleaned = await clean_up(limiter, repo, entity, seen, params)
    seen["cleanup"] = cleaned
    missing = [name for name, ok in seen.items() if not ok]
    if not missing:
        say(f"PASSED in {time.monotonic() - started:.1f} s")
        return EXIT_PASSED
    words = {
        "snapshot": "the usage snapshot", "overdraw": "the limit_overdrawn event", "tick": "a controller tick",
        "cleanup": "the cleanup of the throwaway entity",
    }
    say(f"FAILED: missing {', '.join(words[m] for m in missing)} (after {time.monotonic() - started:.1f} s)")
    hints = {
        "snapshot": f"the aggregator {aggregator} did not count the requests: check its stream mapping is Enabled "
        f"(aws lambda list-event-source-mappings --function-name {aggregator}), its log group "
        f"/aws/lambda/{aggregator} and the iterator-age and errors alarms",
        "overdraw": f"the aggregator {aggregator} wrote no overdraw event: the same checks as for the snapshot",
        "tick": f"the controller did not tick: check its schedule (the stack's EventBridge rule AggregatorAdaptiveTick) is ENABLED "
        f"and the function's errors; it ticks once a minute, so a timeout under 75 s can miss it. An aggregator "
        f"older than 0.8.0 records a tick only when a namespace declares adaptive limits",
        "cleanup": f"delete the entity (named above) with the client's delete_entity, from credentials allowed "
        f"to write the table (the stack's <stack>-full policy)",
    }
    for m in missing:
        say(f"  {words[m]}: {hints[m]}")
    return EXIT_MISSING


async def drive(limiter, entity: str) -> None:
    from zae_limiter import Limit

    await limiter.create_entity(entity, name="scripts/smoke.sh (deleted at the end)")
    await limiter.set_limits(
        entity,
        [Limit.per_minute("rpm", 1000), Limit.per_day("tpm", SOFT_TPM, soft=True)],
        resource=RESOURCE,
    )
    say(f"created entity {entity}: resource {RESOURCE}, soft tpm {SOFT_TPM} a day, hard rpm 1000 a minute")
    flagged = []
    for i in range(1, REQUESTS + 1):
        async with limiter.acquire(
            entity_id=entity, resource=RESOURCE, consume={"rpm": 1, "tpm": REQUEST_TPM}
        ) as lease:
            if "tpm" in lease.overdrawn:
                flagged.append(str(i))
    say(
        f"drove {REQUESTS} requests of {REQUEST_TPM} tpm ({REQUESTS * REQUEST_TPM} against {SOFT_TPM}): "
        f"all admitted; the client saw tpm overdrawn on request(s) {', '.join(flagged) or 'none'}"
    )


async def bounded(read, deadline: float, what: str):
    """A read of the client's within what is left of --timeout (at least a
    second). A read that fails or does not answer means the test cannot
    tell what the stack wrote: it cannot run, which is not "missing"."""
    try:
        return await asyncio.wait_for(read, timeout=max(1.0, deadline - time.monotonic()))
    except asyncio.TimeoutError:
        raise CannotRun(f"reading the entity's {what} did not answer within --timeout")
    except Exception as e:  # access denied, throttling: the client's own words
        raise CannotRun(f"reading the entity's {what} failed: {type(e).__name__}: {e}")


async def wait_for(args, limiter, entity, window, ticks, tick_before, seen, started) -> None:
    deadline = started + args.timeout
    expected = {"rpm": REQUESTS, "tpm": REQUESTS * REQUEST_TPM}
    last_counted, tick_error = None, None
    while True:
        elapsed = f"[{time.monotonic() - started:5.1f} s]"
        if not seen["snapshot"]:
            snapshots, _ = await bounded(
                limiter.get_usage_snapshots(entity_id=entity, resource=RESOURCE), deadline, "usage snapshots"
            )
            counters, overdrawn, windows = snapshot_totals(snapshots, window)
            last_counted = (counters, overdrawn, windows)
            if all(counters.get(k) == v for k, v in expected.items()):
                seen["snapshot"] = True
                say(
                    f"{elapsed} usage snapshot ({window}, from {', '.join(windows)}): {counters['rpm']} requests, "
                    f"{counters['tpm']} tpm, {overdrawn.get('tpm', 0)} of them past the soft limit"
                )
        if not seen["overdraw"]:
            events = await bounded(limiter.get_audit_events(entity), deadline, "audit events")
            overdraws = [e for e in events if e.action == "limit_overdrawn" and (e.details or {}).get("limit") == "tpm"]
            if overdraws:
                seen["overdraw"] = True
                d = overdraws[-1].details
                say(
                    f"{elapsed} overdraw event: limit_overdrawn on tpm at {overdraws[-1].timestamp}, "
                    f"balance {d.get('balance')} of capacity {d.get('capacity')} (by {overdraws[-1].principal})"
                )
        if not seen["tick"]:
            try:
                at = ticks.read(deadline - time.monotonic())
                tick_error = None
                if at > tick_before:
                    seen["tick"] = True
                    say(f"{elapsed} controller tick: at {utc(at)}")
            except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
                if str(e) != str(tick_error):
                    say(f"{elapsed} zae-limits could not read the tick: {e}")
                tick_error = e
        if all(seen.values()) or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    elapsed = f"[{time.monotonic() - started:5.1f} s]"
    if not seen["snapshot"]:
        counters, _, windows = last_counted
        got = f"its {window} snapshots count {counters}" if windows else "no snapshot"
        say(f"{elapsed} usage snapshot: MISSING ({got}; expected {expected})")
    if not seen["overdraw"]:
        say(f"{elapsed} overdraw event: MISSING (no limit_overdrawn on tpm for {entity})")
    if not seen["tick"]:
        since = f"the last, at {utc(tick_before)}" if tick_before else "none ever recorded"
        say(f"{elapsed} controller tick: MISSING (no tick since the start; {since})")


async def clean_up(limiter, repo, entity, seen, params) -> bool:
    """Deletes the throwaway entity; True when nothing of it the client can
    delete is left."""
    try:
        await limiter.delete_limits(entity, resource=RESOURCE)
        await limiter.delete_entity(entity)
        left = []
        if await limiter.get_entity(entity) is not None:
            left.append("the entity")
        if await limiter.get_limits(entity, RESOURCE):
            left.append("its limits")
        if await repo.get_buckets(entity, RESOURCE):
            left.append("its buckets")
        if (await limiter.get_usage_snapshots(entity_id=entity, resource=RESOURCE))[0]:
            left.append("its usage snapshots")
        events = await limiter.get_audit_events(entity)
    except Exception as e:
        say(f"cleanup FAILED: {type(e).__name__}: {e}; delete entity {entity} with the client's delete_entity")
        return False
    finally:
        await repo.close()
    if left:
        say(f"cleanup: {', '.join(left)} of {entity} still there after the delete")
    else:
        say(f"cleaned up: entity {entity}, its limits, buckets and usage snapshots are deleted")
    say(
        f"left in place: its {len(events)} audit events (the client cannot delete them; "
        "they expire with the table's audit retention, 90 days unless configured)"
    )
    if not (seen["snapshot"] and seen["overdraw"]):
        say(
            "  an aggregator that catches up later still writes this entity's snapshot and overdraw event; "
            f"the snapshot expires after SnapshotTtlDays ({params['SnapshotTtlDays']} days)"
        )
    return not left


def main(argv: list) -> int:
    args = parse_args(argv)
    try:
        stack = describe_stack(args)
        return asyncio.run(smoke(args, stack))
    except CannotRun as e:
        print(f"smoke: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
