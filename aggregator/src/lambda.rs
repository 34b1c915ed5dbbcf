//! The Lambda entry: a DynamoDB stream event in, batch-item failures out;
//! or the controller's scheduled event, one tick of adaptive limits.

use crate::control::StreamShards;
use crate::metrics::MetricSink;
use crate::write::Aggregator;
use lambda_runtime::LambdaEvent;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::time::{Duration, Instant};

use zae_table::store::Store;

/// The event with each record kept as raw JSON, so that one malformed record
/// is skipped on its own instead of failing the whole batch.
#[derive(Debug, Deserialize)]
pub struct StreamEvent {
    #[serde(rename = "Records", default)]
    pub records: Vec<Box<RawValue>>,
}

/// The answer: the event source mapping reads `batchItemFailures` (and
/// ignores the rest); `statusCode` and `body` are what the 0.17.0 function
/// returns, for whoever invokes it directly.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Response {
    #[serde(rename = "batchItemFailures")]
    pub batch_item_failures: Vec<ItemFailure>,
    #[serde(rename = "statusCode")]
    pub status_code: u16,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ItemFailure {
    #[serde(rename = "itemIdentifier")]
    pub item_identifier: String,
}

/// The reference's counts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Body {
    pub processed: usize,
    pub snapshots_updated: usize,
    pub refills_written: usize,
    pub events_archived: usize,
    pub errors: Vec<String>,
}

/// Retrying stops this long before the function's deadline, leaving time to
/// answer with the failures.
const DEADLINE_MARGIN: Duration = Duration::from_secs(3);
/// How long a scheduled tick waits for its canaries to come through.
const CANARY_WAIT: Duration = Duration::from_secs(15);

/// What tells a scheduled event from a stream's.
#[derive(Debug, Deserialize)]
struct Probe {
    #[serde(rename = "detail-type")]
    detail_type: Option<String>,
}

/// Either event: a scheduled one (EventBridge, `detail-type` "Scheduled
/// Event") runs a controller tick; anything else is a stream batch.
pub async fn dispatch<S: Store, M: MetricSink, C: StreamShards>(
    aggregator: &Aggregator<S>,
    sink: &M,
    shards: &C,
    event: LambdaEvent<Box<RawValue>>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let (raw, context) = (event.payload, event.context);
    let probe: Probe = serde_json::from_str(raw.get())?;
    if probe.detail_type.as_deref() == Some("Scheduled Event") {
        let remaining = zae_runtime::deadline::remaining(context.deadline);
        let tick = tick(aggregator, sink, shards, remaining).await?;
        return Ok(serde_json::json!({ "ticks": tick }));
    }
    let mut payload: StreamEvent = serde_json::from_str(raw.get())?;
    if let Some(table) = shards.table() {
        payload
            .records
            .retain(|record| !foreign(record.get(), table));
    }
    let response = handle(aggregator, sink, LambdaEvent::new(payload, context)).await?;
    Ok(serde_json::to_value(response)?)
}

/// Whether a record names another table's stream in `eventSourceARN`
/// (`arn:...:table/{name}/stream/...`): a misrouted direct invoke, ignored
/// and logged. A guard against mistakes, not attackers: whoever may invoke
/// the function may write that field too. A record without one is ours.
pub fn foreign(record: &str, table: &str) -> bool {
    #[derive(Deserialize)]
    struct Source<'a> {
        #[serde(rename = "eventSourceARN", borrow)]
        arn: Option<&'a str>,
    }
    let Some(arn) = serde_json::from_str::<Source<'_>>(record)
        .ok()
        .and_then(|s| s.arn)
    else {
        return false;
    };
    let named = arn
        .split_once(":table/")
        .map(|(_, rest)| rest.split('/').next().unwrap_or_default());
    let foreign = named.is_some_and(|name| name != table);
    if foreign {
        tracing::warn!(
            event_source = arn,
            table,
            "ignoring a record of another table's stream"
        );
    }
    foreign
}

/// One controller tick within `remaining`: its metrics are published
/// whatever happened; a namespace that failed fails the invocation after
/// that, so that the function's errors count it.
pub async fn tick<S: Store, M: MetricSink, C: StreamShards>(
    aggregator: &Aggregator<S>,
    sink: &M,
    shards: &C,
    remaining: Duration,
) -> Result<crate::control::TableTick, lambda_runtime::Error> {
    let controller = crate::control::Controller {
        store: aggregator.store(),
        shards,
        stop_at: Some(tokio::time::Instant::now() + remaining.saturating_sub(DEADLINE_MARGIN)),
        wait: Some(CANARY_WAIT.min(remaining / 4)),
    };
    let now_ms = chrono::Utc::now().timestamp_millis();
    let tick = match controller.tick_all(now_ms).await {
        Ok(tick) => tick,
        Err(e) => {
            let ticked = crate::control::TableTick {
                at_ms: now_ms,
                ..Default::default()
            };
            publish(sink, &crate::control::metrics(&ticked)).await;
            return Err(e.into());
        }
    };
    publish(sink, &crate::control::metrics(&tick)).await;
    tracing::info!(
        namespaces = tick.namespaces.len(),
        failed = tick.failed.len(),
        blind = tick.blind,
        "controller ticked"
    );
    if let Some((namespace, error)) = tick.failed.first() {
        return Err(format!(
            "the tick of {} namespace(s) failed; first, {namespace}: {error}",
            tick.failed.len()
        )
        .into());
    }
    Ok(tick)
}

