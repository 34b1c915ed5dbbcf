//! `aggregator poll`: reads a table's stream through any endpoint and feeds the
//! handler as the Lambda event source mapping would: the same filter, the same
//! batch size, redelivery from a reported batch-item failure, and a checkpoint.

pub mod filter;
pub mod streams;

use crate::metrics::MetricSink;
use crate::write::Aggregator;
use filter::Filter;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;
use zae_table::SequenceNumber;
use zae_table::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("{operation} on {target}: {message}")]
    Stream {
        operation: &'static str,
        target: String,
        message: String,
    },
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

#[derive(Debug, Clone)]
pub struct ShardInfo {
    pub id: String,
    pub parent: Option<String>,
}

/// Where stream records come from.
pub trait StreamSource: Send + Sync {
    fn stream_arn(&self) -> &str;
    fn shards(&self) -> impl Future<Output = Result<Vec<ShardInfo>, PollError>> + Send;
    /// Up to `limit` records after `after` (from the start of the shard when
    /// `None`), each in the Lambda event's record shape.
    fn read_after(
        &self,
        shard: &str,
        after: Option<&SequenceNumber>,
        limit: i32,
    ) -> impl Future<Output = Result<Vec<Value>, PollError>> + Send;
}

#[derive(Debug, Clone)]
pub struct PollOptions {
    pub until_idle: bool,
    pub batch_size: usize,
    pub checkpoint: Option<PathBuf>,
    pub max_retries: u32,
    pub idle_wait: Duration,
    pub principal: String,
}

/// Position per stream shard: the last record whose effects are all written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    pub stream_arn: Option<String>,
    pub shards: BTreeMap<String, String>,
}

