//! The gateway's routes and their rate limiting, apart from its command
//! line so that `tests/tower.rs` serves this same router.

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{Value, json};
use zae_client::{Ask, RateLimitLayer, RateLimiter, Usage};

/// The limited route, the resource it spends and the header naming the
/// caller.
pub const COMPLETE: &str = "/v1/complete";
pub const RESOURCE: &str = "llm";
pub const API_KEY: &str = "x-api-key";
/// About four bytes of JSON to a token: the estimate taken before the call.
pub const BYTES_PER_TOKEN: i64 = 4;

pub fn router(limiter: RateLimiter) -> Router {
    Router::new()
        .route(COMPLETE, post(complete))
        .route("/health", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter, ask))
}

/// A completion with an API key asks one request and its estimated
/// tokens; everything else passes uncounted (a completion without a key
/// reaches the handler, which refuses it). The key is the entity here; a
/// real gateway would map it to its tenant's id first, since the entity id
/// is stored in the table.
fn ask(request: &Request<Body>) -> Option<Ask> {
    if request.method() != Method::POST || request.uri().path() != COMPLETE {
        return None;
    }
    let key = request.headers().get(API_KEY)?.to_str().ok()?;
    let ask = Ask::new(key, RESOURCE).consume("rpm", 1);
    Some(ask.consume("tpm", estimate(request.headers())))
}

/// The extractor sees the head only: the estimate is the body's length
/// in tokens, at least one.
pub fn estimate(headers: &HeaderMap) -> i64 {
    let length = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    (length / BYTES_PER_TOKEN).max(1)
}

/// A stand-in model that echoes up to `max_tokens` words of the prompt and
/// reports its token count, as a model's API does, in the body and in the
/// [`Usage`] extension the layer corrects the estimate from.
async fn complete(headers: HeaderMap, body: Bytes) -> Response {
    if !headers.contains_key(API_KEY) {
        return error(StatusCode::UNAUTHORIZED, "missing x-api-key");
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let prompt: Vec<&str> = request["prompt"]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let max_tokens = request["max_tokens"].as_u64().unwrap_or(16);
    let completion: Vec<&str> = prompt
        .iter()
        .copied()
        .take(usize::try_from(max_tokens).unwrap_or(usize::MAX))
        .collect();
    let total = i64::try_from(prompt.len() + completion.len()).unwrap_or(i64::MAX);
    let body = json!({
        "completion": completion.join(" "),
        "usage": {"prompt_tokens": prompt.len(), "completion_tokens": completion.len(), "total_tokens": total},
    });
    let usage = Extension(Usage(vec![("tpm".to_owned(), total)]));
    (
        usage,
        [(CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({ "error": message }).to_string();
    (status, [(CONTENT_TYPE, "application/json")], body).into_response()
}
