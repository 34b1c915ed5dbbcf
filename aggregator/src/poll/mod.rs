//! `aggregator poll`: reads a table's stream through any endpoint and feeds the
//! handler as the Lambda event source mapping would: the same filter, the same
//! batch size, redelivery from a reported batch-item failure, and a checkpoint.
//!
//! Each shard is read by following `NextShardIterator`, parents to their end
//! before their children; an empty page is not the end of a shard.

pub mod checkpoint;
pub mod filter;
pub mod record;
pub mod source;
pub mod streams;

use crate::metrics::MetricSink;
use crate::write::{Aggregator, BatchOutcome};
use checkpoint::Checkpoint;
use filter::Filter;
use serde::Serialize;
use serde_json::Value;
use source::{Position, ShardInfo, StreamSource, parent_first, shard_of};
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;
use zae_table::SequenceNumber;
use zae_table::store::Store;

pub use record::lambda_record;

#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("{operation} on {target}: {message}")]
    Stream {
        operation: &'static str,
        target: String,
        message: String,
    },
    #[error("shard {shard}: the iterator expired")]
    IteratorExpired { shard: String },
    #[error("shard {shard}: position {position} is older than the stream keeps")]
    Trimmed { shard: String, position: String },
    #[error("--from: {0}")]
    From(String),
    #[error("checkpoint {path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error(
        "record {sequence} of shard {shard} still fails after {attempts} attempts; last error: {last_error}. \
         The checkpoint stays before it; fix the cause and run again"
    )]
    RetriesExhausted {
        shard: String,
        sequence: String,
        attempts: u32,
        last_error: String,
    },
}

/// What the poller feeds: the aggregator, or a test's recorder.
pub trait Handler {
    fn handle(&self, records: &[&str], principal: &str) -> impl Future<Output = BatchOutcome>;
}

impl<S: Store> Handler for Aggregator<S> {
    async fn handle(&self, records: &[&str], principal: &str) -> BatchOutcome {
        let now_s = chrono::Utc::now().timestamp();
        self.process(records, principal, now_s, None).await
    }
}

/// `--from SEQUENCE [--shard ID]`: start one shard at a record, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub sequence: SequenceNumber,
    pub shard: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PollOptions {
    pub until_idle: bool,
    pub batch_size: usize,
    pub checkpoint: Option<PathBuf>,
    pub max_retries: u32,
    pub idle_wait: Duration,
    pub principal: String,
    pub start: Option<Start>,
    /// Pass audit removals too (the archive is on).
    pub archiving: bool,
}

/// Consecutive empty pages a pass follows on an open shard before it takes
/// the shard as caught up; the iterator is kept, so the next pass goes on
/// from there. (DynamoDB Streams may need several calls to reach records.)
pub const EMPTY_PAGES_PER_PASS: usize = 8;
/// Reopens of an expired iterator in a row before the poller gives up.
const REOPENS: usize = 3;

#[derive(Debug, Default, Clone, Serialize)]
pub struct PollSummary {
    pub records_read: usize,
    pub records_passed_filter: usize,
    /// Records with no sequence number the poller can read: skipped, logged.
    pub records_unreadable: usize,
    pub batches: usize,
    pub redeliveries: usize,
    pub snapshot_writes: usize,
    pub audit_events_written: usize,
    pub records_skipped: usize,
    /// Snapshot items rejected, and counters of limits named like snapshot attributes.
    pub usage_skipped: usize,
    /// Shards whose position had been trimmed; read again from their oldest record.
    pub positions_trimmed: usize,
    pub shards_finished: usize,
    /// The refill pass: writes landed and races lost; shard doublings,
    /// shards pre-created; removed audit events archived.
    pub refills_written: usize,
    pub refills_lost: usize,
    pub doublings: usize,
    pub shards_cloned: usize,
    pub events_archived: usize,
    /// Audit removals left out of the archive (not the table's own audit
    /// items, an unregistered namespace, or an object S3 refuses for good).
    pub archive_skipped: usize,
}

fn record_sequence(record: &Value) -> Option<SequenceNumber> {
    record
        .pointer("/dynamodb/SequenceNumber")
        .and_then(Value::as_str)
        .and_then(|s| SequenceNumber::parse(s).ok())
}