impl Checkpoint {
    pub fn load(path: &std::path::Path) -> Result<Checkpoint, PollError> {
        match std::fs::read_to_string(path) {
            Ok(text) if text.trim().is_empty() => Ok(Checkpoint::default()),
            Ok(text) => serde_json::from_str(&text).map_err(|e| PollError::Checkpoint {
                path: path.into(),
                message: format!("not a checkpoint: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Checkpoint::default()),
            Err(e) => Err(PollError::Checkpoint {
                path: path.into(),
                message: e.to_string(),
            }),
        }
    }

    /// Replaces the file whole, so a crash never leaves half a checkpoint.
    pub fn save(&self, path: &std::path::Path) -> Result<(), PollError> {
        let err = |e: std::io::Error| PollError::Checkpoint {
            path: path.into(),
            message: e.to_string(),
        };
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string_pretty(self).expect("a checkpoint serializes");
        std::fs::write(&tmp, text).map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
    }

    fn position(&self, shard: &str) -> Option<SequenceNumber> {
        self.shards
            .get(shard)
            .and_then(|s| SequenceNumber::parse(s).ok())
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct PollSummary {
    pub records_read: usize,
    pub records_passed_filter: usize,
    pub batches: usize,
    pub redeliveries: usize,
    pub snapshot_writes: usize,
    pub audit_events_written: usize,
    pub records_skipped: usize,
    /// Snapshot items rejected, and counters of limits named like snapshot attributes.
    pub usage_skipped: usize,
}

/// Parents before children, so a key's older records are handled first.
fn parent_first(mut shards: Vec<ShardInfo>) -> Vec<ShardInfo> {
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

fn record_sequence(record: &Value) -> Option<SequenceNumber> {
    record
        .pointer("/dynamodb/SequenceNumber")
        .and_then(Value::as_str)
        .and_then(|s| SequenceNumber::parse(s).ok())
}

pub async fn run<R, S, M>(
    source: &R,
    aggregator: &Aggregator<S>,
    sink: &M,
    options: &PollOptions,
) -> Result<PollSummary, PollError>
where
    R: StreamSource,
    S: Store,
    M: MetricSink,
{
    let filter = Filter::event_source_mapping();
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
    let mut summary = PollSummary::default();
    let read_limit = options.batch_size.clamp(100, 1000) as i32;

    loop {
        let mut progressed = false;
        for shard in parent_first(source.shards().await?) {
            loop {
                let after = checkpoint.position(&shard.id);
                let page: Vec<(SequenceNumber, Value)> = source
                    .read_after(&shard.id, after.as_ref(), read_limit)
                    .await?
                    .into_iter()
                    .filter_map(|r| record_sequence(&r).map(|s| (s, r)))
                    // An endpoint that hands back what was asked to skip has nothing new.
                    .filter(|(s, _)| after.as_ref().is_none_or(|a| s > a))
                    .collect();
                if page.is_empty() {
                    break;
                }
                progressed = true;
                // Fill one batch; records the filter drops are consumed all the same.
                let mut examined = Vec::new();
                let mut batch: Vec<(SequenceNumber, String)> = Vec::new();
                for (sequence, record) in page {
                    summary.records_read += 1;
                    if filter.matches(&record) {
                        batch.push((sequence.clone(), record.to_string()));
                    }
                    examined.push(sequence);
                    if batch.len() == options.batch_size {
                        break;
                    }
                }
                summary.records_passed_filter += batch.len();
                deliver(
                    aggregator,
                    sink,
                    options,
                    &shard.id,
                    &mut batch,
                    &examined,
                    &mut checkpoint,
                    &mut summary,
                )
                .await?;
                if let Some(last) = examined.last() {
                    checkpoint
                        .shards
                        .insert(shard.id.clone(), last.as_stream().to_owned());
                }
                if let Some(path) = &options.checkpoint {
                    checkpoint.save(path)?;
                }
            }
        }
        if !progressed {
            if options.until_idle {
                tracing::info!(summary = ?summary, "caught up with the stream");
                return Ok(summary);
            }
            tokio::time::sleep(options.idle_wait).await;
        }
    }
}

/// Invokes the handler on a batch until it reports no failure, redelivering
/// from the failed record each time as Lambda does.
#[allow(clippy::too_many_arguments)]
async fn deliver<S: Store, M: MetricSink>(
    aggregator: &Aggregator<S>,
    sink: &M,
    options: &PollOptions,
    shard: &str,
    batch: &mut Vec<(SequenceNumber, String)>,
    examined: &[SequenceNumber],
    checkpoint: &mut Checkpoint,
    summary: &mut PollSummary,
) -> Result<(), PollError> {
    let mut attempts = 0;
    while !batch.is_empty() {
        summary.batches += 1;
        let texts: Vec<&str> = batch.iter().map(|(_, t)| t.as_str()).collect();
        let now_s = chrono::Utc::now().timestamp();
        let outcome = aggregator
            .process(&texts, &options.principal, now_s, None)
            .await;
        summary.snapshot_writes += outcome.stats.snapshot_writes;
        summary.audit_events_written += outcome.stats.audit_events_written;
        summary.records_skipped += outcome.stats.skipped;
        summary.usage_skipped += outcome.stats.snapshots_rejected + outcome.stats.counters_left_out;
        if let Err(e) = sink.publish(&outcome.metrics).await {
            tracing::error!(error = %e, "publishing metrics failed");
        }
        tracing::info!(shard, stats = ?outcome.stats, "batch processed");
        let Some(failed) = outcome.first_failure else {
            return Ok(());
        };
        attempts += 1;
        if attempts > options.max_retries {
            return Err(PollError::RetriesExhausted {
                shard: shard.into(),
                sequence: failed.as_stream().into(),
                attempts,
                last_error: outcome.errors.first().cloned().unwrap_or_default(),
            });
        }
        summary.redeliveries += 1;
        if let Some(done) = examined.iter().filter(|s| **s < failed).max() {
            checkpoint
                .shards
                .insert(shard.into(), done.as_stream().into());
            if let Some(path) = &options.checkpoint {
                checkpoint.save(path)?;
            }
        }
        batch.retain(|(s, _)| *s >= failed);
        tokio::time::sleep(Duration::from_millis(200u64 << attempts.min(5))).await;
    }
    Ok(())
}

/// A DynamoDB Streams record from the SDK, in the shape Lambda delivers.
pub fn lambda_record(record: &aws_sdk_dynamodbstreams::types::Record, stream_arn: &str) -> Value {
    use aws_sdk_dynamodbstreams::types::StreamViewType;
    let mut change = Map::new();
    if let Some(c) = &record.dynamodb {
        if let Some(at) = &c.approximate_creation_date_time {
            change.insert(
                "ApproximateCreationDateTime".into(),
                json!(at.as_secs_f64()),
            );
        }
        for (name, image) in [
            ("Keys", &c.keys),
            ("NewImage", &c.new_image),
            ("OldImage", &c.old_image),
        ] {
            if let Some(image) = image {
                change.insert(name.into(), image_json(image));
            }
        }
        if let Some(s) = &c.sequence_number {
            change.insert("SequenceNumber".into(), json!(s));
        }
        if let Some(n) = c.size_bytes {
            change.insert("SizeBytes".into(), json!(n));
        }
        if let Some(v) = &c.stream_view_type {
            let view = match v {
                StreamViewType::NewAndOldImages => "NEW_AND_OLD_IMAGES",
                other => other.as_str(),
            };
            change.insert("StreamViewType".into(), json!(view));
        }
    }
    json!({
        "eventID": record.event_id,
        "eventName": record.event_name.as_ref().map(|e| e.as_str()),
        "eventVersion": record.event_version,
        "eventSource": record.event_source,
        "awsRegion": record.aws_region,
        "dynamodb": Value::Object(change),
        "eventSourceARN": stream_arn,
    })
}

fn image_json(
    image: &std::collections::HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>,
) -> Value {
    Value::Object(
        image
            .iter()
            .map(|(k, v)| (k.clone(), attribute_json(v)))
            .collect(),
    )
}

fn attribute_json(value: &aws_sdk_dynamodbstreams::types::AttributeValue) -> Value {
    use aws_sdk_dynamodbstreams::types::AttributeValue as A;
    use aws_smithy_types::base64;
    match value {
        A::S(s) => json!({"S": s}),
        A::N(n) => json!({"N": n}),
        A::B(b) => json!({"B": base64::encode(b.as_ref())}),
        A::Bool(b) => json!({"BOOL": b}),
        A::Null(n) => json!({"NULL": n}),
        A::Ss(v) => json!({"SS": v}),
        A::Ns(v) => json!({"NS": v}),
        A::Bs(v) => json!({"BS": v.iter().map(|b| base64::encode(b.as_ref())).collect::<Vec<_>>()}),
        A::L(items) => json!({"L": items.iter().map(attribute_json).collect::<Vec<_>>()}),
        A::M(map) => json!({"M": image_json(map)}),
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests;
