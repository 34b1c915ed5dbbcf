//! Where the poller's records come from: a stream's shards, iterators into
//! them, and pages that carry the next iterator, as DynamoDB Streams serves them.

use crate::poll::PollError;
use serde_json::Value;
use std::future::Future;
use zae_table::SequenceNumber;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardInfo {
    pub id: String,
    pub parent: Option<String>,
    /// The shard's first sequence number, when the stream says.
    pub first: Option<SequenceNumber>,
    /// The last one: present once the shard is closed.
    pub last: Option<SequenceNumber>,
}

impl ShardInfo {
    pub fn open(id: &str, parent: Option<&str>) -> ShardInfo {
        ShardInfo {
            id: id.into(),
            parent: parent.map(Into::into),
            first: None,
            last: None,
        }
    }

    /// Whether `sequence` falls in this shard's range (an open shard's has no end).
    pub fn may_hold(&self, sequence: &SequenceNumber) -> bool {
        self.first.as_ref().is_some_and(|first| first <= sequence)
            && self.last.as_ref().is_none_or(|last| sequence <= last)
    }
}

/// Where an iterator starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    TrimHorizon,
    After(SequenceNumber),
    At(SequenceNumber),
}

impl Position {
    /// Whether a record at `sequence` lies at or past this position.
    pub fn admits(&self, sequence: &SequenceNumber) -> bool {
        match self {
            Position::TrimHorizon => true,
            Position::After(s) => sequence > s,
            Position::At(s) => sequence >= s,
        }
    }
}

/// One GetRecords answer. `next` is `None` once a closed shard is read to its
/// end; an open shard always has a next iterator, even after an empty page.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub records: Vec<Value>,
    pub next: Option<String>,
}

pub trait StreamSource: Send + Sync {
    fn stream_arn(&self) -> &str;
    fn shards(&self) -> impl Future<Output = Result<Vec<ShardInfo>, PollError>> + Send;
    /// An iterator at `from`; `None` when the shard has nothing more to give.
    /// A position older than the stream's retention is [`PollError::Trimmed`].
    fn iterator(
        &self,
        shard: &str,
        from: &Position,
    ) -> impl Future<Output = Result<Option<String>, PollError>> + Send;
    /// Up to `limit` records; an iterator past its lifetime is
    /// [`PollError::IteratorExpired`].
    fn page(
        &self,
        iterator: &str,
        limit: i32,
    ) -> impl Future<Output = Result<Page, PollError>> + Send;
}

/// Parents before children, so a key's older records are handled first.
pub fn parent_first(mut shards: Vec<ShardInfo>) -> Vec<ShardInfo> {
    let mut ordered: Vec<ShardInfo> = Vec::with_capacity(shards.len());
    while !shards.is_empty() {
        let ready = shards.iter().position(|s| {
            s.parent.as_ref().is_none_or(|p| {
                ordered.iter().any(|o| &o.id == p) || !shards.iter().any(|x| &x.id == p)
            })
        });
        ordered.push(shards.remove(ready.unwrap_or(0)));
    }
    ordered
}

/// The shard that `--from SEQUENCE` names: the one given, or the only one
/// whose range holds the sequence.
pub fn shard_of(
    shards: &[ShardInfo],
    sequence: &SequenceNumber,
    named: Option<&str>,
) -> Result<String, PollError> {
    if let Some(id) = named {
        return match shards.iter().any(|s| s.id == id) {
            true => Ok(id.to_owned()),
            false => Err(PollError::From(format!(
                "the stream has no shard {id} (trimmed, or another stream's)"
            ))),
        };
    }
    let holders: Vec<&str> = shards
        .iter()
        .filter(|s| s.may_hold(sequence))
        .map(|s| s.id.as_str())
        .collect();
    match holders[..] {
        [one] => Ok(one.to_owned()),
        [] => Err(PollError::From(format!(
            "no shard of the stream holds sequence {sequence} (trimmed, or another stream's); \
             name it with --shard"
        ))),
        _ => Err(PollError::From(format!(
            "shards {} may all hold sequence {sequence}; name one with --shard",
            holders.join(", ")
        ))),
    }
}
