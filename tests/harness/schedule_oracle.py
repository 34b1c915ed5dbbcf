"""The 0.17.0 client's own schedule code as an oracle for ours.

Reads JSON on stdin:
  {"schedules": [{"tz", "params": [{"cron", "scale"|"capacity"|...}],
                  "resets": [cron, ...], "base": [cp, ra, rp], "nows": [ms, ...]}],
   "raw": [compact, ...]}
For each schedule: whether the client accepts each cron, and when it accepts
all of them, its compact encodings and, at each instant, the parameters in
force, the latest reset edge and the next boundary, computed from its own
decode of its own encoding. For each raw string: whether the client's
decoders accept it as a parameter schedule and as a reset schedule.
Prints one JSON object.
"""
import json
import sys

from zae_limiter import schedule as s


def entry(spec: dict, tz: str) -> s.ScheduleEntry:
    fields = {k: v for k, v in spec.items() if k != "cron"}
    return s.ScheduleEntry(cron=spec["cron"], tz=tz, **fields)


def accepts(build) -> bool:
    try:
        build()
        return True
    except ValueError:
        return False


def run(sched: dict) -> dict:
    tz = sched["tz"]
    accepted = [accepts(lambda p=p: entry(p, tz)) for p in sched["params"]]
    accepted += [accepts(lambda c=c: s.ScheduleEntry.reset(c, tz)) for c in sched["resets"]]
    out = {"accepted": accepted}
    if not all(accepted):
        return out
    params = tuple(entry(p, tz) for p in sched["params"])
    resets = tuple(s.ScheduleEntry.reset(c, tz) for c in sched["resets"])
    compact, _ = s.encode(params)
    rcompact, _ = s.encode_reset(resets)
    out.update(sched=compact, rsched=rcompact)
    try:
        params, resets = s.decode(compact, tz), s.decode_reset(rcompact, tz)
    except ValueError:
        # The client cannot read back everything it encodes (an every-minute
        # reset encodes as a bare version marker).
        return out
    cp, ra, rp = sched["base"]
    out.update(evals=[
        [*s.effective_params(cp, ra, rp, params, now),
         s.prev_reset_edge(resets, now),
         s.next_boundary(params, resets, now_ms=now)]
        for now in sched["nows"]
    ])
    return out


def main() -> None:
    request = json.load(sys.stdin)
    raw = [[accepts(lambda c=c: s.decode(c, "UTC")), accepts(lambda c=c: s.decode_reset(c, "UTC"))]
           for c in request.get("raw", [])]
    print(json.dumps({"schedules": [run(x) for x in request["schedules"]], "raw": raw}))


if __name__ == "__main__":
    main()
