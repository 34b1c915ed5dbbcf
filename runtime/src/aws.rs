//! The AWS SDK configuration both Lambdas load: the standard environment,
//! with every request bounded in time, so that a connection that accepts and
//! never answers cannot hold an invocation (and so a stream shard or a stack)
//! past its deadline.

use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use std::time::Duration;

/// How long one request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// One HTTP attempt, connection included.
    pub attempt: Duration,
    /// A whole operation, all of its attempts included.
    pub operation: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(3),
            attempt: Duration::from_secs(10),
            operation: Duration::from_secs(30),
        }
    }
}

impl Timeouts {
    pub fn config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .operation_timeout(self.operation)
            .build()
    }
}

/// The SDK configuration from the environment, with `timeouts` on every request.
pub async fn sdk_config(timeouts: Timeouts) -> SdkConfig {
    sdk_config_at(timeouts, None, None).await
}

/// The same, with the region and the endpoint given (a CLI's `--region`
/// and `--endpoint-url`) in place of the environment's.
pub async fn sdk_config_at(
    timeouts: Timeouts,
    region: Option<String>,
    endpoint_url: Option<String>,
) -> SdkConfig {
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts.config());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region));
    }
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader.load().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::config::{Credentials, Region};

    #[tokio::test]
    async fn a_server_that_accepts_and_never_answers_times_the_request_out() {
        let (endpoint, held) = zae_test_support::harness::silent_endpoint().await;
        let timeouts = Timeouts {
            connect: Duration::from_millis(200),
            attempt: Duration::from_millis(300),
            operation: Duration::from_millis(900),
        };
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("k", "s", None, None, "test"))
            .timeout_config(timeouts.config())
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        // Without timeouts the call waits for ever; the test would stop here.
        let request = client.get_item().table_name("t").send();
        let result = tokio::time::timeout(Duration::from_secs(20), request)
            .await
            .expect("the SDK gives up by itself");
        held.abort();
        let err = result.expect_err("nothing ever answers");
        assert!(
            matches!(err, aws_sdk_dynamodb::error::SdkError::TimeoutError(_)),
            "{err:?}"
        );
    }

    #[test]
    fn every_request_is_bounded_by_default() {
        let config = Timeouts::default().config();
        assert!(config.operation_attempt_timeout().is_some());
        assert!(config.operation_timeout().is_some());
        assert!(config.connect_timeout().is_some());
    }
}
