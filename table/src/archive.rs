//! Audit items removed from the table (TTL expiry or a delete), as lines of
//! the S3 audit archive: one JSON object per event, its item's attributes
//! in plain JSON, and where the object holding it goes:
//! `audit/namespace={ns}/year=YYYY/month=MM/day=DD/{first}-{digest}.jsonl.gz`,
//! a key fixed by the records it holds, so a redelivered batch writes the
//! same object again.

use crate::keys::{AUDIT_PREFIX, SK_AUDIT};
use crate::stream::{EventName, StreamRecord};
use chrono::{DateTime, Datelike, NaiveDate};
use serde_json::{Map, Number, Value};

/// One removed audit event, ready for the archive.
#[derive(Debug, Clone, PartialEq)]
pub struct Archived {
    pub namespace: String,
    /// The removed item's partition key, for logs.
    pub key: String,
    /// The day of the event's own `timestamp` (or of its removal).
    pub day: NaiveDate,
    pub line: Value,
}

/// The longest namespace id an archive object key is built from: far below
/// S3's 1,024 bytes whatever a key holds.
pub use crate::names::MAX_NAMESPACE_BYTES;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArchiveError {
    #[error("audit record has no OldImage")]
    NoOldImage,
    /// Only `{namespace id}/AUDIT#{entity}` is the table's own audit
    /// partition. Anything else with an `#AUDIT#` sort key was written by
    /// someone else (the acquire policy may put any key matching
    /// `*/BUCKET#*`), and must not become an archive line.
    #[error("`{0}` is not an audit partition key ({{namespace id}}/AUDIT#{{entity}}): {1}")]
    NotAuditKey(String, &'static str),
}

/// The namespace id of a partition key that is the table's own audit
/// partition, `{ns}/AUDIT#{entity}`: a bounded namespace id, and an entity
/// the client writes audit events under (never a `#`, so no key the acquire
/// policy's `*/BUCKET#*` allows passes; a `/` only in a resource's name,
/// as in the client's own `$RESOURCE:openai/gpt-4`).
pub fn audit_namespace(pk: &str) -> Result<&str, ArchiveError> {
    let refuse = |why| ArchiveError::NotAuditKey(pk.to_owned(), why);
    let (namespace, rest) = pk.split_once('/').ok_or_else(|| refuse("no namespace"))?;
    let entity = rest
        .strip_prefix(AUDIT_PREFIX)
        .ok_or_else(|| refuse("not an AUDIT# partition"))?;
    if !crate::names::is_namespace_id(namespace) {
        return Err(refuse(
            "namespace id empty, too long or outside [A-Za-z0-9_-]",
        ));
    }
    if !crate::audit::is_audit_entity(entity) {
        return Err(refuse("not $SYSTEM, $RESOURCE:<resource> or an entity id"));
    }
    Ok(namespace)
}

/// Whether a record is the removal of an audit item.
pub fn is_audit_removal(record: &StreamRecord<'_>) -> bool {
    record.event_name == EventName::Remove
        && record.sort_key().is_some_and(|sk| sk.starts_with(SK_AUDIT))
}

/// A DynamoDB wire value as plain JSON: numbers as numbers (text when they
/// fit neither an integer nor a float), sets as arrays, binary as its text.
pub fn plain(wire: &Value) -> Value {
    let Some((kind, v)) = wire.as_object().and_then(|m| m.iter().next()) else {
        return Value::Null;
    };
    match (kind.as_str(), v) {
        ("S" | "B", Value::String(s)) => Value::String(s.clone()),
        ("N", Value::String(n)) => number(n),
        ("BOOL", Value::Bool(b)) => Value::Bool(*b),
        ("NULL", _) => Value::Null,
        ("M", Value::Object(m)) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), plain(v))).collect())
        }
        ("L", Value::Array(items)) => Value::Array(items.iter().map(plain).collect()),
        ("SS" | "BS", Value::Array(items)) => Value::Array(items.clone()),
        ("NS", Value::Array(items)) => Value::Array(
            items
                .iter()
                .map(|n| n.as_str().map_or(Value::Null, number))
                .collect(),
        ),
        _ => Value::Null,
    }
}

fn number(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::Number(i.into());
    }
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map_or_else(|| Value::String(text.to_owned()), Value::Number)
}

