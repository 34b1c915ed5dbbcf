//! A Tower layer that acquires per HTTP request (feature `tower`): an
//! extractor says what a request asks for, the layer acquires before the
//! inner service runs and settles the lease after it.
//!
//! The inner service may report what the call really cost in a [`Usage`]
//! response extension (an LLM gateway learns its token count only from the
//! model's answer): the lease is adjusted by actual minus asked before the
//! commit. `docs/client.md` ("Tower layer") has the answers it gives.

use crate::error::{Error, RateLimitExceeded};
use crate::{Lease, RateLimiter};
use ::tower::{Layer, Service};
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use zae_table::sdk::DynamoStore;
use zae_table::store::Store;

/// What one request asks of the limiter: whole tokens per limit of
/// `resource` for `entity` (for an LLM call, an estimate the response's
/// [`Usage`] corrects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub entity: String,
    pub resource: String,
    pub consume: Vec<(String, i64)>,
}

impl Ask {
    pub fn new(entity: impl Into<String>, resource: impl Into<String>) -> Self {
        Ask {
            entity: entity.into(),
            resource: resource.into(),
            consume: Vec::new(),
        }
    }

    /// Adds `amount` of `limit` to what the request takes.
    pub fn consume(mut self, limit: impl Into<String>, amount: i64) -> Self {
        self.consume.push((limit.into(), amount));
        self
    }

    /// What was asked of `limit` (0 when not asked).
    fn asked(&self, limit: &str) -> i64 {
        self.consume
            .iter()
            .filter(|(n, _)| n == limit)
            .map(|(_, a)| *a)
            .sum()
    }

    /// The adjustment that turns what was asked into `usage`: actual minus
    /// asked, per limit the usage names.
    fn correction(&self, usage: &Usage) -> Vec<(String, i64)> {
        usage
            .0
            .iter()
            .map(|(n, actual)| (n.clone(), actual.saturating_sub(self.asked(n))))
            .filter(|(_, delta)| *delta != 0)
            .collect()
    }
}

/// Set by the inner service as a response extension: what the call really
/// took, whole tokens per limit. Limits it does not name stay as asked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage(pub Vec<(String, i64)>);

/// Wraps a service in [`RateLimit`]. `extractor` maps a request to its
/// [`Ask`], or to `None` for a request the layer lets through uncounted.
pub struct RateLimitLayer<E, St: Store + 'static = DynamoStore> {
    limiter: RateLimiter<St>,
    extractor: Arc<E>,
}

impl<E, St: Store + 'static> Clone for RateLimitLayer<E, St> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: self.limiter.clone(),
            extractor: Arc::clone(&self.extractor),
        }
    }
}

impl<E, St: Store + 'static> RateLimitLayer<E, St> {
    pub fn new(limiter: RateLimiter<St>, extractor: E) -> Self {
        RateLimitLayer {
            limiter,
            extractor: Arc::new(extractor),
        }
    }
}

impl<S, E, St: Store + 'static> Layer<S> for RateLimitLayer<E, St> {
    type Service = RateLimit<S, E, St>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: self.limiter.clone(),
            extractor: Arc::clone(&self.extractor),
        }
    }
}

/// The service [`RateLimitLayer`] makes. A refused acquire answers without
/// calling the inner service: 429 with `Retry-After` for a rejection, 503
/// when the table is unavailable (and `on_unavailable` blocks), 403 for a
/// disabled resource, 400 for a request the limiter calls invalid, 500 for
/// the rest (a configuration the client refuses, denied credentials).
pub struct RateLimit<S, E, St: Store + 'static = DynamoStore> {
    inner: S,
    limiter: RateLimiter<St>,
    extractor: Arc<E>,
}

impl<S: Clone, E, St: Store + 'static> Clone for RateLimit<S, E, St> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            extractor: Arc::clone(&self.extractor),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, E, St, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, E, St>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    E: Fn(&Request<ReqB>) -> Option<Ask> + Send + Sync + 'static,
    St: Store + 'static,
    ReqB: Send + 'static,
    ResB: From<String> + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<ResB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let Some(ask) = (self.extractor)(&request) else {
            return Box::pin(self.inner.call(request));
        };
        // The instance poll_ready readied goes into the future; a clone
        // stays for the next call (Tower's usual swap).
        let fresh = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, fresh);
        Box::pin(limited(self.limiter.clone(), inner, ask, request))
    }
}

/// Acquire, call, settle: the inner service runs only when admitted.
async fn limited<S, St, ReqB, ResB>(
    limiter: RateLimiter<St>,
    mut inner: S,
    ask: Ask,
    request: Request<ReqB>,
) -> Result<Response<ResB>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    St: Store + 'static,
    ResB: From<String>,
{
    let consume: Vec<(&str, i64)> = ask.consume.iter().map(|(n, a)| (n.as_str(), *a)).collect();
    let lease = match limiter.acquire(&ask.entity, &ask.resource, &consume).await {
        Ok(lease) => lease,
        Err(e) => return Ok(refusal(&e)),
    };
    let result = inner.call(request).await;
    // Read before the await: a body type need not be Sync.
    let correction = result
        .as_ref()
        .ok()
        .map(|r| r.extensions().get::<Usage>().map(|u| ask.correction(u)));
    settle(lease, correction).await;
    result
}