pub async fn run<R, H, M>(
    source: &R,
    handler: &H,
    sink: &M,
    options: &PollOptions,
) -> Result<PollSummary, PollError>
where
    R: StreamSource,
    H: Handler,
    M: MetricSink,
{
    let mut poller = Poller {
        source,
        handler,
        sink,
        options,
        checkpoint: open_checkpoint(source, options)?,
        summary: PollSummary::default(),
        iterators: HashMap::new(),
        start: None,
        floors: HashMap::new(),
        filter: Filter::event_source_mapping(options.archiving),
    };
    let mut shards = parent_first(source.shards().await?);
    if let Some(start) = &options.start {
        let shard = shard_of(&shards, &start.sequence, start.shard.as_deref())?;
        poller.checkpoint.finished.remove(&shard);
        poller.start = Some((shard, start.sequence.clone()));
    }
    loop {
        let mut progressed = false;
        for shard in &shards {
            if poller.ready(shard, &shards) {
                progressed |= poller.read_shard(shard).await?;
            }
        }
        if !progressed {
            if options.until_idle {
                tracing::info!(summary = ?poller.summary, "caught up with the stream");
                return Ok(poller.summary);
            }
            tokio::time::sleep(options.idle_wait).await;
        }
        shards = parent_first(source.shards().await?);
        let listed: BTreeSet<&str> = shards.iter().map(|s| s.id.as_str()).collect();
        poller.checkpoint.forget_gone(&listed);
    }
}

fn open_checkpoint<R: StreamSource>(
    source: &R,
    options: &PollOptions,
) -> Result<Checkpoint, PollError> {
    let mut checkpoint = match &options.checkpoint {
        Some(path) => Checkpoint::load(path)?,
        None => Checkpoint::default(),
    };
    if checkpoint
        .stream_arn
        .as_deref()
        .is_some_and(|arn| arn != source.stream_arn())
    {
        tracing::warn!(old = ?checkpoint.stream_arn, new = source.stream_arn(), "checkpoint is for another stream; starting this one from its beginning");
        checkpoint = Checkpoint::default();
    }
    checkpoint.stream_arn = Some(source.stream_arn().to_owned());
    Ok(checkpoint)
}

struct Poller<'a, R, H, M> {
    source: &'a R,
    handler: &'a H,
    sink: &'a M,
    options: &'a PollOptions,
    checkpoint: Checkpoint,
    summary: PollSummary,
    /// Where each shard's reading goes on: `None` once a closed shard is done.
    iterators: HashMap<String, Option<String>>,
    /// `--from`, until its shard is first opened.
    start: Option<(String, SequenceNumber)>,
    /// Where each shard's iterator was opened.
    floors: HashMap<String, Position>,
    filter: Filter,
}

