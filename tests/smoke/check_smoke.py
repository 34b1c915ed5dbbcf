"""scripts/smoke.py's guards that moto cannot show (it has no stack states
but complete ones, no IAM and no slow reads), on stand-ins for the client
and DescribeStacks. The passing run and the run with the aggregator stopped
are aggregator/tests/integration/smoke.rs, on moto with the real client.

Each check names the guard; the script exits 1 on the first that fails.
"""
import asyncio
import contextlib
import io
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import smoke  # noqa: E402

OURS = {
    "Outputs": [{"OutputKey": k, "OutputValue": "x"} for k in smoke.NEEDED_OUTPUTS],
    "Parameters": [{"ParameterKey": k, "ParameterValue": "x"} for k in smoke.NEEDED_PARAMETERS],
}


def refused(call, says: str) -> None:
    try:
        call()
    except smoke.CannotRun as e:
        assert says in str(e), f"{says!r} not in {e}"
        return
    raise AssertionError(f"not refused: expected {says!r}")


def check_stack_status_comes_before_outputs() -> None:
    # A stack being made has no outputs yet: it is in progress, not foreign.
    refused(lambda: smoke.read_stack({"StackStatus": "CREATE_IN_PROGRESS"}, "s", "r"), "is CREATE_IN_PROGRESS: run the smoke test once it is done")
    refused(lambda: smoke.read_stack({"StackStatus": "ROLLBACK_COMPLETE"}, "s", "r"), "its resources are not all in place")
    for usable in ("UPDATE_COMPLETE_CLEANUP_IN_PROGRESS", "UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS"):
        assert smoke.read_stack(dict(OURS, StackStatus=usable), "s", "r")["status"] == usable
    refused(lambda: smoke.read_stack({"StackStatus": "CREATE_COMPLETE"}, "s", "r"), "is not one of this repository's template.yaml")


def check_a_read_that_fails_or_hangs_cannot_run() -> None:
    async def denied():
        raise PermissionError("AccessDeniedException")

    async def hangs():
        await asyncio.sleep(3600)

    refused(lambda: asyncio.run(smoke.bounded(denied(), 0, "audit events")), "reading the entity's audit events failed: PermissionError")
    started = smoke.time.monotonic()
    refused(lambda: asyncio.run(smoke.bounded(hangs(), started, "usage snapshots")), "did not answer within --timeout")
    assert smoke.time.monotonic() - started < 5, "a read past the deadline was waited for"


class Limiter:
    """The client's calls clean_up makes, failing or leaving what it is told."""

    def __init__(self, fail: bool = False, left: bool = False) -> None:
        self.fail, self.left = fail, left

    async def delete_limits(self, *_, **__):
        if self.fail:
            raise RuntimeError("ProvisionedThroughputExceededException")

    async def delete_entity(self, *_):
        pass

    async def get_entity(self, *_):
        return object() if self.left else None

    async def get_limits(self, *_):
        return []

    async def get_usage_snapshots(self, **_):
        return [], None

    async def get_audit_events(self, *_):
        return []


class Repo:
    def __init__(self) -> None:
        self.closed = False

    async def get_buckets(self, *_):
        return []

    async def close(self):
        self.closed = True


def check_a_cleanup_that_fails_or_leaves_the_entity_fails_the_test() -> None:
    seen = {"snapshot": True, "overdraw": True}
    params = {"SnapshotTtlDays": "90"}
    def clean(limiter) -> bool:
        repo = Repo()
        cleaned = asyncio.run(smoke.clean_up(limiter, repo, "e", seen, params))
        assert repo.closed, "the repository was not closed"
        return cleaned

    assert clean(Limiter()) is True
    # Each repository checked on its own: a failed cleanup closes its own too.
    assert clean(Limiter(fail=True)) is False
    assert clean(Limiter(left=True)) is False


def main() -> int:
    checks = [v for k, v in globals().items() if k.startswith("check_")]
    for check in checks:
        # The script's own lines (a stand-in's "cleanup FAILED") stay out of the log.
        with contextlib.redirect_stdout(io.StringIO()):
            check()
    print(f"smoke.py guards: {len(checks)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
