use super::*;
use crate::metrics::{MetricEvent, MetricsError};
use source::Page;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn parents_are_read_before_their_children() {
    let order = parent_first(vec![
        ShardInfo::open("c", Some("b")),
        ShardInfo::open("b", Some("a")),
        ShardInfo::open("a", None),
        ShardInfo::open("x", Some("gone")),
    ]);
    let ids: Vec<&str> = order.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 4);
    let pos = |id: &str| ids.iter().position(|i| *i == id).unwrap();
    assert!(pos("a") < pos("b") && pos("b") < pos("c"));
}

#[test]
fn checkpoints_round_trip_and_a_missing_file_is_a_fresh_start() {
    let dir = scratch("round-trip");
    let path = dir.join("c.json");
    assert_eq!(Checkpoint::load(&path).unwrap(), Checkpoint::default());
    let ckpt = Checkpoint {
        stream_arn: Some("arn".into()),
        shards: BTreeMap::from([("s".into(), "42".into())]),
        finished: BTreeSet::from(["old".into()]),
    };
    ckpt.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap(), ckpt);
    std::fs::write(&path, r#"{"stream_arn": "arn", "shards": {"s": "7"}}"#).unwrap();
    assert!(
        Checkpoint::load(&path).unwrap().finished.is_empty(),
        "a checkpoint from before `finished` still loads"
    );
    std::fs::write(&path, "not json").unwrap();
    let err = Checkpoint::load(&path).unwrap_err().to_string();
    assert!(err.contains("c.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_checkpoint_is_replaced_through_a_file_of_its_own() {
    // Another writer's (or a crashed run's) temporary names are in the way:
    // a save must neither need nor touch them, and must leave nothing behind.
    let dir = scratch("unique");
    let path = dir.join("c.json");
    for blocker in ["c.tmp", "c.json.tmp"] {
        std::fs::create_dir(dir.join(blocker)).unwrap();
    }
    let ckpt = Checkpoint {
        stream_arn: Some("arn".into()),
        shards: BTreeMap::from([("s".into(), "9".into())]),
        finished: BTreeSet::new(),
    };
    ckpt.save(&path).unwrap();
    ckpt.save(&path).unwrap();
    assert_eq!(Checkpoint::load(&path).unwrap(), ckpt);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["c.json", "c.json.tmp", "c.tmp"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("zae-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn sdk_records_take_the_lambda_shape_with_millisecond_times() {
    use aws_sdk_dynamodbstreams::types::{
        AttributeValue, OperationType, Record, StreamRecord as SdkRecord,
    };
    use aws_smithy_types::DateTime;
    let change = SdkRecord::builder()
        .approximate_creation_date_time(DateTime::from_millis(1_795_970_136_158))
        .keys("PK", AttributeValue::S("ns/BUCKET#e#r#0".into()))
        .keys("SK", AttributeValue::S("#STATE".into()))
        .new_image("b_tpm_tc", AttributeValue::N("5".into()))
        .new_image("cascade", AttributeValue::Bool(true))
        .sequence_number("77")
        .size_bytes(10)
        .build();
    let record = Record::builder()
        .event_id("e")
        .event_name(OperationType::Insert)
        .dynamodb(change)
        .build();
    let json = lambda_record(&record, "arn:stream").to_string();
    let parsed = zae_table::StreamRecord::parse(&json).unwrap();
    assert_eq!(parsed.created_ms, Some(1_795_970_136_158));
    assert_eq!(parsed.event_name, zae_table::EventName::Insert);
    assert_eq!(
        parsed.new_image().unwrap().int("b_tpm_tc").unwrap(),
        Some(5)
    );
    assert!(json.contains("\"eventSourceARN\":\"arn:stream\""));
}

/// A TTL deletion read through the SDK keeps its `userIdentity`, as the
/// raw-body path does: an archive line's `removed_by_ttl` must not depend on
/// which path read the page.
#[test]
fn sdk_records_keep_the_user_identity_of_a_ttl_deletion() {
    use aws_sdk_dynamodbstreams::types::{
        AttributeValue, Identity, OperationType, Record, StreamRecord as SdkRecord,
    };
    let change = SdkRecord::builder()
        .keys("PK", AttributeValue::S("ns/AUDIT#e".into()))
        .keys("SK", AttributeValue::S("#AUDIT#01".into()))
        .old_image("PK", AttributeValue::S("ns/AUDIT#e".into()))
        .sequence_number("78")
        .build();
    let ttl = Identity::builder()
        .r#type("Service")
        .principal_id("dynamodb.amazonaws.com")
        .build();
    let record = Record::builder()
        .event_name(OperationType::Remove)
        .dynamodb(change.clone())
        .user_identity(ttl)
        .build();
    let json = lambda_record(&record, "arn:stream").to_string();
    let parsed = zae_table::StreamRecord::parse(&json).unwrap();
    assert!(parsed.removed_by_ttl, "{json}");
    // A delete by a principal has no identity, and is not TTL's.
    let deleted = Record::builder()
        .event_name(OperationType::Remove)
        .dynamodb(change)
        .build();
    let json = lambda_record(&deleted, "arn:stream").to_string();
    assert!(
        !zae_table::StreamRecord::parse(&json)
            .unwrap()
            .removed_by_ttl
    );
    assert!(!json.contains("userIdentity"), "{json}");
}

// A stream as DynamoDB Streams serves it, scripted: moto has one shard that
// never closes, no empty pages inside a shard, no trimming and no expiry, so
// those behaviours are injected here, at the source seam.

#[derive(Clone, Copy)]
enum Slot {
    Record(u64),
    /// A record with no sequence number.
    Unreadable,
    /// An empty page before the next slot.
    Gap,
}

struct ScriptedShard {
    info: ShardInfo,
    slots: Vec<Slot>,
    closed: bool,
    /// Positions before this sequence are gone.
    trimmed_below: u64,
}

#[derive(Default)]
struct Scripted {
    shards: Vec<ScriptedShard>,
    opened: Mutex<Vec<(String, Position)>>,
    pages: AtomicUsize,
    /// The page call at which the iterator has expired (once).
    expire_at: Mutex<Option<usize>>,
    /// Numbers records as DynamoDB Local does (`000000000000000000005`) and,
    /// as the service does, refuses a position it never handed out or one
    /// shorter than 21 digits ("Member must have length greater than or
    /// equal to 21"). moto accepts either, so this is checked here.
    local_numbers: bool,
}

fn seq(n: u64) -> SequenceNumber {
    SequenceNumber::parse(&format!(
        "{}",
        1_000_000_000_000_000_000_000u128 + n as u128
    ))
    .unwrap()
}

/// DynamoDB Local's spelling of record `n`.
fn local_seq(n: u64) -> SequenceNumber {
    SequenceNumber::parse(&format!("{n:021}")).unwrap()
}

fn number(sequence: &SequenceNumber) -> u64 {
    let n = sequence.as_stream().parse::<u128>().unwrap();
    n.checked_sub(1_000_000_000_000_000_000_000).unwrap_or(n) as u64
}

fn bucket_change(n: Option<SequenceNumber>) -> Value {
    let mut change = serde_json::json!({
        "Keys": {"PK": {"S": "default/BUCKET#e#r#0"}, "SK": {"S": "#STATE"}},
    });
    if let Some(n) = n {
        change["SequenceNumber"] = Value::from(n.as_stream());
    }
    serde_json::json!({"eventName": "MODIFY", "dynamodb": change})
}

fn shard(id: &str, parent: Option<&str>, slots: Vec<Slot>, closed: bool) -> ScriptedShard {
    let first = slots.iter().find_map(|s| match s {
        Slot::Record(n) => Some(seq(*n)),
        _ => None,
    });
    let last = slots.iter().rev().find_map(|s| match s {
        Slot::Record(n) if closed => Some(seq(*n)),
        _ => None,
    });
    ScriptedShard {
        info: ShardInfo {
            first,
            last,
            ..ShardInfo::open(id, parent)
        },
        slots,
        closed,
        trimmed_below: 0,
    }
}

/// A shard whose range DynamoDB Local's numbers describe.
fn local_shard(id: &str, slots: Vec<Slot>) -> ScriptedShard {
    let mut scripted = shard(id, None, slots, false);
    scripted.info.first = scripted.info.first.as_ref().map(|s| local_seq(number(s)));
    scripted
}

fn records(range: std::ops::Range<u64>) -> Vec<Slot> {
    range.map(Slot::Record).collect()
}

impl Scripted {
    fn shard(&self, id: &str) -> &ScriptedShard {
        self.shards.iter().find(|s| s.info.id == id).unwrap()
    }

    fn opens(&self) -> usize {
        self.opened.lock().unwrap().len()
    }

    /// Record `n` as this stream spells it.
    fn spelled(&self, n: u64) -> SequenceNumber {
        if self.local_numbers {
            local_seq(n)
        } else {
            seq(n)
        }
    }

    /// The service's validation of a position's text.
    fn refuses(&self, id: &str, from: &Position) -> Option<PollError> {
        let (Position::After(s) | Position::At(s)) = from else {
            return None;
        };
        let handed_out = self.shard(id).slots.iter().any(
            |slot| matches!(slot, Slot::Record(n) if self.spelled(*n).as_stream() == s.as_stream()),
        );
        (self.local_numbers && (s.as_stream().len() < 21 || !handed_out)).then(|| {
            PollError::Stream {
                operation: "GetShardIterator",
                target: id.into(),
                message: format!(
                    "ValidationException: Value '{}' at 'sequenceNumber' failed to satisfy \
                     constraint: Member must have length greater than or equal to 21",
                    s.as_stream()
                ),
            }
        })
    }
}

impl StreamSource for Scripted {
    fn stream_arn(&self) -> &str {
        "arn:scripted"
    }

    async fn shards(&self) -> Result<Vec<ShardInfo>, PollError> {
        Ok(self.shards.iter().map(|s| s.info.clone()).collect())
    }

    async fn iterator(&self, id: &str, from: &Position) -> Result<Option<String>, PollError> {
        self.opened.lock().unwrap().push((id.into(), from.clone()));
        if let Some(refused) = self.refuses(id, from) {
            return Err(refused);
        }
        let shard = self.shard(id);
        if let Position::After(s) | Position::At(s) = from
            && number(s) < shard.trimmed_below
        {
            return Err(PollError::Trimmed {
                shard: id.into(),
                position: s.to_string(),
            });
        }
        let index = shard
            .slots
            .iter()
            .position(|slot| match slot {
                Slot::Record(n) => {
                    number(&shard.info.first.clone().unwrap()) <= *n
                        && *n >= shard.trimmed_below
                        && from.admits(&seq(*n))
                }
                _ => false,
            })
            .unwrap_or(shard.slots.len());
        Ok(Some(format!("{id}|{index}")))
    }

    async fn page(&self, iterator: &str, limit: i32) -> Result<Page, PollError> {
        let call = self.pages.fetch_add(1, Ordering::SeqCst);
        let (id, index) = iterator.split_once('|').unwrap();
        if self
            .expire_at
            .lock()
            .unwrap()
            .take_if(|at| *at == call)
            .is_some()
        {
            return Err(PollError::IteratorExpired { shard: id.into() });
        }
        let shard = self.shard(id);
        let mut index: usize = index.parse().unwrap();
        let at = |i: usize| Some(format!("{id}|{i}"));
        if index >= shard.slots.len() {
            let next = if shard.closed { None } else { at(index) };
            return Ok(Page {
                records: vec![],
                next,
            });
        }
        if let Slot::Gap = shard.slots[index] {
            return Ok(Page {
                records: vec![],
                next: at(index + 1),
            });
        }
        let mut records = Vec::new();
        while index < shard.slots.len() && records.len() < limit as usize {
            match shard.slots[index] {
                Slot::Record(n) => records.push(bucket_change(Some(self.spelled(n)))),
                Slot::Unreadable => records.push(bucket_change(None)),
                Slot::Gap => break,
            }
            index += 1;
        }
        let next = if index >= shard.slots.len() && shard.closed {
            None
        } else {
            at(index)
        };
        Ok(Page { records, next })
    }
}

#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<u64>>,
}

impl Handler for Recorder {
    async fn handle(&self, records: &[&str], _principal: &str) -> BatchOutcome {
        let mut seen = self.seen.lock().unwrap();
        for text in records {
            let record: Value = serde_json::from_str(text).unwrap();
            seen.push(number(&record_sequence(&record).unwrap()));
        }
        BatchOutcome::default()
    }
}

struct NoMetrics;

impl MetricSink for NoMetrics {
    async fn publish(&self, _: &[MetricEvent]) -> Result<(), MetricsError> {
        Ok(())
    }
}

fn options(checkpoint: Option<std::path::PathBuf>, start: Option<Start>) -> PollOptions {
    PollOptions {
        until_idle: true,
        batch_size: 100,
        checkpoint,
        max_retries: 0,
        idle_wait: Duration::ZERO,
        principal: "test".into(),
        start,
        archiving: false,
    }
}

async fn poll_all(source: &Scripted, options: &PollOptions) -> (Vec<u64>, PollSummary) {
    let recorder = Recorder::default();
    let summary = run(source, &recorder, &NoMetrics, options).await.unwrap();
    (recorder.seen.into_inner().unwrap(), summary)
}

#[tokio::test]
async fn an_empty_page_inside_a_shard_is_not_its_end() {
    use Slot::*;
    let slots = vec![Record(1), Gap, Gap, Record(2), Gap, Gap, Gap, Record(3)];
    let source = Scripted {
        shards: vec![shard("a", None, slots, false)],
        ..Default::default()
    };
    let (seen, summary) = poll_all(&source, &options(None, None)).await;
    assert_eq!(seen, [1, 2, 3]);
    assert_eq!(
        summary.shards_finished, 0,
        "an open shard is never finished"
    );
    assert_eq!(
        source.opens(),
        1,
        "one iterator, then NextShardIterator to the end"
    );
}

#[tokio::test]
async fn closed_parents_are_read_to_their_end_before_their_children() {
    let mut parent_slots = records(1..120);
    parent_slots.push(Slot::Gap);
    parent_slots.extend(records(120..251));
    let source = Scripted {
        // Listed child first, as DescribeStream may.
        shards: vec![
            shard("child", Some("parent"), records(300..306), false),
            shard("parent", None, parent_slots, true),
        ],
        ..Default::default()
    };
    let dir = scratch("closed");
    let path = dir.join("c.json");
    let (seen, summary) = poll_all(&source, &options(Some(path.clone()), None)).await;
    let expected: Vec<u64> = (1..251).chain(300..306).collect();
    assert_eq!(seen, expected);
    assert_eq!(summary.shards_finished, 1);
    let saved = Checkpoint::load(&path).unwrap();
    assert!(saved.finished.contains("parent"));
    assert_eq!(saved.position("child"), Some(seq(305)));

    // The next run reads neither again, and opens no iterator on the finished parent.
    let again = Scripted {
        shards: source.shards,
        ..Default::default()
    };
    let (seen, _) = poll_all(&again, &options(Some(path), None)).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert!(
        again
            .opened
            .lock()
            .unwrap()
            .iter()
            .all(|(id, _)| id == "child")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn unreadable_records_are_counted_and_the_rest_delivered() {
    use Slot::*;
    let source = Scripted {
        shards: vec![shard(
            "a",
            None,
            vec![Record(1), Unreadable, Record(2), Unreadable],
            true,
        )],
        ..Default::default()
    };
    let (seen, summary) = poll_all(&source, &options(None, None)).await;
    assert_eq!(seen, [1, 2]);
    assert_eq!(summary.records_unreadable, 2);
    assert_eq!(summary.records_read, 2);
}

#[tokio::test]
async fn from_starts_a_shard_at_a_record_even_behind_the_checkpoint() {
    let dir = scratch("from");
    let path = dir.join("c.json");
    let ckpt = Checkpoint {
        stream_arn: Some("arn:scripted".into()),
        shards: BTreeMap::from([("a".into(), seq(5).as_stream().into())]),
        finished: BTreeSet::new(),
    };
    ckpt.save(&path).unwrap();
    let source = || Scripted {
        shards: vec![shard("a", None, records(1..8), false)],
        ..Default::default()
    };
    let (seen, _) = poll_all(&source(), &options(Some(path.clone()), None)).await;
    assert_eq!(seen, [6, 7], "without --from: after the checkpoint");
    ckpt.save(&path).unwrap();
    let start = Start {
        sequence: seq(3),
        shard: None,
    };
    let (seen, _) = poll_all(&source(), &options(Some(path.clone()), Some(start.clone()))).await;
    assert_eq!(
        seen,
        [3, 4, 5, 6, 7],
        "--from is inclusive, and overrides the checkpoint"
    );

    let two_open = Scripted {
        shards: vec![
            shard("a", None, records(1..8), false),
            shard("b", None, records(2..9), false),
        ],
        ..Default::default()
    };
    let err = run(
        &two_open,
        &Recorder::default(),
        &NoMetrics,
        &options(None, Some(start)),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("a, b") && err.contains("--shard"), "{err}");
    let named = Start {
        sequence: seq(4),
        shard: Some("b".into()),
    };
    let (seen, _) = poll_all(&two_open, &options(None, Some(named))).await;
    let expected: Vec<u64> = (1..8).chain(4..9).collect();
    assert_eq!(seen, expected, "a from its start, b from the named record");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_expired_iterator_is_reopened_from_the_checkpoint() {
    let mut slots = records(1..150);
    slots.insert(100, Slot::Gap);
    let source = Scripted {
        shards: vec![shard("a", None, slots, true)],
        expire_at: Mutex::new(Some(1)),
        ..Default::default()
    };
    let (seen, _) = poll_all(&source, &options(None, None)).await;
    assert_eq!(seen, (1..150).collect::<Vec<_>>(), "each record once");
    let opened = source.opened.lock().unwrap().clone();
    assert_eq!(
        opened,
        [
            ("a".into(), Position::TrimHorizon),
            ("a".into(), Position::After(seq(100)))
        ]
    );
}

#[tokio::test]
async fn a_trimmed_position_restarts_at_the_oldest_record_and_is_counted() {
    let dir = scratch("trimmed");
    let path = dir.join("c.json");
    Checkpoint {
        stream_arn: Some("arn:scripted".into()),
        shards: BTreeMap::from([("a".into(), seq(2).as_stream().into())]),
        finished: BTreeSet::new(),
    }
    .save(&path)
    .unwrap();
    let mut a = shard("a", None, records(1..10), false);
    a.trimmed_below = 5;
    let source = Scripted {
        shards: vec![a],
        ..Default::default()
    };
    let (seen, summary) = poll_all(&source, &options(Some(path), None)).await;
    assert_eq!(seen, [5, 6, 7, 8, 9]);
    assert_eq!(summary.positions_trimmed, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_closed_shard_is_read_through_any_run_of_empty_pages() {
    let mut slots = records(1..3);
    // Longer than two passes' worth: one whole pass would read nothing.
    slots.extend(std::iter::repeat_n(Slot::Gap, 2 * EMPTY_PAGES_PER_PASS + 4));
    slots.extend(records(3..5));
    let source = Scripted {
        shards: vec![
            shard("parent", None, slots, true),
            shard("child", Some("parent"), records(10..12), false),
        ],
        ..Default::default()
    };
    let (seen, summary) = poll_all(&source, &options(None, None)).await;
    assert_eq!(seen, [1, 2, 3, 4, 10, 11]);
    assert_eq!(summary.shards_finished, 1);
}

#[tokio::test]
async fn from_survives_an_iterator_that_expires_before_anything_is_delivered() {
    let source = Scripted {
        shards: vec![shard("a", None, records(1..8), false)],
        expire_at: Mutex::new(Some(0)),
        ..Default::default()
    };
    let start = Start {
        sequence: seq(4),
        shard: None,
    };
    let (seen, _) = poll_all(&source, &options(None, Some(start))).await;
    assert_eq!(seen, [4, 5, 6, 7]);
    let opened = source.opened.lock().unwrap().clone();
    assert_eq!(
        opened,
        [
            ("a".into(), Position::At(seq(4))),
            ("a".into(), Position::At(seq(4)))
        ]
    );
}

#[tokio::test]
async fn a_checkpoint_resumes_with_the_sequence_number_as_the_stream_gave_it() {
    let dir = scratch("local-resume");
    let path = dir.join("c.json");
    let source = |upto: u64| Scripted {
        shards: vec![local_shard("a", records(1..upto))],
        local_numbers: true,
        ..Default::default()
    };
    let (seen, _) = poll_all(&source(5), &options(Some(path.clone()), None)).await;
    assert_eq!(seen, [1, 2, 3, 4]);
    let saved = Checkpoint::load(&path).unwrap();
    assert_eq!(
        saved.shards["a"], "000000000000000000004",
        "as the stream gave it"
    );

    let more = source(8);
    let (seen, _) = poll_all(&more, &options(Some(path), None)).await;
    assert_eq!(seen, [5, 6, 7], "resumed after the checkpoint");
    let opened = more.opened.lock().unwrap().clone();
    assert_eq!(opened, [("a".into(), Position::After(local_seq(4)))]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn from_sends_the_sequence_number_as_given() {
    let source = Scripted {
        shards: vec![local_shard("a", records(1..8))],
        local_numbers: true,
        ..Default::default()
    };
    // As `--from` parses it from a dead letter's position.
    let start = Start {
        sequence: SequenceNumber::parse("000000000000000000003").unwrap(),
        shard: None,
    };
    let (seen, _) = poll_all(&source, &options(None, Some(start))).await;
    assert_eq!(seen, [3, 4, 5, 6, 7]);
}

#[tokio::test]
async fn the_double_refuses_a_position_the_stream_never_gave() {
    // The double itself: a shortened or unknown number is refused, as
    // DynamoDB Local refuses `4` and DynamoDB an unknown position.
    let source = Scripted {
        shards: vec![local_shard("a", records(1..8))],
        local_numbers: true,
        ..Default::default()
    };
    for text in ["4", "000000000000000000099"] {
        let from = Position::After(SequenceNumber::parse(text).unwrap());
        let refused = source.iterator("a", &from).await.unwrap_err().to_string();
        assert!(refused.contains(text), "{refused}");
    }
    assert!(
        source
            .iterator("a", &Position::After(local_seq(4)))
            .await
            .is_ok()
    );
}

#[test]
fn untyped_empty_maps_are_typed_at_any_depth_and_ttl_deletes_keep_their_identity() {
    // As DynamoDB Local 3.3.1 wrote an item with empty maps and lists, top
    // level and nested (lists keep their type there; maps lose it).
    let body = br##"{"Records":[{"eventName":"REMOVE","userIdentity":{"Type":"Service","PrincipalId":"dynamodb.amazonaws.com"},
        "dynamodb":{"SequenceNumber":"000000000000000000001","Keys":{"PK":{"S":"a"}},
        "OldImage":{"PK":{"S":"a"},"l":{"L":[]},"m":{},"n":{"M":{"x":{},"y":{"L":[{},{"L":[]}]}}}}}}],
        "NextShardIterator":null}"##;
    let page = record::page_from_body(body, "arn:s").unwrap();
    assert_eq!(page.next, None);
    let record = &page.records[0];
    assert_eq!(
        record["dynamodb"]["OldImage"],
        serde_json::json!({"PK":{"S":"a"},"l":{"L":[]},"m":{"M":{}},
            "n":{"M":{"x":{"M":{}},"y":{"L":[{"M":{}},{"L":[]}]}}}})
    );
    let text = record.to_string();
    let parsed = zae_table::StreamRecord::parse(&text).unwrap();
    assert!(
        parsed.removed_by_ttl,
        "Lambda's member names for userIdentity"
    );
}
