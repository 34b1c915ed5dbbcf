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

/// An in-memory bucket. S3's own rules are not modelled by moto, so they are
/// injected here: `fail` answers every put with a throttle, `deny` with an
/// access denied, and a key over S3's 1,024 bytes is refused as S3 refuses it.
#[derive(Default)]
struct Bucket {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    fail: bool,
    deny: bool,
}

impl Archive for Bucket {
    fn put<'a>(&'a self, key: &'a str, body: Vec<u8>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let refuse = |message: &str| (key.into(), message.to_owned());
            if self.fail {
                let (key, message) = refuse("SlowDown (injected)");
                return Err(StoreError::Retryable {
                    operation: "PutObject",
                    key,
                    message,
                });
            }
            if self.deny {
                let (key, message) = refuse("AccessDenied (injected)");
                return Err(StoreError::Fatal {
                    operation: "PutObject",
                    key,
                    message,
                });
            }
            if key.len() > 1024 {
                let (key, message) = refuse("KeyTooLongError (injected)");
                return Err(StoreError::Rejected {
                    operation: "PutObject",
                    key,
                    message,
                });
            }
            self.objects.lock().unwrap().insert(key.to_owned(), body);
            Ok(())
        })
    }
}

fn removal(seq: u64, ns: &str, day: &str, ttl: bool) -> String {
    removal_of(seq, &format!("{ns}/AUDIT#e"), day, ttl)
}