impl<R: StreamSource, H: Handler, M: MetricSink> Poller<'_, R, H, M> {
    /// A shard is read once its parent is read to its end (or gone).
    fn ready(&self, shard: &ShardInfo, shards: &[ShardInfo]) -> bool {
        !self.checkpoint.finished.contains(&shard.id)
            && shard.parent.as_ref().is_none_or(|parent| {
                self.checkpoint.finished.contains(parent) || !shards.iter().any(|s| &s.id == parent)
            })
    }

    /// One pass over a shard: pages until it ends, or (an open shard) until it
    /// looks caught up. Whether it made progress: read a record, or ended.
    async fn read_shard(&mut self, shard: &ShardInfo) -> Result<bool, PollError> {
        let mut iterator = match self.iterators.remove(&shard.id) {
            Some(kept) => kept,
            None => self.open(&shard.id).await?,
        };
        let (mut read, mut empty, mut reopens) = (false, 0, 0);
        while let Some(current) = iterator {
            let limit = self.options.batch_size.clamp(100, 1000) as i32;
            let page = match self.source.page(&current, limit).await {
                Err(PollError::IteratorExpired { .. }) if reopens < REOPENS => {
                    reopens += 1;
                    iterator = self.open(&shard.id).await?;
                    continue;
                }
                other => other?,
            };
            reopens = 0;
            iterator = page.next;
            if page.records.is_empty() {
                empty += 1;
                // A closed shard is read to its end, however many empty pages it has.
                if empty >= EMPTY_PAGES_PER_PASS && iterator.is_some() && shard.last.is_none() {
                    self.iterators.insert(shard.id.clone(), iterator);
                    return Ok(read);
                }
                continue;
            }
            (read, empty) = (true, 0);
            self.consume(&shard.id, page.records).await?;
        }
        self.finish(&shard.id)?;
        // Its children may start now: another pass is due.
        Ok(true)
    }

    /// An iterator from `--from`, the checkpoint, or the shard's oldest record.
    async fn open(&mut self, shard: &str) -> Result<Option<String>, PollError> {
        // `--from` holds until a batch of the shard is delivered (an expired
        // iterator before that reopens there again).
        let from = match self.start.as_ref().filter(|(id, _)| id == shard) {
            Some((_, sequence)) => Position::At(sequence.clone()),
            None => match self.checkpoint.position(shard) {
                Some(sequence) => Position::After(sequence),
                None => Position::TrimHorizon,
            },
        };
        self.floors.insert(shard.into(), from.clone());
        match self.source.iterator(shard, &from).await {
            Err(PollError::Trimmed { shard, position }) => {
                tracing::error!(
                    shard,
                    position,
                    "the records after this position are gone (older than the stream keeps); \
                     their usage cannot be counted. Reading the shard from its oldest record"
                );
                self.summary.positions_trimmed += 1;
                self.floors.insert(shard.clone(), Position::TrimHorizon);
                self.source.iterator(&shard, &Position::TrimHorizon).await
            }
            other => other,
        }
    }

    fn finish(&mut self, shard: &str) -> Result<(), PollError> {
        tracing::info!(shard, "shard closed and read to its end");
        self.summary.shards_finished += 1;
        self.checkpoint.finished.insert(shard.into());
        self.save()
    }

    fn save(&self) -> Result<(), PollError> {
        match &self.options.checkpoint {
            Some(path) => self.checkpoint.save(path),
            None => Ok(()),
        }
    }

    /// Feeds a page to the handler in batches, checkpointing after each.
    async fn consume(&mut self, shard: &str, records: Vec<Value>) -> Result<(), PollError> {
        let floor = self.floors.get(shard).cloned();
        let mut examined: Vec<SequenceNumber> = Vec::new();
        let mut batch: Vec<(SequenceNumber, String)> = Vec::new();
        for record in records {
            let Some(sequence) = record_sequence(&record) else {
                self.summary.records_unreadable += 1;
                tracing::warn!(
                    shard,
                    "a stream record without a readable sequence number; skipped"
                );
                continue;
            };
            // An endpoint that hands back what was asked to skip has nothing new.
            if floor.as_ref().is_some_and(|f| !f.admits(&sequence)) {
                continue;
            }
            self.summary.records_read += 1;
            if self.filter.matches(&record) {
                batch.push((sequence.clone(), record.to_string()));
            }
            examined.push(sequence);
            if batch.len() == self.options.batch_size {
                self.flush(shard, &mut batch, &mut examined).await?;
            }
        }
        self.flush(shard, &mut batch, &mut examined).await
    }

    async fn flush(
        &mut self,
        shard: &str,
        batch: &mut Vec<(SequenceNumber, String)>,
        examined: &mut Vec<SequenceNumber>,
    ) -> Result<(), PollError> {
        let Some(last) = examined.last().cloned() else {
            return Ok(());
        };
        self.summary.records_passed_filter += batch.len();
        self.deliver(shard, batch, examined).await?;
        self.checkpoint.advance(shard, &last);
        self.start.take_if(|(id, _)| id == shard);
        batch.clear();
        examined.clear();
        self.save()
    }

    /// Invokes the handler on a batch until it reports no failure,
    /// redelivering from the failed record each time as Lambda does.
    async fn deliver(
        &mut self,
        shard: &str,
        batch: &mut Vec<(SequenceNumber, String)>,
        examined: &[SequenceNumber],
    ) -> Result<(), PollError> {
        let mut attempts = 0;
        while !batch.is_empty() {
            let texts: Vec<&str> = batch.iter().map(|(_, t)| t.as_str()).collect();
            let outcome = self.handler.handle(&texts, &self.options.principal).await;
            self.tally(shard, &outcome).await;
            let Some(failed) = outcome.first_failure else {
                return Ok(());
            };
            attempts += 1;
            if attempts > self.options.max_retries {
                return Err(PollError::RetriesExhausted {
                    shard: shard.into(),
                    sequence: failed.as_stream().into(),
                    attempts,
                    last_error: outcome.errors.first().cloned().unwrap_or_default(),
                });
            }
            self.summary.redeliveries += 1;
            if let Some(done) = examined.iter().filter(|s| **s < failed).max() {
                self.checkpoint.advance(shard, done);
                self.save()?;
            }
            batch.retain(|(s, _)| *s >= failed);
            tokio::time::sleep(Duration::from_millis(200u64 << attempts.min(5))).await;
        }
        Ok(())
    }

    async fn tally(&mut self, shard: &str, outcome: &BatchOutcome) {
        let (summary, stats) = (&mut self.summary, &outcome.stats);
        summary.batches += 1;
        summary.snapshot_writes += stats.snapshot_writes;
        summary.audit_events_written += stats.audit_events_written;
        summary.records_skipped += stats.skipped;
        summary.usage_skipped += stats.snapshots_rejected + stats.counters_left_out;
        summary.refills_written += stats.refills_written;
        summary.refills_lost += stats.refills_lost;
        summary.doublings += stats.doublings;
        summary.shards_cloned += stats.shards_cloned;
        summary.events_archived += stats.events_archived;
        summary.archive_skipped += stats.archive_skipped;
        if let Err(e) = self.sink.publish(&outcome.metrics).await {
            tracing::error!(error = %e, "publishing metrics failed");
        }
        tracing::info!(shard, stats = ?stats, "batch processed");
    }
}

#[cfg(test)]
mod tests;
