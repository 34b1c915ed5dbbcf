//! Overdraw and health metrics: Embedded Metric Format documents on stdout
//! (in Lambda, CloudWatch Logs turns them into metrics at no request cost), or
//! the same data through PutMetricData for the poller outside Lambda.

use crate::plan::TransitionKind;
use serde_json::{Map, Value, json};
use std::future::Future;
use std::io::Write;

pub const DEFAULT_NAMESPACE: &str = "ZaeLimiter";
pub const RECORDS_SKIPPED: &str = "RecordsSkipped";

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
        at_ms: i64,
        namespace_id: String,
        entity: String,
        resource: String,
        limit: String,
        shard: u32,
        balance: i64,
        event_id: String,
    },
    RecordsSkipped {
        at_ms: i64,
        count: u64,
    },
}

impl MetricEvent {
    pub fn name(&self) -> &'static str {
        match self {
            MetricEvent::Transition { kind, .. } => kind.metric(),
            MetricEvent::RecordsSkipped { .. } => RECORDS_SKIPPED,
        }
    }

    pub fn value(&self) -> f64 {
        match self {
            MetricEvent::Transition { .. } => 1.0,
            MetricEvent::RecordsSkipped { count, .. } => *count as f64,
        }
    }

    pub fn at_ms(&self) -> i64 {
        match self {
            MetricEvent::Transition { at_ms, .. } | MetricEvent::RecordsSkipped { at_ms, .. } => {
                *at_ms
            }
        }
    }

    /// Dimension name and value pairs, and the dimension sets to publish under.
    pub fn dimensions<'a>(
        &'a self,
        table: &'a str,
    ) -> (Vec<(&'static str, &'a str)>, Vec<&'static [&'static str]>) {
        match self {
            MetricEvent::Transition {
                resource, limit, ..
            } => (
                vec![
                    ("Table", table),
                    ("Resource", resource.as_str()),
                    ("Limit", limit.as_str()),
                ],
                TRANSITION_DIMENSIONS.to_vec(),
            ),
            MetricEvent::RecordsSkipped { .. } => (vec![("Table", table)], vec![&["Table"]]),
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
                "Metrics": [{"Name": event.name(), "Unit": "Count"}],
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
        ..
    } = event
    {
        doc.insert("EntityId".into(), json!(entity));
        doc.insert("NamespaceId".into(), json!(namespace_id));
        doc.insert("Shard".into(), json!(shard));
        doc.insert("Balance".into(), json!(balance));
        doc.insert("AuditEventId".into(), json!(event_id));
    }
    Value::Object(doc)
}

/// Checks a document against the EMF specification's structural rules: the
/// `_aws` metadata with a millisecond `Timestamp` and 1 to 100 directives; a
/// `Namespace` of 1 to 255 characters; dimension sets of at most 30 keys, each
/// naming a top-level string member; 1 to 100 metrics, each naming a top-level
/// number (or array of at most 100 numbers), with a valid unit and resolution.
pub fn validate_emf(doc: &Value) -> Result<(), String> {
    const UNITS: [&str; 27] = [
        "Seconds",
        "Microseconds",
        "Milliseconds",
        "Bytes",
        "Kilobytes",
        "Megabytes",
        "Gigabytes",
        "Terabytes",
        "Bits",
        "Kilobits",
        "Megabits",
        "Gigabits",
        "Terabits",
        "Percent",
        "Count",
        "Bytes/Second",
        "Kilobytes/Second",
        "Megabytes/Second",
        "Gigabytes/Second",
        "Terabytes/Second",
        "Bits/Second",
        "Kilobits/Second",
        "Megabits/Second",
        "Gigabits/Second",
        "Terabits/Second",
        "Count/Second",
        "None",
    ];
    let root = doc.as_object().ok_or("the document is not a JSON object")?;
    let aws = root
        .get("_aws")
        .and_then(Value::as_object)
        .ok_or("no `_aws` object")?;
    match aws.get("Timestamp") {
        Some(Value::Number(n)) if n.as_i64().is_some_and(|t| t >= 0) => {}
        _ => return Err("`_aws.Timestamp` is not a non-negative integer of milliseconds".into()),
    }
    let directives = aws
        .get("CloudWatchMetrics")
        .and_then(Value::as_array)
        .ok_or("no `_aws.CloudWatchMetrics` array")?;
    if directives.is_empty() || directives.len() > 100 {
        return Err(format!(
            "{} metric directives (1 to 100 allowed)",
            directives.len()
        ));
    }
    for directive in directives {
        let namespace = directive
            .get("Namespace")
            .and_then(Value::as_str)
            .ok_or("a directive has no Namespace string")?;
        if namespace.is_empty() || namespace.len() > 255 {
            return Err(format!(
                "Namespace `{namespace}` is not 1 to 255 characters"
            ));
        }
        let sets = directive
            .get("Dimensions")
            .and_then(Value::as_array)
            .ok_or("a directive has no Dimensions array")?;
        for set in sets {
            let keys = set.as_array().ok_or("a dimension set is not an array")?;
            if keys.len() > 30 {
                return Err(format!(
                    "a dimension set has {} keys (30 allowed)",
                    keys.len()
                ));
            }
            for key in keys {
                let key = key.as_str().ok_or("a dimension key is not a string")?;
                match root.get(key) {
                    Some(Value::String(v)) if !v.is_empty() && v.len() <= 1024 => {}
                    _ => {
                        return Err(format!(
                            "dimension `{key}` is not a top-level string member of 1 to 1024 characters"
                        ));
                    }
                }
            }
        }
        let metrics = directive
            .get("Metrics")
            .and_then(Value::as_array)
            .ok_or("a directive has no Metrics array")?;
        if metrics.is_empty() || metrics.len() > 100 {
            return Err(format!(
                "{} metrics in a directive (1 to 100 allowed)",
                metrics.len()
            ));
        }
        for metric in metrics {
            let name = metric
                .get("Name")
                .and_then(Value::as_str)
                .ok_or("a metric has no Name string")?;
            if name.is_empty() || name.len() > 255 {
                return Err(format!("metric name `{name}` is not 1 to 255 characters"));
            }
            if let Some(unit) = metric.get("Unit")
                && !unit.as_str().is_some_and(|u| UNITS.contains(&u))
            {
                return Err(format!(
                    "metric `{name}` has unit {unit}, not a CloudWatch unit"
                ));
            }
            if let Some(resolution) = metric.get("StorageResolution")
                && !matches!(resolution.as_i64(), Some(1 | 60))
            {
                return Err(format!(
                    "metric `{name}` has StorageResolution {resolution}, not 1 or 60"
                ));
            }
            match root.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(values))
                    if values.len() <= 100 && values.iter().all(Value::is_number) => {}
                _ => return Err(format!("metric `{name}` has no top-level number member")),
            }
        }
    }
    Ok(())
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
