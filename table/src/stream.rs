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
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventName {
    Insert,
    Modify,
    Remove,
    Other,
}

/// A JSON string borrowed from the event text when it has no escapes, owned
/// when it does. (`Option<Cow<str>>` fields would always allocate: serde
/// borrows only a bare `Cow<str>` field.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Visit(std::marker::PhantomData))
    }
}

/// One attribute in wire format. Only `S`, `N` and `BOOL` carry meaning for
/// the server side; any other member (M, L, ...) is recorded as present.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct WireValue<'a> {
    #[serde(rename = "S", borrow, default)]
    pub s: Option<Text<'a>>,
    #[serde(rename = "N", borrow, default)]
    pub n: Option<Text<'a>>,
    #[serde(rename = "BOOL", default)]
    pub bool: Option<bool>,
}

/// An item image: attribute name to value, in wire order. A list rather than a
/// hash map: images are small, read once, and mostly scanned whole, so hashing
/// every name would cost more than the few look-ups save.
#[derive(Debug, Clone, Default)]
pub struct Image<'a>(pub Vec<(Text<'a>, WireValue<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Image<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Entries<'a> {
            type Value = Image<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of attribute names to wire values")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(40));
                while let Some(entry) = map.next_entry::<Text<'a>, WireValue<'a>>()? {
                    entries.push(entry);
                }
                Ok(Image(entries))
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AttrError {
    #[error("attribute `{0}` is missing")]
    Missing(String),
    #[error("attribute `{0}` is not of type {1}")]
    WrongType(String, &'static str),
    #[error("attribute `{name}`: {source}")]
    Number { name: String, source: NumberError },
    /// A number the client never writes there (any principal with the
    /// acquire policy may write any value on its own bucket).
    #[error("attribute `{name}` is {value}, outside {lo}..={hi}")]
    OutOfRange {
        name: String,
        value: i64,
        lo: i64,
        hi: i64,
    },
}

impl WireValue<'_> {
    /// The value as an integer `N`; `name` is the attribute's, for the error.
    pub fn int(&self, name: &str) -> Result<i64, AttrError> {
        match &self.n {
            Some(n) => milli::parse_int(n).map_err(|source| AttrError::Number {
                name: name.into(),
                source,
            }),
            None => Err(AttrError::WrongType(name.into(), "N")),
        }
    }
}

impl<'a> Image<'a> {
    pub fn get(&self, name: &str) -> Option<&WireValue<'a>> {
        self.0.iter().find(|(k, _)| &**k == name).map(|(_, v)| v)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Name and value of every attribute.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &WireValue<'a>)> {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    /// An `S` attribute; `None` when absent.
    pub fn string(&self, name: &str) -> Result<Option<&str>, AttrError> {
        match self.get(name) {
            None => Ok(None),
            Some(WireValue { s: Some(s), .. }) => Ok(Some(s)),
            Some(_) => Err(AttrError::WrongType(name.into(), "S")),
        }
    }

    /// A `BOOL` attribute; `None` when absent.
    pub fn boolean(&self, name: &str) -> Result<Option<bool>, AttrError> {
        match self.get(name) {
            None => Ok(None),
            Some(WireValue { bool: Some(b), .. }) => Ok(Some(*b)),
            Some(_) => Err(AttrError::WrongType(name.into(), "BOOL")),
        }
    }

    /// An `N` attribute holding an integer; `None` when absent.
    pub fn int(&self, name: &str) -> Result<Option<i64>, AttrError> {
        self.get(name).map(|attr| attr.int(name)).transpose()
    }
}

/// A stream sequence number: opaque text to the stream, a number to us.
///
/// The text is kept exactly as the stream gave it, because the stream refuses
/// any other spelling of the same position (DynamoDB Local numbers records
/// `000000000000000000076` and refuses `76`: at least 21 digits). Positions
/// are compared by a copy zero-padded to a fixed width, so that string order
/// is numeric order, in memory and in DynamoDB condition expressions.
#[derive(Debug, Clone)]
pub struct SequenceNumber {
    padded: String,
    text: String,
}

impl SequenceNumber {
    /// DynamoDB documents sequence numbers as 21 to 40 decimal digits.
    pub const WIDTH: usize = 40;

