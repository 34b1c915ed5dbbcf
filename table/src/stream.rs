//! DynamoDB stream records in the Lambda event shape, parsed one at a time.
//!
//! Records are decoded here rather than through `aws_lambda_events`, for three
//! reasons: one malformed record must not fail the whole batch (the crate
//! deserializes the event as a unit, and even a missing `SizeBytes` fails it);
//! the crate's `ApproximateCreationDateTime` loses the milliseconds (`.653` s
//! becomes `.000653` s, still so in 1.2.1); and borrowing from the event text
//! keeps parsing cheap on the hot path.

use crate::milli::{self, NumberError};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventName {
    Insert,
    Modify,
    Remove,
    Other,
}

/// One attribute in wire format. Only `S` and `N` carry meaning for the
/// server side; any other member (BOOL, M, L, ...) is recorded as present.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Attr<'a> {
    #[serde(rename = "S", borrow, default)]
    pub s: Option<Cow<'a, str>>,
    #[serde(rename = "N", borrow, default)]
    pub n: Option<Cow<'a, str>>,
}

/// An item image: attribute name to value.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Image<'a>(#[serde(borrow)] pub HashMap<Cow<'a, str>, Attr<'a>>);

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AttrError {
    #[error("attribute `{0}` is missing")]
    Missing(String),
    #[error("attribute `{0}` is not of type {1}")]
    WrongType(String, &'static str),
    #[error("attribute `{name}`: {source}")]
    Number { name: String, source: NumberError },
}

impl<'a> Image<'a> {
    pub fn get(&self, name: &str) -> Option<&Attr<'a>> {
        self.0.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(|k| k.as_ref())
    }

    /// An `S` attribute; `None` when absent.
    pub fn string(&self, name: &str) -> Result<Option<&str>, AttrError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr { s: Some(s), .. }) => Ok(Some(s)),
            Some(_) => Err(AttrError::WrongType(name.into(), "S")),
        }
    }

    /// An `N` attribute holding an integer; `None` when absent.
    pub fn int(&self, name: &str) -> Result<Option<i64>, AttrError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr { n: Some(n), .. }) => milli::parse_int(n)
                .map(Some)
                .map_err(|source| AttrError::Number { name: name.into(), source }),
            Some(_) => Err(AttrError::WrongType(name.into(), "N")),
        }
    }
}

/// A stream sequence number, kept zero-padded to a fixed width so that string
/// order is numeric order, in memory and in DynamoDB condition expressions.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceNumber(String);

impl SequenceNumber {
    /// DynamoDB documents sequence numbers as 21 to 40 decimal digits.
    pub const WIDTH: usize = 40;

    pub fn parse(text: &str) -> Result<SequenceNumber, RecordError> {
        if text.is_empty() || text.len() > Self::WIDTH || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RecordError::BadSequenceNumber(text.chars().take(64).collect()));
        }
        Ok(SequenceNumber(format!("{text:0>width$}", width = Self::WIDTH)))
    }

    /// The padded form, as stored in snapshot watermarks.
    pub fn padded(&self) -> &str {
        &self.0
    }

    /// The form the stream uses, as Lambda expects it in `itemIdentifier`.
    pub fn as_stream(&self) -> &str {
        let trimmed = self.0.trim_start_matches('0');
        if trimmed.is_empty() { "0" } else { trimmed }
    }

    /// Reads back a padded watermark; `None` if it is not one.
    pub fn from_padded(text: &str) -> Option<SequenceNumber> {
        (text.len() == Self::WIDTH && text.bytes().all(|b| b.is_ascii_digit())).then(|| SequenceNumber(text.into()))
    }
}

impl std::fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_stream())
    }
}

#[derive(Debug, Error)]
pub enum RecordError {
    #[error("record is not valid JSON of the stream-record shape: {0}")]
    Json(#[from] serde_json::Error),
    #[error("record has no `dynamodb` member")]
    MissingChange,
    #[error("record has no SequenceNumber")]
    MissingSequenceNumber,
    #[error("SequenceNumber `{0}` is not 1 to 40 decimal digits")]
    BadSequenceNumber(String),
    #[error("ApproximateCreationDateTime `{0}` is not an instant")]
    BadCreationTime(f64),
}

#[derive(Deserialize)]
struct WireRecord<'a> {
    #[serde(rename = "eventID", borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(rename = "eventName", borrow, default)]
    event_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    dynamodb: Option<WireChange<'a>>,
}

#[derive(Deserialize)]
struct WireChange<'a> {
    #[serde(rename = "ApproximateCreationDateTime", default)]
    approximate_creation: Option<f64>,
    #[serde(rename = "SequenceNumber", borrow, default)]
    sequence_number: Option<Cow<'a, str>>,
    #[serde(rename = "Keys", borrow, default)]
    keys: Option<Image<'a>>,
    #[serde(rename = "NewImage", borrow, default)]
    new_image: Option<Image<'a>>,
    #[serde(rename = "OldImage", borrow, default)]
    old_image: Option<Image<'a>>,
}

