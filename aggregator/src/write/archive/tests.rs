//! The archive writer against an in-memory archive: one object per
//! namespace and day, the same key and bytes for the same records, and a
//! failing put failing the batch from its earliest record (nothing lost).

use super::*;
use crate::write::{RetryPolicy, Settings};
use serde_json::json;
use std::io::Read;
use std::sync::{Arc, Mutex};
use zae_table::Window;
use zae_test_support::memory::MemoryStore;

#[derive(Default)]
struct Bucket {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    fail: bool,
}

impl Archive for Bucket {
    fn put<'a>(&'a self, key: &'a str, body: Vec<u8>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            if self.fail {
                return Err(StoreError::Retryable {
                    operation: "PutObject",
                    key: key.into(),
                    message: "injected".into(),
                });
            }
            self.objects.lock().unwrap().insert(key.to_owned(), body);
            Ok(())
        })
    }
}

fn removal(seq: u64, ns: &str, day: &str, ttl: bool) -> String {
    let mut r = json!({"eventID": format!("ev-{seq}"), "eventName": "REMOVE", "dynamodb": {
        "ApproximateCreationDateTime": 1_795_970_136.0, "SequenceNumber": seq.to_string(),
        "Keys": {"PK": {"S": format!("{ns}/AUDIT#e")}, "SK": {"S": format!("#AUDIT#{seq}")}},
        "OldImage": {"event_id": {"S": format!("id-{seq}")}, "action": {"S": "limits_set"},
                     "timestamp": {"S": format!("{day}T10:00:00Z")}, "details": {"M": {}}}}});
    if ttl {
        r["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    }
    r.to_string()
}

fn aggregator(bucket: Arc<Bucket>) -> Aggregator<MemoryStore> {
    let settings = Settings {
        windows: vec![Window::Hourly],
        snapshot_ttl_days: 90,
        concurrency: 4,
        retry: RetryPolicy {
            max_attempts: 2,
            base: std::time::Duration::from_millis(1),
            cap: std::time::Duration::from_millis(1),
        },
        refill: true,
    };
    Aggregator::new(MemoryStore::new(), settings).with_archive(bucket)
}

fn lines(body: &[u8]) -> Vec<serde_json::Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(body)
        .read_to_string(&mut text)
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn removed_audit_items_land_one_object_per_namespace_and_day_and_again_at_the_same_key() {
    let records = [
        removal(3, "ns1", "2026-11-29", true),
        removal(1, "ns1", "2026-11-29", false),
        removal(2, "ns2", "2026-11-29", true),
        removal(4, "ns1", "2026-11-30", true),
    ];
    let bucket = Arc::new(Bucket::default());
    let outcome = aggregator(bucket.clone())
        .process(&records, "p", 0, None)
        .await;
    assert!(outcome.first_failure.is_none());
    assert_eq!(
        (outcome.stats.events_archived, outcome.stats.archive_objects),
        (4, 3)
    );
    let first = bucket.objects.lock().unwrap().clone();
    let (key, body) = first
        .iter()
        .find(|(k, _)| k.contains("namespace=ns1/year=2026/month=11/day=29/"))
        .unwrap();
    assert!(
        key.starts_with("audit/namespace=ns1/year=2026/month=11/day=29/1-"),
        "{key}"
    );
    let day = lines(body);
    assert_eq!(
        day.iter()
            .map(|l| l["event_id"].clone())
            .collect::<Vec<_>>(),
        [json!("id-1"), json!("id-3")]
    );
    assert_eq!(
        day.iter()
            .map(|l| l["removed_by_ttl"].clone())
            .collect::<Vec<_>>(),
        [json!(false), json!(true)]
    );
    // Redelivered: the same keys, the same bytes; nothing added.
    aggregator(bucket.clone())
        .process(&records, "p", 0, None)
        .await;
    assert_eq!(*bucket.objects.lock().unwrap(), first);
}

#[tokio::test]
async fn an_archive_that_keeps_failing_fails_the_batch_from_the_earliest_record_it_held() {
    let records = [
        removal(7, "ns1", "2026-11-29", true),
        removal(5, "ns1", "2026-11-29", true),
    ];
    let bucket = Arc::new(Bucket {
        fail: true,
        ..Default::default()
    });
    let outcome = aggregator(bucket).process(&records, "p", 0, None).await;
    assert_eq!(
        outcome
            .first_failure
            .map(|s| s.as_stream().to_owned())
            .as_deref(),
        Some("5")
    );
    assert_eq!(outcome.stats.events_archived, 0);
}
