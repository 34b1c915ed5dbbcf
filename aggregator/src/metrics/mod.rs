//! Overdraw and health metrics: Embedded Metric Format documents on stdout
//! (in Lambda, CloudWatch Logs turns them into metrics at no request cost), or
//! the same data through PutMetricData for the poller outside Lambda.

#[cfg(feature = "cloudwatch")]
pub mod cloudwatch;

use crate::plan::TransitionKind;
use serde_json::{Map, Value, json};
use std::future::Future;
use std::io::Write;

pub const DEFAULT_NAMESPACE: &str = "ZaeLimiter";
pub const RECORDS_SKIPPED: &str = "RecordsSkipped";
/// Stream records a batch handled (for the dashboard: what goes through).
pub const RECORDS_PROCESSED: &str = "RecordsProcessed";
/// Writes DynamoDB refused as invalid, or whose keys it would refuse:
/// skipped, never redelivered (also in `RecordsSkipped`). A refused usage
/// write loses a batch's use of a resource-minute for every entity.
pub const WRITES_REFUSED: &str = "WritesRefused";
/// Usage left out of the snapshots: a snapshot item DynamoDB rejected, or
/// the counter of a limit whose name is a snapshot attribute.
pub const USAGE_SKIPPED: &str = "UsageSkipped";
/// Refill writes dropped after their retries.
pub const REFILLS_DROPPED: &str = "RefillsDropped";
/// Audit removals left out of the archive: a key that is not the table's own
/// audit partition, an unregistered namespace, or an object S3 can never take.
pub const ARCHIVE_SKIPPED: &str = "ArchiveSkipped";
/// Shard-count propagations stopped on a sibling that failed to read or parse
/// (retried by a later batch).
pub const PROPAGATIONS_FAILED: &str = "PropagationsFailed";
/// One per controller tick of the table: the alarm on a stopped controller
/// watches it.
pub const CONTROLLER_TICKS: &str = "ControllerTicks";
/// Per tick where anything is adaptive: 1 when blind (no canary written two
/// ticks ago or later came through on every shard), else 0.
pub const CONTROLLER_BLIND: &str = "ControllerBlind";
/// Seconds from the latest canary tick through on every shard to the tick.
pub const CANARY_LAG: &str = "CanaryLag";
/// Milliseconds a stream batch took in the handler (not the controller's
/// scheduled ticks, which run to their deadline by design): the duration
/// alarm's metric.
pub const STREAM_BATCH_DURATION: &str = "StreamBatchDuration";
/// Namespaces whose tick failed.
pub const NAMESPACE_TICKS_FAILED: &str = "NamespaceTicksFailed";
/// Per namespace, resource and limit: the last complete minute's use over
/// its estimated capacity, the factor in force, and 1 while its stamping
/// lap is behind (not through, or buckets owed).
pub const RESOURCE_UTILIZATION: &str = "ResourceUtilization";
pub const ADAPTIVE_FACTOR: &str = "AdaptiveFactor";
pub const STAMPING_BEHIND: &str = "StampingBehind";
/// Under `share: demand`, per namespace, resource and limit: the entities
/// found saturated in the minute shared, and those held above base.
pub const SATURATED_ENTITIES: &str = "SaturatedEntities";
pub const RAISED_ENTITIES: &str = "RaisedEntities";
/// Entities a demand minute left out past its cap (1,000 per resource and
/// minute): they hold their allocations for that minute.
pub const DEMAND_OVERFLOW: &str = "DemandOverflow";
/// The dimensions of the adaptive metrics.
pub const ADAPTIVE_DIMENSIONS: [&[&str]; 2] = [
    &["Table", "Namespace", "Resource", "Limit"],
    &["Table", "Namespace"],
];

/// Every overdraw metric is published under these dimension sets, so that an
/// alarm can watch a whole table, one resource, or one resource's limit. The
/// entity is never a dimension: its cardinality is unbounded.
pub const TRANSITION_DIMENSIONS: [&[&str]; 3] = [
    &["Table"],
    &["Table", "Resource"],
    &["Table", "Resource", "Limit"],
];

#[derive(Debug, Clone, PartialEq)]
pub enum MetricEvent {
    Transition {
        kind: TransitionKind,
        /// When the metric is published: processing time, so that a backlog
        /// never lands datapoints in periods an alarm has already evaluated.
        at_ms: i64,
        /// When the transition happened (the stream record's time).
        transition_ms: i64,
        namespace_id: String,
        entity: String,
        resource: String,
        limit: String,
        shard: u32,
        balance: i64,
        event_id: String,
    },
    /// A table-wide count of a batch (`name` says which: records skipped or
    /// processed, usage skipped, refills dropped, archive removals skipped,
    /// propagations failed).
    Count {
        at_ms: i64,
        name: &'static str,
        count: u64,
    },
    ControllerTick {
        at_ms: i64,
    },
    /// A table-wide measure (`name` says which): of the controller's tick,
    /// or a stream batch's duration.
    Controller {
        at_ms: i64,
        name: &'static str,
        value: f64,
    },
    /// An adaptive target's measure (`name` says which).
    Adaptive {
        at_ms: i64,
        name: &'static str,
        namespace: String,
        resource: String,
        limit: String,
        value: f64,
    },
}