/// The removal of an item at partition key `pk` with an `#AUDIT#` sort key.
fn removal_of(seq: u64, pk: &str, day: &str, ttl: bool) -> String {
    let mut r = json!({"eventID": format!("ev-{seq}"), "eventName": "REMOVE", "dynamodb": {
        "ApproximateCreationDateTime": 1_795_970_136.0, "SequenceNumber": seq.to_string(),
        "Keys": {"PK": {"S": pk}, "SK": {"S": format!("#AUDIT#{seq}")}},
        "OldImage": {"event_id": {"S": format!("id-{seq}")}, "action": {"S": "limits_set"},
                     "timestamp": {"S": format!("{day}T10:00:00Z")}, "details": {"M": {}}}}});
    if ttl {
        r["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
    }
    r.to_string()
}

fn aggregator(bucket: Arc<Bucket>) -> Aggregator<MemoryStore> {
    let settings = settings();
    let store = MemoryStore::new();
    for namespace in ["ns1", "ns2", "victim"] {
        store.register_namespace(namespace);
    }
    Aggregator::new(store, settings).with_archive(bucket)
}

fn settings() -> Settings {
    let settings = Settings::for_tests(&[Window::Hourly], 2, true);
    Settings {
        retry: RetryPolicy {
            cap: std::time::Duration::from_millis(1),
            ..settings.retry
        },
        ..settings
    }
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

fn skipped_metric(outcome: &crate::write::BatchOutcome) -> Option<u64> {
    outcome.metrics.iter().find_map(|m| match m {
        crate::metrics::MetricEvent::Count {
            name: crate::metrics::ARCHIVE_SKIPPED,
            count,
            ..
        } => Some(*count),
        _ => None,
    })
}

/// Keys a client under the acquire policy can write (`*/BUCKET#*`), with an
/// `#AUDIT#` sort key and removed: a forged line in another namespace, one
/// in a namespace the table does not hold, and a partition key long enough
/// to push the object key past S3's 1,024 bytes. None becomes a line; each
/// is counted as skipped; the shard is not stalled; the table's own audit
/// removal beside them is archived.
#[tokio::test]
async fn removals_that_are_not_the_tables_own_audit_items_are_skipped_not_archived() {
    let long = format!("victim/BUCKET#{}#r#0", "e".repeat(950));
    let records = [
        removal_of(1, "victim/AUDIT#x/BUCKET#y", "2026-11-29", true),
        removal_of(2, "ghost/BUCKET#e#r#0", "2026-11-29", true),
        removal_of(3, &long, "2026-11-29", true),
        removal_of(
            4,
            &format!("victim/AUDIT#{}", "e".repeat(950)),
            "2026-11-29",
            true,
        ),
        removal_of(5, "victim/AUDIT#a#b", "2026-11-29", true),
        removal(6, "ns1", "2026-11-29", true),
    ];
    let bucket = Arc::new(Bucket::default());
    let outcome = aggregator(bucket.clone())
        .process(&records, "p", 0, None)
        .await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(outcome.stats.archive_skipped, 5, "{:?}", outcome.stats);
    assert_eq!(outcome.stats.skipped, 0, "not malformed records");
    assert_eq!(skipped_metric(&outcome), Some(5));
    let objects = bucket.objects.lock().unwrap().clone();
    assert_eq!(objects.len(), 1, "{:?}", objects.keys());
    let (key, body) = objects.iter().next().unwrap();
    assert!(key.starts_with("audit/namespace=ns1/"), "{key}");
    assert_eq!(lines(body).len(), 1);
}

/// An audit partition of a namespace id the registry does not hold (written
/// by someone with more than the acquire policy) is skipped and counted.
#[tokio::test]
async fn a_removal_in_a_namespace_the_registry_does_not_hold_is_skipped() {
    let records = [
        removal(1, "ghost", "2026-11-29", true),
        removal(2, "ns2", "2026-11-29", true),
    ];
    let bucket = Arc::new(Bucket::default());
    let outcome = aggregator(bucket.clone())
        .process(&records, "p", 0, None)
        .await;
    assert!(outcome.first_failure.is_none());
    assert_eq!(outcome.stats.archive_skipped, 1);
    assert_eq!(outcome.stats.events_archived, 1);
    let keys: Vec<String> = bucket.objects.lock().unwrap().keys().cloned().collect();
    assert!(
        keys.iter().all(|k| k.starts_with("audit/namespace=ns2/")),
        "{keys:?}"
    );
}

/// A registry that cannot be read archives nothing unverified: the batch
/// fails from that namespace's earliest removal, for a retry.
#[tokio::test]
async fn a_registry_that_cannot_be_read_fails_the_batch_and_archives_nothing_unchecked() {
    use zae_test_support::faults::{Call, Faults, Injected};
    struct RegistryDown;
    impl Faults for RegistryDown {
        fn before(&self, call: &Call<'_>) -> Option<StoreError> {
            matches!(call, Call::Get { sk, .. } if sk.starts_with("#NSID#")).then(|| {
                StoreError::Retryable {
                    operation: "GetItem",
                    key: "registry".into(),
                    message: "throttled (injected)".into(),
                }
            })
        }
    }
    let store = Injected {
        inner: MemoryStore::new(),
        faults: RegistryDown,
    };
    store.inner.register_namespace("ns1");
    let bucket = Arc::new(Bucket::default());
    let agg = Aggregator::new(store, settings()).with_archive(bucket.clone());
    let records = [
        removal(4, "ns1", "2026-11-29", true),
        removal(3, "ns1", "2026-11-29", true),
    ];
    let outcome = agg.process(&records, "p", 0, None).await;
    assert_eq!(
        outcome
            .first_failure
            .map(|s| s.as_stream().to_owned())
            .as_deref(),
        Some("3")
    );
    assert!(bucket.objects.lock().unwrap().is_empty());
    assert_eq!(outcome.stats.archive_skipped, 0, "not skipped: retried");
}

/// An object S3 refuses for good (here its key, injected: moto takes keys
/// of any length) is skipped and counted; access denied is not "for good":
/// the items are gone from the table, so the batch fails for a retry.
#[tokio::test]
async fn an_object_s3_refuses_for_good_is_skipped_and_access_denied_fails_the_batch() {
    let records = [removal(9, "ns1", "2026-11-29", true)];
    let denied = Arc::new(Bucket {
        deny: true,
        ..Default::default()
    });
    let outcome = aggregator(denied).process(&records, "p", 0, None).await;
    assert!(outcome.first_failure.is_some());
    assert_eq!(outcome.stats.archive_skipped, 0);

    let refusing = Arc::new(Refusing);
    let outcome = Aggregator::new(registered(), settings())
        .with_archive(refusing)
        .process(&records, "p", 0, None)
        .await;
    assert!(outcome.first_failure.is_none(), "{:?}", outcome.errors);
    assert_eq!(outcome.stats.archive_skipped, 1);
    assert_eq!(skipped_metric(&outcome), Some(1));
}

fn registered() -> MemoryStore {
    let store = MemoryStore::new();
    store.register_namespace("ns1");
    store
}

/// A bucket that refuses every key as invalid.
struct Refusing;

impl Archive for Refusing {
    fn put<'a>(&'a self, key: &'a str, _: Vec<u8>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            Err(StoreError::Rejected {
                operation: "PutObject",
                key: key.into(),
                message: "InvalidURI (injected)".into(),
            })
        })
    }
}

/// Past the deadline, the items phase reports what it did not start from
/// its earliest record. Removed audit items count only where there is an
/// archive to write them to: without one, a batch of removals past the
/// deadline redelivered itself for nothing.
#[tokio::test]
async fn removals_past_the_deadline_redeliver_only_where_an_archive_waits_for_them() {
    let records = vec![
        removal(3, "ns1", "2026-11-29", true),
        removal(4, "ns2", "2026-11-29", true),
    ];
    let past = Some(std::time::Instant::now() - std::time::Duration::from_secs(1));
    let unarchived = Aggregator::new(MemoryStore::new(), settings());
    let outcome = unarchived.process(&records, "p", 0, past).await;
    assert_eq!(outcome.first_failure, None, "{:?}", outcome.errors);
    let archived = aggregator(Arc::new(Bucket::default()));
    let outcome = archived.process(&records, "p", 0, past).await;
    assert_eq!(
        outcome.first_failure.map(|f| f.as_stream().to_owned()),
        Some("3".to_owned())
    );
}
