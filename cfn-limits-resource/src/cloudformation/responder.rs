//! Answering CloudFormation: the PUT of a response body to the request's
//! pre-signed `ResponseURL`, behind the [`Responder`] seam.

use super::{Envelope, Outcome};
use std::future::Future;

/// Where the answer goes: the pre-signed `ResponseURL`.
pub trait Responder: Send + Sync {
    fn put(&self, url: &str, body: String) -> impl Future<Output = Result<(), String>> + Send;
}

/// Sends the outcome; a failed PUT is retried, then logged (there is no one
/// else to tell).
pub async fn answer(
    responder: &impl Responder,
    envelope: &Envelope,
    outcome: &Outcome,
) -> Result<(), String> {
    let body = outcome.body(envelope);
    let mut last = String::new();
    for attempt in 0..4u32 {
        match responder.put(&envelope.response_url, body.clone()).await {
            Ok(()) => return Ok(()),
            Err(err) => {
                tracing::warn!(attempt, error = %err, "answering CloudFormation failed");
                last = err;
                tokio::time::sleep(std::time::Duration::from_millis(200 << attempt)).await;
            }
        }
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