/// Commits after a response (adjusted by the correction when the service
/// reported its usage), rolls back after the service's error. The response
/// waits for the write, so the entity's next request sees it; a failed
/// commit is logged, since the work it counted is already done.
async fn settle<St: Store + 'static>(
    mut lease: Lease<St>,
    correction: Option<Option<Vec<(String, i64)>>>,
) {
    let Some(correction) = correction else {
        lease.rollback().await;
        return;
    };
    if let Some(correction) = correction {
        let amounts: Vec<(&str, i64)> = correction.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        lease.adjust(&amounts);
    }
    if let Err(e) = lease.commit().await {
        tracing::warn!(error = %e, "the lease's commit after the response failed");
    }
}

/// The answer to an acquire that did not admit.
fn refusal<B: From<String>>(error: &Error) -> Response<B> {
    if let Error::RateLimitExceeded(rejection) = error {
        return too_many(rejection);
    }
    let (status, kind) = classify(error);
    // A server-side failure is logged in full and named only by its kind:
    // its message names the table and the caller's identity.
    let body = if status.is_server_error() {
        tracing::warn!(error = %error, "rate limiter refused the request");
        serde_json::json!({ "error": kind })
    } else {
        serde_json::json!({ "error": kind, "message": error.to_string() })
    };
    json_response(status, &body)
}

/// 429, `Retry-After` in whole seconds past the wait, and which limits
/// refused.
fn too_many<B: From<String>>(rejection: &RateLimitExceeded) -> Response<B> {
    let limits: Vec<&str> = rejection.violations().map(|s| s.limit.as_str()).collect();
    let body = serde_json::json!({
        "error": "rate_limit_exceeded",
        "limits": limits,
        "retry_after_ms": rejection.retry_after_ms(),
    });
    let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, &body);
    response.headers_mut().insert(
        RETRY_AFTER,
        HeaderValue::from(rejection.retry_after_header()),
    );
    response
}

/// The status and the error's name in the body, for every refusal but a
/// rejection.
fn classify(error: &Error) -> (StatusCode, &'static str) {
    match error {
        Error::RateLimitExceeded(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded"),
        Error::ResourceDisabled { .. } => (StatusCode::FORBIDDEN, "resource_disabled"),
        Error::Validation(_) => (StatusCode::BAD_REQUEST, "validation"),
        Error::NoLimits { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "no_limits"),
        Error::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        Error::Unsupported { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "unsupported"),
        Error::PermissionDenied(_) => (StatusCode::INTERNAL_SERVER_ERROR, "permission_denied"),
        Error::UnknownNamespace(_) => (StatusCode::INTERNAL_SERVER_ERROR, "unknown_namespace"),
    }
}

fn json_response<B: From<String>>(status: StatusCode, body: &serde_json::Value) -> Response<B> {
    let mut response = Response::new(B::from(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Feature, LimitStatus};

    fn status(limit: &str, exceeded: bool, retry_after_ms: i64) -> LimitStatus {
        LimitStatus {
            entity: "k".into(),
            resource: "llm".into(),
            limit: limit.into(),
            available: 0,
            requested: 1,
            exceeded,
            retry_after_ms,
            soft: !exceeded,
            capacity: 5,
            refill_amount: 5,
            refill_period_s: 60,
            quota: false,
            resets_at_ms: None,
        }
    }

    #[test]
    fn a_rejection_answers_429_with_retry_after_in_whole_seconds_and_the_limits() {
        let rejection = RateLimitExceeded {
            statuses: vec![status("rpm", true, 2_500), status("tpm", false, 0)],
            contended: false,
        };
        let response: Response<String> = refusal(&Error::RateLimitExceeded(rejection));
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[RETRY_AFTER], "3");
        let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": "rate_limit_exceeded", "limits": ["rpm"], "retry_after_ms": 2500})
        );
    }

    #[test]
    fn each_other_refusal_has_its_status_and_names_its_error() {
        let cases = [
            (
                Error::ResourceDisabled {
                    entity: "k".into(),
                    resource: "llm".into(),
                    level: "resource".into(),
                },
                403,
                "resource_disabled",
            ),
            (Error::Validation("bad".into()), 400, "validation"),
            (
                Error::NoLimits {
                    entity: "k".into(),
                    resource: "llm".into(),
                },
                500,
                "no_limits",
            ),
            (
                Error::Unsupported {
                    feature: Feature::Quota,
                    entity: "k".into(),
                    resource: "llm".into(),
                    at: "resource".into(),
                },
                500,
                "unsupported",
            ),
            (
                Error::PermissionDenied(zae_table::store::StoreError::Fatal {
                    operation: "UpdateItem",
                    key: "ns/BUCKET#k#llm#0".into(),
                    message: "AccessDeniedException".into(),
                }),
                500,
                "permission_denied",
            ),
            (
                Error::UnknownNamespace("x".into()),
                500,
                "unknown_namespace",
            ),
        ];
        for (error, code, kind) in cases {
            let response: Response<String> = refusal(&error);
            assert_eq!(response.status().as_u16(), code, "{error}");
            let body: serde_json::Value = serde_json::from_str(response.body()).unwrap();
            assert_eq!(body["error"], kind);
            assert_eq!(body.get("message").is_some(), code < 500, "{body}");
        }
    }

    #[test]
    fn the_correction_is_actual_minus_asked_for_the_limits_the_usage_names() {
        let ask = Ask::new("k", "llm").consume("rpm", 1).consume("tpm", 300);
        let usage = Usage(vec![
            ("tpm".into(), 120),
            ("rpm".into(), 1),
            ("other".into(), 4),
        ]);
        assert_eq!(
            ask.correction(&usage),
            vec![("tpm".to_owned(), -180), ("other".to_owned(), 4)]
        );
    }
}