    pub fn parse(text: &str) -> Result<SequenceNumber, RecordError> {
        if text.is_empty() || text.len() > Self::WIDTH || !text.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(RecordError::BadSequenceNumber(
                text.chars().take(64).collect(),
            ));
        }
        Ok(SequenceNumber {
            padded: format!("{text:0>width$}", width = Self::WIDTH),
            text: text.into(),
        })
    }

    /// The padded form, as stored in snapshot watermarks and hashed into
    /// event ids (both already written by earlier versions in this form).
    pub fn padded(&self) -> &str {
        &self.padded
    }

    /// The text the stream gave: what GetShardIterator, a checkpoint, `--from`
    /// and Lambda's `itemIdentifier` need.
    pub fn as_stream(&self) -> &str {
        &self.text
    }

    /// Reads back a padded watermark; `None` if it is not one. Its stream text
    /// is lost, so it keeps the padded text (a watermark is only compared,
    /// never sent to the stream).
    pub fn from_padded(text: &str) -> Option<SequenceNumber> {
        (text.len() == Self::WIDTH && text.bytes().all(|b| b.is_ascii_digit())).then(|| {
            SequenceNumber {
                padded: text.into(),
                text: text.into(),
            }
        })
    }
}

// One position however it is spelled: equality, order and hash follow the
// padded form, never the text.
impl PartialEq for SequenceNumber {
    fn eq(&self, other: &Self) -> bool {
        self.padded == other.padded
    }
}

impl Eq for SequenceNumber {}

impl std::hash::Hash for SequenceNumber {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.padded.hash(state);
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.padded.cmp(&other.padded)
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
    event_id: Option<Text<'a>>,
    #[serde(rename = "eventName", borrow, default)]
    event_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    dynamodb: Option<WireChange<'a>>,
    #[serde(rename = "userIdentity", borrow, default)]
    user_identity: Option<WireIdentity<'a>>,
}

/// Who made the change; DynamoDB's TTL deletes name the service.
#[derive(Deserialize)]
struct WireIdentity<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(rename = "principalId", borrow, default)]
    principal: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct WireChange<'a> {
    #[serde(rename = "ApproximateCreationDateTime", default)]
    approximate_creation: Option<f64>,
    #[serde(rename = "SequenceNumber", borrow, default)]
    sequence_number: Option<Text<'a>>,
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
    /// The change was DynamoDB's own TTL deletion (`userIdentity` names the
    /// service), not a client's delete.
    pub removed_by_ttl: bool,
    new_image: Option<Image<'a>>,
    old_image: Option<Image<'a>>,
}

/// The `userIdentity` of a TTL deletion.
const TTL_IDENTITY: (&str, &str) = ("Service", "dynamodb.amazonaws.com");

impl<'a> StreamRecord<'a> {
    pub fn parse(text: &'a str) -> Result<StreamRecord<'a>, RecordError> {
        let wire: WireRecord<'a> = serde_json::from_str(text)?;
        let change = wire.dynamodb.ok_or(RecordError::MissingChange)?;
        let sequence_number = SequenceNumber::parse(
            change
                .sequence_number
                .as_deref()
                .ok_or(RecordError::MissingSequenceNumber)?,
        )?;
        let created_ms = change
            .approximate_creation
            .map(seconds_to_millis)
            .transpose()?;
        let event_name = match wire.event_name.as_deref() {
            Some("INSERT") => EventName::Insert,
            Some("MODIFY") => EventName::Modify,
            Some("REMOVE") => EventName::Remove,
            _ => EventName::Other,
        };
        let removed_by_ttl = wire.user_identity.is_some_and(|who| {
            (who.kind.as_deref(), who.principal.as_deref())
                == (Some(TTL_IDENTITY.0), Some(TTL_IDENTITY.1))
        });
        Ok(StreamRecord {
            event_id: wire.event_id.map(|t| t.0),
            event_name,
            sequence_number,
            removed_by_ttl,
            created_ms,
            keys: change.keys.unwrap_or_default(),
            new_image: change.new_image,
            old_image: change.old_image,
        })
    }

    /// The item after the change, if the record carries it.
    pub fn new_image(&self) -> Option<&Image<'a>> {
        self.new_image.as_ref()
    }

