//! [`MetricSink`] over PutMetricData, for the poller outside Lambda, where
//! nothing turns EMF on stdout into metrics.

use crate::metrics::{MetricEvent, MetricSink, MetricsError};
use aws_sdk_cloudwatch::Client;
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};

/// PutMetricData takes at most this many data points per call.
const MAX_DATUMS_PER_CALL: usize = 1000;

pub struct CloudWatchSink {
    pub client: Client,
    pub namespace: String,
    pub table: String,
}

/// The data points for a set of events: one per event and dimension set,
/// mirroring what EMF extracts from the same events.
pub fn metric_data(table: &str, events: &[MetricEvent]) -> Vec<MetricDatum> {
    let mut data = Vec::new();
    for event in events {
        let (dimensions, sets) = event.dimensions(table);
        for set in sets {
            let dims = set
                .iter()
                .filter_map(|name| dimensions.iter().find(|(n, _)| n == name))
                .map(|(name, value)| Dimension::builder().name(*name).value(*value).build())
                .collect();
            data.push(
                MetricDatum::builder()
                    .metric_name(event.name())
                    .set_dimensions(Some(dims))
                    .value(event.value())
                    .unit(StandardUnit::from(event.unit()))
                    .timestamp(DateTime::from_millis(event.at_ms()))
                    .build(),
            );
        }
    }
    data
}

impl MetricSink for CloudWatchSink {
    async fn publish(&self, events: &[MetricEvent]) -> Result<(), MetricsError> {
        for chunk in metric_data(&self.table, events).chunks(MAX_DATUMS_PER_CALL) {
            self.client
                .put_metric_data()
                .namespace(&self.namespace)
                .set_metric_data(Some(chunk.to_vec()))
                .send()
                .await
                .map_err(|e| MetricsError::PutMetricData {
                    namespace: self.namespace.clone(),
                    message: zae_table::sdk::error_text(&e),
                })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! moto cannot decode the CloudWatch SDK's RPC-v2 CBOR protocol, so the
    //! request is checked against the SDK's own mock client instead.
    use super::*;
    use crate::metrics::tests::overdrawn;
    use aws_sdk_cloudwatch::operation::put_metric_data::PutMetricDataOutput;
    use aws_smithy_mocks::{mock, mock_client};

    #[tokio::test]
    async fn put_metric_data_carries_the_emf_metrics_and_dimensions() {
        let rule = mock!(Client::put_metric_data)
            .match_requests(|req| {
                let data = req.metric_data();
                req.namespace() == Some("ZaeLimiter")
                    && data.len() == 3
                    && data.iter().all(|d| {
                        d.metric_name() == Some("SoftLimitOverdrawn")
                            && d.value() == Some(1.0)
                            && d.unit() == Some(&StandardUnit::Count)
                            && d.timestamp().map(|t| t.to_millis().ok())
                                == Some(Some(1_795_970_136_158))
                            && d.dimensions()
                                .iter()
                                .all(|dim| dim.name() != Some("EntityId"))
                    })
                    && data[2]
                        .dimensions()
                        .iter()
                        .map(|d| (d.name().unwrap_or(""), d.value().unwrap_or("")))
                        .eq([("Table", "t"), ("Resource", "gpt-4"), ("Limit", "tpm")])
            })
            .then_output(|| PutMetricDataOutput::builder().build());
        let client = mock_client!(aws_sdk_cloudwatch, [&rule]);
        let sink = CloudWatchSink {
            client,
            namespace: "ZaeLimiter".into(),
            table: "t".into(),
        };
        sink.publish(&[overdrawn()]).await.unwrap();
        assert_eq!(rule.num_calls(), 1);
    }

    #[tokio::test]
    async fn large_sets_are_split_into_calls_of_at_most_1000_points() {
        let rule = mock!(Client::put_metric_data)
            .match_requests(|req| req.metric_data().len() <= MAX_DATUMS_PER_CALL)
            .then_output(|| PutMetricDataOutput::builder().build());
        let client = mock_client!(
            aws_sdk_cloudwatch,
            aws_smithy_mocks::RuleMode::MatchAny,
            [&rule]
        );
        let sink = CloudWatchSink {
            client,
            namespace: "ZaeLimiter".into(),
            table: "t".into(),
        };
        sink.publish(&vec![overdrawn(); 400]).await.unwrap();
        assert_eq!(rule.num_calls(), 2);
    }
}
