//! The write path against an in-memory table that evaluates the expressions
//! the aggregator sends (the shapes `expressions` builds), with injected faults.
use super::*;
use crate::store::{AuditPut, SnapshotWrite, Val};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Default)]
struct MemTable {
    items: Mutex<HashMap<(String, String), BTreeMap<String, Val>>>,
    calls: AtomicUsize,
    /// Calls (1-based) that fail: before applying (throttled) or after (5xx).
    fail_before: Vec<usize>,
    fail_after: Vec<usize>,
    fail_all_writes: bool,
}

fn num(v: Option<&Val>) -> i128 {
    match v {
        Some(Val::N(n)) => n.parse().unwrap(),
        _ => 0,
    }
}

impl MemTable {
    fn fault(&self, key: &str, applied: bool) -> Option<StoreError> {
        let n = self.calls.load(Ordering::SeqCst);
        let hit = if applied {
            self.fail_after.contains(&n)
        } else {
            self.fail_before.contains(&n) || self.fail_all_writes
        };
        hit.then(|| StoreError::Retryable {
            operation: "UpdateItem",
            key: key.into(),
            message: "injected".into(),
        })
    }

    fn snapshot(&self, pk: &str, sk: &str) -> BTreeMap<String, Val> {
        self.items
            .lock()
            .unwrap()
            .get(&(pk.into(), sk.into()))
            .cloned()
            .unwrap_or_default()
    }
}

impl Table for MemTable {
    async fn update_snapshot(&self, w: &SnapshotWrite) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(e) = self.fault(&w.pk, false) {
            return Err(e);
        }
        let mut items = self.items.lock().unwrap();
        let item = items.entry((w.pk.clone(), w.sk.clone())).or_default();
        let name = |alias: &str| w.names[alias].clone();
        let value = |alias: &str| w.values[alias].clone();
        for clause in w.condition.split(" AND ") {
            let clause = clause.trim_matches(|c| c == '(' || c == ')');
            let ok = if let Some((lhs, rhs)) = clause.split_once(" OR ") {
                let attr = name(
                    lhs.trim_start_matches("attribute_not_exists(")
                        .trim_end_matches(')'),
                );
                let (_, placeholder) = rhs.split_once(" < ").unwrap();
                match (item.get(&attr), value(placeholder)) {
                    (None, _) => true,
                    (Some(Val::S(have)), Val::S(first)) => *have < first,
                    _ => false,
                }
            } else if let Some(alias) = clause.strip_prefix("attribute_not_exists(") {
                !item.contains_key(&name(alias.trim_end_matches(')')))
            } else {
                let (alias, placeholder) = clause.split_once(" = ").unwrap();
                item.get(&name(alias)) == Some(&value(placeholder))
            };
            if !ok {
                return Err(StoreError::ConditionFailed {
                    operation: "UpdateItem",
                    key: w.pk.clone(),
                });
            }
        }
        let (set, add) = w
            .update
            .strip_prefix("SET ")
            .unwrap()
            .split_once(" ADD ")
            .unwrap();
        for (i, part) in set.split(", #").enumerate() {
            let part = if i == 0 {
                part.to_owned()
            } else {
                format!("#{part}")
            };
            let (alias, rhs) = part.split_once(" = ").unwrap();
            if rhs.starts_with("if_not_exists(") {
                let placeholder = rhs.rsplit_once(", ").unwrap().1.trim_end_matches(')');
                item.entry(name(alias))
                    .or_insert_with(|| value(placeholder));
            } else {
                item.insert(name(alias), value(rhs));
            }
        }
        for part in add.split(", ") {
            let (alias, placeholder) = part.split_once(' ').unwrap();
            let total = num(item.get(&name(alias))) + num(Some(&value(placeholder)));
            item.insert(name(alias), Val::n(total));
        }
        drop(items);
        match self.fault(&w.pk, true) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn read_strings(
        &self,
        pk: &str,
        sk: &str,
        attributes: &[String],
    ) -> Result<BTreeMap<String, String>, StoreError> {
        Ok(self
            .snapshot(pk, sk)
            .into_iter()
            .filter(|(k, _)| attributes.contains(k))
            .filter_map(|(k, v)| match v {
                Val::S(s) => Some((k, s)),
                _ => None,
            })
            .collect())
    }

    async fn put_audit_event(&self, put: &AuditPut) -> Result<bool, StoreError> {
        let mut items = self.items.lock().unwrap();
        let key = (put.pk.clone(), put.sk.clone());
        if items.contains_key(&key) {
            return Ok(false);
        }
        items.insert(key, put.item.clone());
        Ok(true)
    }

    async fn audit_retention_days(&self, _: &str) -> Result<Option<i64>, StoreError> {
        Ok(Some(30))
    }
}

fn settings() -> Settings {
    Settings {
        windows: vec![Window::Hourly, Window::Daily],
        snapshot_ttl_days: 90,
        concurrency: 4,
        retry: RetryPolicy {
            max_attempts: 3,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(2),
        },
    }
}