    /// The item before the change, if the record carries it.
    pub fn old_image(&self) -> Option<&Image<'a>> {
        self.old_image.as_ref()
    }

    /// The item's partition key (from `Keys`, which every stream record has).
    pub fn partition_key(&self) -> Option<&str> {
        self.keys.get("PK").and_then(|a| a.s.as_deref())
    }

    pub fn sort_key(&self) -> Option<&str> {
        self.keys.get("SK").and_then(|a| a.s.as_deref())
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
        let new = r.new_image().unwrap();
        assert_eq!(new.int("b_tpm_tc").unwrap(), Some(5));
        assert!(new.contains("cascade"));
        assert!(matches!(
            new.int("cascade"),
            Err(AttrError::WrongType(_, "N"))
        ));
    }

    #[test]
    fn strings_with_escapes_are_decoded_and_plain_ones_borrowed() {
        let r = StreamRecord::parse(
            r##"{"dynamodb":{"SequenceNumber":"1","Keys":{"PK":{"S":"ns/BUCKET#a\"b#r#0"}},"NewImage":{"x":{"S":"plain"}}}}"##,
        )
        .unwrap();
        assert_eq!(r.partition_key(), Some("ns/BUCKET#a\"b#r#0"));
        let plain = &r.new_image().unwrap().get("x").unwrap().s;
        assert!(matches!(plain, Some(Text(Cow::Borrowed("plain")))));
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
    fn a_sequence_number_keeps_the_text_the_stream_gave() {
        // DynamoDB Local 2.6 and 3.3 number records like this, and refuse `76`.
        let local = SequenceNumber::parse("000000000000000000076").unwrap();
        assert_eq!(local.as_stream(), "000000000000000000076");
        assert_eq!(local.to_string(), "000000000000000000076");
        let service = SequenceNumber::parse("4421584500000000017450439091").unwrap();
        assert_eq!(service.as_stream(), "4421584500000000017450439091");
        assert_eq!(
            SequenceNumber::parse("0").unwrap().as_stream(),
            "0",
            "no digit is invented either"
        );
    }

    #[test]
    fn positions_compare_as_numbers_whatever_their_spelling() {
        let local = SequenceNumber::parse("000000000000000000076").unwrap();
        let short = SequenceNumber::parse("76").unwrap();
        assert_eq!(local, short, "one position");
        let seen = std::collections::HashSet::from([local.clone()]);
        assert!(seen.contains(&short), "hashed as one position");
        assert!(short < SequenceNumber::parse("000000000000000000077").unwrap());
        assert!(
            SequenceNumber::parse("000000000000000000999").unwrap()
                < SequenceNumber::parse("1000").unwrap()
        );
        assert_eq!(local.padded(), short.padded());
    }

    #[test]
    fn a_padded_watermark_written_before_reads_back_and_compares() {
        // Watermarks already in tables are 40 digits, zero-padded.
        let stored = "0000000000000000004421584500000000017450";
        let mark = SequenceNumber::from_padded(stored).unwrap();
        assert_eq!(mark.padded(), stored);
        assert_eq!(
            mark,
            SequenceNumber::parse("4421584500000000017450").unwrap()
        );
        assert!(mark < SequenceNumber::parse("4421584500000000017451").unwrap());
        assert!(SequenceNumber::from_padded("76").is_none());
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        assert!(matches!(
            StreamRecord::parse("{"),
            Err(RecordError::Json(_))
        ));
        assert!(matches!(
            StreamRecord::parse(r##"{"eventName":"MODIFY"}"##),
            Err(RecordError::MissingChange)
        ));
        assert!(matches!(
            StreamRecord::parse(r##"{"dynamodb":{"SequenceNumber":"12a"}}"##),
            Err(RecordError::BadSequenceNumber(_))
        ));
        assert!(matches!(
            StreamRecord::parse(
                r##"{"dynamodb":{"SequenceNumber":"1","ApproximateCreationDateTime":-5}}"##
            ),
            Err(RecordError::BadCreationTime(_))
        ));
        assert!(matches!(
            StreamRecord::parse(
                r##"{"dynamodb":{"SequenceNumber":"1","NewImage":{"a":{"N":5}}}}"##
            ),
            Err(RecordError::Json(_))
        ));
    }
}
