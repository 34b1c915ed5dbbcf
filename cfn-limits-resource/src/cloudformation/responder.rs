//! Answering CloudFormation: the PUT of a response body to the request's
//! pre-signed `ResponseURL`, behind the [`Responder`] seam.

use super::{Envelope, Outcome};
use std::future::Future;
use std::time::{Duration, Instant};

/// Where the answer goes: the pre-signed `ResponseURL`.
pub trait Responder: Send + Sync {
    fn put(&self, url: &str, body: String) -> impl Future<Output = Result<(), String>> + Send;
}

/// Sends the outcome within `budget` (the time the guard kept back from
/// the Lambda deadline): a failed or slow PUT is retried while time is left,
/// then logged (there is no one else to tell).
pub async fn answer(
    responder: &impl Responder,
    envelope: &Envelope,
    outcome: &Outcome,
    budget: Duration,
) -> Result<(), String> {
    let body = outcome.body(envelope);
    let deadline = Instant::now() + budget;
    let mut last = String::from("no time left to answer");
    for attempt in 0..4u32 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let put = responder.put(&envelope.response_url, body.clone());
        match tokio::time::timeout(left, put).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(err)) => last = err,
            Err(_) => last = format!("PUT {}: no answer in time", redact(&envelope.response_url)),
        }
        tracing::warn!(attempt, error = %last, "answering CloudFormation failed");
        let pause = Duration::from_millis(200 << attempt);
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
    Err(last)
}

/// PUTs with `reqwest`; the pre-signed URL accepts an empty content type only.
pub struct HttpResponder {
    client: reqwest::Client,
}

impl HttpResponder {
    pub fn new() -> Result<Self, String> {
        reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map(|client| HttpResponder { client })
            .map_err(|e| e.to_string())
    }
}

impl Responder for HttpResponder {
    async fn put(&self, url: &str, body: String) -> Result<(), String> {
        let response = self
            .client
            .put(url)
            .header("Content-Type", "")
            .body(body)
            .send()
            .await
            // reqwest's errors carry the URL, signature and all: drop it.
            .map_err(|e| format!("PUT {}: {}", redact(url), e.without_url()))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("PUT {}: HTTP {}", redact(url), response.status()))
        }
    }
}

/// The URL without its signature, for logs.
fn redact(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `ResponseURL` that never answers.
    struct Silent;

    impl Responder for Silent {
        async fn put(&self, _url: &str, _body: String) -> Result<(), String> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn answering_stops_when_the_budget_is_spent() {
        let envelope = Envelope {
            kind: "Create",
            resource_type: "Custom::ZaeLimiterLimits".into(),
            request_id: "r".into(),
            response_url: "https://bucket.example/r?X-Amz-Signature=secret".into(),
            stack_id: "s".into(),
            logical_resource_id: "l".into(),
            physical_resource_id: None,
            properties: yaml_serde::Value::Null,
            old_properties: yaml_serde::Value::Null,
        };
        let outcome = Outcome::failed(&envelope, "x");
        // Without the budget this waits for ever; the test would stop here.
        let answered = tokio::time::timeout(
            Duration::from_secs(20),
            answer(&Silent, &envelope, &outcome, Duration::from_millis(300)),
        )
        .await
        .expect("answer gives up within its budget");
        let err = answered.unwrap_err();
        assert!(
            err.contains("no answer in time") && !err.contains("secret"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_failed_put_never_reveals_the_presigned_url() {
        let responder = HttpResponder::new().unwrap();
        // Nothing listens on port 1: the connection is refused at once.
        let url = "http://127.0.0.1:1/response?X-Amz-Signature=secret-signature";
        let err = responder.put(url, "{}".into()).await.unwrap_err();
        assert!(err.starts_with("PUT http://127.0.0.1:1/response:"), "{err}");
        assert!(!err.contains("secret-signature"), "{err}");
    }
}
