"""Prints what the demo produced: snapshots, overdraw counters, audit events, metrics."""
import json
import sys

driven, read = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
emf = [json.loads(line) for line in open(sys.argv[3]) if line.strip()]
summary = next((json.loads(l)["poll_summary"] for l in open(sys.argv[4]) if '"poll_summary"' in l), {})

print(f"\naggregator: {summary}")
print("\nusage snapshots (read with RateLimiter.get_usage_snapshots):")
print(f"  {'entity':8} {'window':8} {'window start':22} {'counters':28} {'overdrawn (#od)':18} events")
for entity, data in read["entities"].items():
    for s in data["snapshots"]:
        print(f"  {entity:8} {s['window']:8} {s['window_start']:22} {json.dumps(s['counters']):28} "
              f"{json.dumps(s['overdrawn']):18} {s['total_events']}")
    print(f"  {'':8} driver consumed: {json.dumps(driven['consumed'][entity])}")
print("\nsoft-limit audit events (RateLimiter.get_audit_events):")
for entity, data in read["entities"].items():
    for e in reversed(data["audit_events"]):
        if e["action"] in ("limit_overdrawn", "limit_recovered"):
            d = e["details"]
            print(f"  {e['timestamp']} {entity:8} {e['action']:16} {d['limit']} balance={d['balance']} "
                  f"capacity={d.get('capacity')} shard={d['shard']} id={e['event_id']}")
print("\nCloudWatch metrics (EMF documents on the aggregator's stdout):")
for doc in emf:
    name = next(m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"])
    props = " ".join(f"{k}={doc[k]}" for k in ("Resource", "Limit", "EntityId") if k in doc)
    print(f"  {doc['_aws']['CloudWatchMetrics'][0]['Namespace']}/{name} = {doc[name]:g} {props}".rstrip())