/// One stream record, borrowing from the event text it was parsed from.
#[derive(Debug, Clone)]
pub struct StreamRecord<'a> {
    pub event_id: Option<Cow<'a, str>>,
    pub event_name: EventName,
    pub sequence_number: SequenceNumber,
    /// `ApproximateCreationDateTime` in epoch milliseconds, when present.
    pub created_ms: Option<i64>,
    pub keys: Image<'a>,
    pub new_image: Option<Image<'a>>,
    pub old_image: Option<Image<'a>>,
}

impl<'a> StreamRecord<'a> {
    pub fn parse(text: &'a str) -> Result<StreamRecord<'a>, RecordError> {
        let wire: WireRecord<'a> = serde_json::from_str(text)?;
        let change = wire.dynamodb.ok_or(RecordError::MissingChange)?;
        let sequence_number = SequenceNumber::parse(
            change.sequence_number.as_deref().ok_or(RecordError::MissingSequenceNumber)?,
        )?;
        let created_ms = change.approximate_creation.map(seconds_to_millis).transpose()?;
        let event_name = match wire.event_name.as_deref() {
            Some("INSERT") => EventName::Insert,
            Some("MODIFY") => EventName::Modify,
            Some("REMOVE") => EventName::Remove,
            _ => EventName::Other,
        };
        Ok(StreamRecord {
            event_id: wire.event_id,
            event_name,
            sequence_number,
            created_ms,
            keys: change.keys.unwrap_or_default(),
            new_image: change.new_image,
            old_image: change.old_image,
        })
    }

    /// The item's partition key, from the keys or else the images.
    pub fn partition_key(&self) -> Option<&str> {
        [Some(&self.keys), self.new_image.as_ref(), self.old_image.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|image| image.get("PK").and_then(|a| a.s.as_deref()))
    }

    pub fn sort_key(&self) -> Option<&str> {
        [Some(&self.keys), self.new_image.as_ref(), self.old_image.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|image| image.get("SK").and_then(|a| a.s.as_deref()))
    }
}

/// Epoch seconds (with a fraction) to epoch milliseconds, rounded to the
/// nearest millisecond so that `1795970136.158` is `...158`, not `...157`.
fn seconds_to_millis(seconds: f64) -> Result<i64, RecordError> {
    // Year 1970 to year 9999: anything else is not a creation time.
    if !seconds.is_finite() || !(0.0..=253_402_300_799.0).contains(&seconds) {
        return Err(RecordError::BadCreationTime(seconds));
    }
    Ok((seconds * 1000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODIFY: &str = r##"{"eventID":"e1","eventName":"MODIFY","dynamodb":{
        "ApproximateCreationDateTime":1795970136.158,
        "Keys":{"PK":{"S":"ns/BUCKET#a#r#0"},"SK":{"S":"#STATE"}},
        "SequenceNumber":"1100000000017454423835","SizeBytes":10,
        "NewImage":{"PK":{"S":"ns/BUCKET#a#r#0"},"b_tpm_tc":{"N":"5"},"cascade":{"BOOL":true},"m":{"M":{"x":{"N":"1"}}}},
        "OldImage":{"b_tpm_tc":{"N":"1"}}}}"##;

    #[test]
    fn parses_a_modify_record() {
        let r = StreamRecord::parse(MODIFY).unwrap();
        assert_eq!(r.event_name, EventName::Modify);
        assert_eq!(r.created_ms, Some(1_795_970_136_158));
        assert_eq!(r.sequence_number.as_stream(), "1100000000017454423835");
        assert_eq!(r.sequence_number.padded().len(), 40);
        assert_eq!(r.partition_key(), Some("ns/BUCKET#a#r#0"));
        assert_eq!(r.sort_key(), Some("#STATE"));
        let new = r.new_image.as_ref().unwrap();
        assert_eq!(new.int("b_tpm_tc").unwrap(), Some(5));
        assert!(new.contains("cascade"));
        assert!(matches!(new.int("cascade"), Err(AttrError::WrongType(_, "N"))));
    }

    #[test]
    fn padded_sequence_numbers_order_numerically() {
        let a = SequenceNumber::parse("999").unwrap();
        let b = SequenceNumber::parse("1000").unwrap();
        assert!(a < b);
        assert!(a.padded() < b.padded());
        assert_eq!(SequenceNumber::from_padded(b.padded()), Some(b));
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        assert!(matches!(StreamRecord::parse("{"), Err(RecordError::Json(_))));
        assert!(matches!(StreamRecord::parse(r##"{"eventName":"MODIFY"}"##), Err(RecordError::MissingChange)));
        assert!(matches!(
            StreamRecord::parse(r##"{"dynamodb":{"SequenceNumber":"12a"}}"##),
            Err(RecordError::BadSequenceNumber(_))
        ));
        assert!(matches!(
            StreamRecord::parse(r##"{"dynamodb":{"SequenceNumber":"1","ApproximateCreationDateTime":-5}}"##),
            Err(RecordError::BadCreationTime(_))
        ));
        assert!(matches!(
            StreamRecord::parse(r##"{"dynamodb":{"SequenceNumber":"1","NewImage":{"a":{"N":5}}}}"##),
            Err(RecordError::Json(_))
        ));
    }
}