/// Records for two entities' buckets; `b` debits 1 token per record, soft, into debt at the 3rd.
fn records() -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..6i64 {
        for entity in ["a", "b"] {
            let pk = format!("ns/BUCKET#{entity}#r#0");
            let image = |tc: i64| {
                json!({"PK": {"S": pk}, "SK": {"S": "#STATE"}, "b_tpm_tc": {"N": (tc * 1000).to_string()},
                       "b_tpm_tk": {"N": ((2 - tc) * 1000).to_string()}, "b_tpm_soft": {"N": "1"}})
            };
            out.push(
                json!({"eventName": "MODIFY", "dynamodb": {
                    "ApproximateCreationDateTime": 1_795_970_136 + i,
                    "Keys": {"PK": {"S": pk}, "SK": {"S": "#STATE"}},
                    "SequenceNumber": (1000 + out.len()).to_string(),
                    "NewImage": image(i + 1), "OldImage": image(i)}})
                .to_string(),
            );
        }
    }
    out
}

fn usage(table: &MemTable, entity: &str) -> (i128, i128, i128) {
    let item = table.snapshot(
        &format!("ns/ENTITY#{entity}"),
        "#USAGE#r#2026-11-29T16:00:00Z",
    );
    (
        num(item.get("tpm")),
        num(item.get("tpm#od")),
        num(item.get("total_events")),
    )
}

#[tokio::test]
async fn a_batch_delivered_twice_changes_no_total_and_writes_no_second_event() {
    let agg = Aggregator::new(MemTable::default(), settings());
    let first = agg.process(&records(), "p", 0, None).await;
    assert!(first.first_failure.is_none());
    assert_eq!(first.stats.snapshot_writes, 4);
    assert_eq!(first.metrics.len(), 2, "a and b each go into debt once");
    let second = agg.process(&records(), "p", 0, None).await;
    assert_eq!(
        (
            second.stats.snapshot_writes,
            second.stats.snapshots_already_applied
        ),
        (0, 4)
    );
    assert_eq!(second.stats.audit_events_existing, 2);
    assert!(
        second.metrics.is_empty(),
        "no metric for a transition already recorded"
    );
    assert_eq!(usage(agg.table(), "a"), (6, 4, 6));
}

#[tokio::test]
async fn a_failed_item_is_reported_from_its_earliest_record_and_the_redelivery_is_exact() {
    let table = MemTable {
        fail_all_writes: false,
        fail_before: vec![1, 2, 3],
        ..Default::default()
    };
    let agg = Aggregator::new(
        table,
        Settings {
            concurrency: 1,
            ..settings()
        },
    );
    let all = records();
    let outcome = agg.process(&all, "p", 0, None).await;
    let failed = outcome
        .first_failure
        .expect("the first item failed three times");
    assert_eq!(outcome.stats.failed_writes, 1);
    // Lambda redelivers from the failed record on.
    let from = all
        .iter()
        .position(|r| r.contains(&format!("\"{}\"", failed.as_stream())))
        .unwrap();
    let retry = agg.process(&all[from..], "p", 0, None).await;
    assert!(retry.first_failure.is_none());
    assert_eq!(usage(agg.table(), "a"), (6, 4, 6));
    assert_eq!(usage(agg.table(), "b"), (6, 4, 6));
}

#[tokio::test]
async fn a_write_that_succeeded_but_reported_a_5xx_is_not_applied_twice() {
    let table = MemTable {
        fail_after: vec![1, 4],
        ..Default::default()
    };
    let agg = Aggregator::new(
        table,
        Settings {
            concurrency: 1,
            ..settings()
        },
    );
    let outcome = agg.process(&records(), "p", 0, None).await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(usage(agg.table(), "a"), (6, 4, 6));
    assert_eq!(usage(agg.table(), "b"), (6, 4, 6));
}

#[tokio::test]
async fn retrying_stops_at_the_deadline() {
    let table = MemTable {
        fail_all_writes: true,
        ..Default::default()
    };
    let agg = Aggregator::new(
        table,
        Settings {
            retry: RetryPolicy {
                max_attempts: 20,
                ..settings().retry
            },
            ..settings()
        },
    );
    let outcome = agg.process(&records(), "p", 0, Some(Instant::now())).await;
    assert_eq!(outcome.first_failure.unwrap().as_stream(), "1000");
    assert_eq!(
        agg.table().calls.load(Ordering::SeqCst),
        4,
        "one attempt per item, none after the deadline"
    );
}

#[tokio::test]
async fn skipped_records_are_counted_in_a_metric() {
    let agg = Aggregator::new(MemTable::default(), settings());
    let mut batch = records();
    batch.insert(3, "{\"eventName\":\"MODIFY\"}".into());
    let outcome = agg.process(&batch, "p", 7, None).await;
    assert_eq!(outcome.stats.skipped, 1);
    assert!(outcome.metrics.contains(&MetricEvent::RecordsSkipped {
        at_ms: 7000,
        count: 1
    }));
    assert_eq!(usage(agg.table(), "a").0, 6);
}