/// The archive line of an audit removal, from the record's raw text.
pub fn archived(record: &StreamRecord<'_>, raw: &Value) -> Result<Archived, ArchiveError> {
    let old = raw
        .pointer("/dynamodb/OldImage")
        .and_then(Value::as_object)
        .ok_or(ArchiveError::NoOldImage)?;
    let key = record.partition_key().unwrap_or_default();
    let namespace = audit_namespace(key)?;
    let mut line = Map::new();
    for field in [
        "event_id",
        "entity_id",
        "action",
        "timestamp",
        "principal",
        "resource",
        "details",
    ] {
        line.insert(field.into(), old.get(field).map_or(Value::Null, plain));
    }
    let removed = record.created_ms.and_then(DateTime::from_timestamp_millis);
    line.insert("namespace".into(), Value::String(namespace.into()));
    line.insert("removed_by_ttl".into(), Value::Bool(record.removed_by_ttl));
    line.insert(
        "removed_at".into(),
        removed.map_or(Value::Null, |at| {
            Value::String(at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        }),
    );
    line.insert(
        "stream_event_id".into(),
        record
            .event_id
            .as_deref()
            .map_or(Value::Null, |id| Value::String(id.into())),
    );
    line.insert(
        "stream_sequence".into(),
        Value::String(record.sequence_number.as_stream().into()),
    );
    let stamped = line["timestamp"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
    let day = stamped
        .map(|t| t.date_naive())
        .or(removed.map(|t| t.date_naive()))
        .unwrap_or_default();
    Ok(Archived {
        namespace: namespace.into(),
        key: key.into(),
        day,
        line: Value::Object(line),
    })
}

/// The object key for a namespace's events of one day, from the stream
/// positions of the records it holds (first, and a digest of all).
pub fn object_key(namespace: &str, day: NaiveDate, first_sequence: &str, digest: &str) -> String {
    format!(
        "audit/namespace={namespace}/year={:04}/month={:02}/day={:02}/{first_sequence}-{digest}.jsonl.gz",
        day.year(),
        day.month(),
        day.day()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const REMOVE: &str = r##"{"eventID":"ev-1","eventName":"REMOVE","userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},
        "dynamodb":{"ApproximateCreationDateTime":1795970136.5,"SequenceNumber":"42",
        "Keys":{"PK":{"S":"ns1/AUDIT#key-a"},"SK":{"S":"#AUDIT#01J"}},
        "OldImage":{"PK":{"S":"ns1/AUDIT#key-a"},"SK":{"S":"#AUDIT#01J"},"event_id":{"S":"01J"},"entity_id":{"S":"key-a"},
          "action":{"S":"limit_overdrawn"},"timestamp":{"S":"2026-11-29T23:59:59Z"},"principal":{"NULL":true},
          "resource":{"S":"gpt-4"},"details":{"M":{"limit":{"S":"tpm"},"balance":{"N":"-5"},"ratio":{"N":"0.5"},
          "shards":{"L":[{"N":"0"}]},"tags":{"SS":["a","b"]},"big":{"N":"1e400"}}},"ttl":{"N":"1"}}}}"##;

    #[test]
    fn a_ttl_removal_becomes_a_plain_json_line_in_its_namespace_and_day() {
        let raw: Value = serde_json::from_str(REMOVE).unwrap();
        let record = StreamRecord::parse(REMOVE).unwrap();
        assert!(is_audit_removal(&record));
        let a = archived(&record, &raw).unwrap();
        assert_eq!(a.namespace, "ns1");
        assert_eq!(
            a.day,
            NaiveDate::from_ymd_opt(2026, 11, 29).unwrap(),
            "the event's day, not the removal's"
        );
        let l = &a.line;
        assert_eq!(l["removed_by_ttl"], true);
        assert_eq!(l["principal"], Value::Null);
        assert_eq!(l["details"]["balance"], -5);
        assert_eq!(l["details"]["ratio"], 0.5);
        assert_eq!(l["details"]["shards"], serde_json::json!([0]));
        assert_eq!(l["details"]["tags"], serde_json::json!(["a", "b"]));
        assert_eq!(l["details"]["big"], "1e400", "kept as text, not lost");
        assert_eq!(l["stream_event_id"], "ev-1");
        assert_eq!(l["removed_at"], "2026-11-29T16:35:36.500Z");
        assert_eq!(
            object_key("ns1", a.day, "42", "abc"),
            "audit/namespace=ns1/year=2026/month=11/day=29/42-abc.jsonl.gz"
        );
    }

    #[test]
    fn a_clients_delete_is_archived_as_not_expired() {
        let text = REMOVE.replace(
            r#""userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},"#,
            "",
        );
        let record = StreamRecord::parse(&text).unwrap();
        let raw: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            archived(&record, &raw).unwrap().line["removed_by_ttl"],
            false
        );
    }

    #[test]
    fn only_the_tables_own_audit_partition_names_a_namespace() {
        assert_eq!(
            audit_namespace("AbC-_09xyz1/AUDIT#key-a"),
            Ok("AbC-_09xyz1")
        );
        assert_eq!(audit_namespace("ns/AUDIT#user@x.io"), Ok("ns"));
        assert_eq!(audit_namespace("ns/AUDIT#$SYSTEM"), Ok("ns"));
        assert_eq!(audit_namespace("ns/AUDIT#$RESOURCE:openai/gpt-4"), Ok("ns"));
        let long_ns = format!("{}/AUDIT#e", "n".repeat(MAX_NAMESPACE_BYTES + 1));
        let long_entity = format!("ns/AUDIT#{}", "e".repeat(257));
        for forged in [
            "victim/AUDIT#x/BUCKET#y",
            "victim/AUDIT#a#b",
            "ghost/BUCKET#e#r#0",
            "/AUDIT#e",
            "ns/AUDIT#",
            "AUDIT#e",
            "n s/AUDIT#e",
            "ns/AUDIT#-e",
            "ns/AUDIT#$OTHER",
            "ns/AUDIT#$RESOURCE:x/BUCKET#y",
            "ns/AUDIT#e/x",
            long_ns.as_str(),
            long_entity.as_str(),
        ] {
            assert!(
                matches!(audit_namespace(forged), Err(ArchiveError::NotAuditKey(..))),
                "{forged}"
            );
        }
    }
}