async fn publish<M: MetricSink>(sink: &M, events: &[crate::metrics::MetricEvent]) {
    if let Err(e) = sink.publish(events).await {
        tracing::error!(error = %e, "publishing metrics failed");
    }
}

pub async fn handle<S: Store, M: MetricSink>(
    aggregator: &Aggregator<S>,
    sink: &M,
    event: LambdaEvent<StreamEvent>,
) -> Result<Response, lambda_runtime::Error> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let remaining = zae_runtime::deadline::remaining(event.context.deadline);
    let deadline = Instant::now() + remaining.saturating_sub(DEADLINE_MARGIN);
    let texts: Vec<&str> = event.payload.records.iter().map(|r| r.get()).collect();
    let principal = match event.context.invoked_function_arn.as_str() {
        "" => "zae-aggregator",
        arn => arn,
    };
    let started = Instant::now();
    let mut outcome = aggregator
        .process(&texts, principal, now_ms.div_euclid(1000), Some(deadline))
        .await;
    outcome
        .metrics
        .push(crate::metrics::MetricEvent::Controller {
            at_ms: now_ms,
            name: crate::metrics::STREAM_BATCH_DURATION,
            value: started.elapsed().as_secs_f64() * 1000.0,
        });
    publish(sink, &outcome.metrics).await;
    tracing::info!(stats = ?outcome.stats, first_failure = ?outcome.first_failure.as_ref().map(|s| s.as_stream().to_owned()), "batch processed");
    Ok(Response {
        batch_item_failures: outcome
            .first_failure
            .iter()
            .map(|failed| ItemFailure {
                item_identifier: failed.as_stream().to_owned(),
            })
            .collect(),
        status_code: 200,
        body: Body {
            processed: texts.len(),
            snapshots_updated: outcome.stats.snapshot_writes,
            refills_written: outcome.stats.refills_written,
            events_archived: outcome.stats.events_archived,
            errors: outcome.errors,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{RetryPolicy, Settings};
    use zae_table::Window;
    use zae_test_support::memory::MemoryStore;

    fn settings() -> Settings {
        Settings {
            windows: vec![Window::Hourly],
            snapshot_ttl_days: 90,
            concurrency: 4,
            retry: RetryPolicy::default(),
            refill: true,
        }
    }

    /// An invocation with a minute left, as Lambda gives one (a default
    /// context's deadline is already past: nothing would start).
    fn context() -> lambda_runtime::Context {
        let mut context = lambda_runtime::Context::default();
        context.deadline = (chrono::Utc::now().timestamp_millis() + 60_000) as u64;
        context
    }

    /// Discards what it is given.
    struct NoMetrics;

    impl MetricSink for NoMetrics {
        async fn publish(
            &self,
            _: &[crate::metrics::MetricEvent],
        ) -> Result<(), crate::metrics::MetricsError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn the_answer_carries_the_failures_for_the_mapping_and_the_references_counts() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/lambda_event_sample.json"
        ))
        .unwrap();
        let payload: StreamEvent = serde_json::from_str(&text).unwrap();
        let records = payload.records.len();
        let aggregator = Aggregator::new(MemoryStore::new(), settings());
        let event = LambdaEvent::new(payload, context());
        let answer = handle(&aggregator, &NoMetrics, event).await.unwrap();
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(json["batchItemFailures"], serde_json::json!([]));
        assert_eq!(json["statusCode"], 200);
        assert_eq!(json["body"]["processed"], records);
        assert!(
            json["body"]["snapshots_updated"].as_u64() > Some(0),
            "{json}"
        );

        // The shape the event source mapping reads when a record must be redelivered.
        let failed = Response {
            batch_item_failures: vec![ItemFailure {
                item_identifier: "1100000000017454423835".into(),
            }],
            ..answer
        };
        assert_eq!(
            serde_json::to_value(&failed).unwrap()["batchItemFailures"],
            serde_json::json!([{"itemIdentifier": "1100000000017454423835"}])
        );
    }

    /// Every UpdateItem fails as a throttle would, injected at the store seam
    /// (moto cannot throttle on demand): the batch reports its first record.
    struct Throttled;

    impl zae_test_support::faults::Faults for Throttled {
        fn before(
            &self,
            call: &zae_test_support::faults::Call<'_>,
        ) -> Option<zae_table::store::StoreError> {
            matches!(call, zae_test_support::faults::Call::Update(_)).then(|| {
                zae_table::store::StoreError::Retryable {
                    operation: "UpdateItem",
                    key: "injected".into(),
                    message: "ProvisionedThroughputExceededException".into(),
                }
            })
        }
    }

    #[tokio::test]
    async fn the_item_identifier_is_the_sequence_number_as_the_stream_gave_it() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/lambda_event_sample.json"
        ))
        .unwrap();
        let mut payload: serde_json::Value = serde_json::from_str(&text).unwrap();
        // DynamoDB Local's numbering: 21 digits, zero-padded.
        for (n, record) in payload["Records"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            record["dynamodb"]["SequenceNumber"] = format!("{:021}", 76 + n).into();
        }
        let records = payload["Records"].as_array().unwrap().len();
        let payload: StreamEvent = serde_json::from_value(payload).unwrap();
        let store = zae_test_support::faults::Injected {
            inner: MemoryStore::new(),
            faults: Throttled,
        };
        let mut settings = settings();
        settings.retry = RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        };
        let aggregator = Aggregator::new(store, settings);
        let answer = handle(
            &aggregator,
            &NoMetrics,
            LambdaEvent::new(payload, context()),
        )
        .await
        .unwrap();
        let failures = serde_json::to_value(&answer).unwrap()["batchItemFailures"].clone();
        let given: Vec<String> = (0..records).map(|n| format!("{:021}", 76 + n)).collect();
        let identifier = failures[0]["itemIdentifier"].as_str().unwrap_or_default();
        assert!(
            given.iter().any(|g| g == identifier),
            "{failures}: not a number the stream gave"
        );
    }

    #[test]
    fn a_record_of_another_tables_stream_is_foreign_and_one_without_a_source_is_not() {
        let of = |arn: &str| format!(r#"{{"eventSourceARN":"{arn}","eventName":"MODIFY"}}"#);
        let ours = "arn:aws:dynamodb:us-east-1:1:table/rate_limits/stream/2026-01-01T00:00:00.000";
        assert!(!foreign(&of(ours), "rate_limits"));
        assert!(foreign(
            &of(&ours.replace("rate_limits", "other")),
            "rate_limits"
        ));
        assert!(foreign(
            &of(&ours.replace("rate_limits", "rate_limits2")),
            "rate_limits"
        ));
        assert!(!foreign(r#"{"eventName":"MODIFY"}"#, "rate_limits"));
        assert!(
            !foreign("not json", "rate_limits"),
            "left to the planner to skip"
        );
    }

    /// A direct invoke with another table's records changes nothing.
    #[tokio::test]
    async fn a_batch_naming_another_tables_stream_is_ignored() {
        struct Named;
        impl StreamShards for Named {
            async fn open_shards(&self) -> Result<usize, String> {
                Ok(1)
            }
            fn table(&self) -> Option<&str> {
                Some("not-the-sample-table")
            }
        }
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/lambda_event_sample.json"
        ))
        .unwrap();
        let aggregator = Aggregator::new(MemoryStore::new(), settings());
        let raw = RawValue::from_string(text).unwrap();
        let event = LambdaEvent::new(raw, context());
        let answer = dispatch(&aggregator, &NoMetrics, &Named, event)
            .await
            .unwrap();
        assert_eq!(answer["body"]["processed"], 0, "{answer}");
        assert!(aggregator.store().items().is_empty());
    }

    /// `aws_lambda_events` (1.2.1 here) reads `.653` s as `.000653` s. The
    /// aggregator therefore parses records itself; this test notices the day
    /// the crate is fixed, so that the choice can be revisited.
    #[test]
    fn aws_lambda_events_still_misreads_creation_time_fractions_and_ours_does_not() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/sample_modify_record.pretty.json"
        ))
        .unwrap();
        let event = format!("{{\"Records\":[{text}]}}");
        let theirs: aws_lambda_events::event::dynamodb::Event =
            serde_json::from_str(&event).unwrap();
        let theirs_ms = theirs.records[0]
            .change
            .approximate_creation_date_time
            .timestamp_millis();
        let ours: StreamEvent = serde_json::from_str(&event).unwrap();
        let ours_ms = zae_table::StreamRecord::parse(ours.records[0].get())
            .unwrap()
            .created_ms
            .unwrap();
        let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
        let seconds = raw["dynamodb"]["ApproximateCreationDateTime"]
            .as_f64()
            .unwrap();
        assert!(
            seconds.fract() > 0.001,
            "the fixture has a millisecond fraction"
        );
        assert_eq!(ours_ms, (seconds * 1000.0).round() as i64);
        assert_eq!(
            theirs_ms,
            seconds.trunc() as i64 * 1000,
            "aws_lambda_events changed: re-check its timestamp parsing"
        );
    }
}