impl MetricEvent {
    pub fn name(&self) -> &'static str {
        match self {
            MetricEvent::Transition { kind, .. } => kind.metric(),
            MetricEvent::ControllerTick { .. } => CONTROLLER_TICKS,
            MetricEvent::Count { name, .. }
            | MetricEvent::Controller { name, .. }
            | MetricEvent::Adaptive { name, .. } => name,
        }
    }

    /// The CloudWatch unit: counts, except the adaptive ratios and the lag.
    pub fn unit(&self) -> &'static str {
        match self {
            MetricEvent::Adaptive { .. } => "None",
            MetricEvent::Controller { name, .. } if *name == CANARY_LAG => "Seconds",
            MetricEvent::Controller { name, .. } if *name == STREAM_BATCH_DURATION => {
                "Milliseconds"
            }
            MetricEvent::Controller { name, .. } if *name == CONTROLLER_BLIND => "None",
            _ => "Count",
        }
    }

    pub fn value(&self) -> f64 {
        match self {
            MetricEvent::Transition { .. } | MetricEvent::ControllerTick { .. } => 1.0,
            MetricEvent::Adaptive { value, .. } | MetricEvent::Controller { value, .. } => *value,
            MetricEvent::Count { count, .. } => *count as f64,
        }
    }

    pub fn at_ms(&self) -> i64 {
        match self {
            MetricEvent::Transition { at_ms, .. }
            | MetricEvent::Count { at_ms, .. }
            | MetricEvent::ControllerTick { at_ms }
            | MetricEvent::Controller { at_ms, .. }
            | MetricEvent::Adaptive { at_ms, .. } => *at_ms,
        }
    }

    /// Dimension name and value pairs, and the dimension sets to publish under.
    pub fn dimensions<'a>(
        &'a self,
        table: &'a str,
    ) -> (Vec<(&'static str, &'a str)>, Vec<&'static [&'static str]>) {
        let per_limit = |resource: &'a String, limit: &'a String| {
            vec![
                ("Table", table),
                ("Resource", resource.as_str()),
                ("Limit", limit.as_str()),
            ]
        };
        match self {
            MetricEvent::Transition {
                resource, limit, ..
            } => (per_limit(resource, limit), TRANSITION_DIMENSIONS.to_vec()),
            MetricEvent::Adaptive {
                namespace,
                resource,
                limit,
                ..
            } => {
                let mut dimensions = per_limit(resource, limit);
                dimensions.insert(1, ("Namespace", namespace.as_str()));
                (dimensions, ADAPTIVE_DIMENSIONS.to_vec())
            }
            MetricEvent::Count { .. }
            | MetricEvent::ControllerTick { .. }
            | MetricEvent::Controller { .. } => (vec![("Table", table)], vec![&["Table"]]),
        }
    }
}

/// One EMF document for one event.
pub fn emf_document(metric_namespace: &str, table: &str, event: &MetricEvent) -> Value {
    let (dimensions, sets) = event.dimensions(table);
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({
            "Timestamp": event.at_ms(),
            "CloudWatchMetrics": [{
                "Namespace": metric_namespace,
                "Dimensions": sets,
                "Metrics": [{"Name": event.name(), "Unit": event.unit()}],
            }],
        }),
    );
    for (name, value) in dimensions {
        doc.insert(name.into(), Value::String(value.into()));
    }
    doc.insert(event.name().into(), json!(event.value()));
    if let MetricEvent::Transition {
        namespace_id,
        entity,
        shard,
        balance,
        event_id,
        transition_ms,
        ..
    } = event
    {
        doc.insert("TransitionTime".into(), json!(transition_ms));
        doc.insert("EntityId".into(), json!(entity));
        doc.insert("NamespaceId".into(), json!(namespace_id));
        doc.insert("Shard".into(), json!(shard));
        doc.insert("Balance".into(), json!(balance));
        doc.insert("AuditEventId".into(), json!(event_id));
    }
    Value::Object(doc)
}

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("writing EMF to stdout: {0}")]
    Stdout(#[from] std::io::Error),
    #[error("PutMetricData to namespace {namespace}: {message}")]
    PutMetricData { namespace: String, message: String },
}

pub trait MetricSink: Send + Sync {
    fn publish(
        &self,
        events: &[MetricEvent],
    ) -> impl Future<Output = Result<(), MetricsError>> + Send;
}

/// EMF, one document per line, to stdout.
pub struct EmfStdout {
    pub namespace: String,
    pub table: String,
}

impl MetricSink for EmfStdout {
    async fn publish(&self, events: &[MetricEvent]) -> Result<(), MetricsError> {
        let mut out = std::io::stdout().lock();
        for event in events {
            writeln!(out, "{}", emf_document(&self.namespace, &self.table, event))?;
        }
        out.flush()?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;

/// EMF or PutMetricData (with the `cloudwatch` feature), chosen at start-up.
pub enum SelectedSink {
    Emf(EmfStdout),
    #[cfg(feature = "cloudwatch")]
    CloudWatch(cloudwatch::CloudWatchSink),
}

impl MetricSink for SelectedSink {
    async fn publish(&self, events: &[MetricEvent]) -> Result<(), MetricsError> {
        match self {
            SelectedSink::Emf(sink) => sink.publish(events).await,
            #[cfg(feature = "cloudwatch")]
            SelectedSink::CloudWatch(sink) => sink.publish(events).await,
        }
    }
}
