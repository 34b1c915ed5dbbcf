//! The Tower layer on moto, through the gateway example's own router
//! served on a loopback socket and called over HTTP: rejections answer 429
//! with the rejection's `Retry-After`, a soft limit goes into debt, the
//! lease is corrected by the tokens the response reports, unlimited routes
//! pass, and the table's refusals have their statuses. The limits are set
//! and the buckets read back by the real 0.17.0 client
//! (`tests/harness/client_diff.py`).

#[path = "../../examples/gateway/app.rs"]
mod app;

use ::tower::{Layer, ServiceExt};
use aws_sdk_dynamodb::config::{Credentials, Region};
use serde_json::{Value, json};
use zae_client::{Ask, OnUnavailable, Options, RateLimitLayer, RateLimiter, Usage};
use zae_table::bucket::{field, limit_attr};
use zae_table::keys::BucketKey;
use zae_test_support::harness::{moto, run_json};

/// Whole tokens a day: refill that a test's few seconds never see.
const DAY_S: i64 = 86_400;

fn limit(name: &str, capacity: i64, soft: bool) -> Value {
    json!({"name": name, "capacity": capacity, "refill_amount": capacity, "refill_period_s": DAY_S, "soft": soft})
}

/// A table with namespace "default" and `setup` applied by the real client.
fn prepare(setup: Value) -> String {
    crate::common::prepared("tower", setup, now_ms())
}

fn llm_limits(rpm: i64, tpm: i64) -> Value {
    json!([{"op": "limits", "level": "resource", "resource": app::RESOURCE,
            "limits": [limit("rpm", rpm, false), limit("tpm", tpm, true)]}])
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(since.expect("after 1970").as_millis()).expect("fits")
}

async fn sdk() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(moto())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .load()
        .await
}

async fn limiter(table: &str, options: Options) -> RateLimiter {
    RateLimiter::open_with(&sdk().await, "default", table, options)
        .await
        .expect("open the limiter")
}

/// The gateway's router on a free loopback port: its base URL.
async fn serve(limiter: RateLimiter) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move { axum::serve(listener, app::router(limiter)).await });
    url
}

/// One completion: its status, `Retry-After` and JSON body.
async fn complete(url: &str, key: Option<&str>, body: &Value) -> (u16, Option<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{url}{}", app::COMPLETE))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.header(app::API_KEY, key);
    }
    answer(request.send().await.expect("the gateway answers")).await
}

async fn answer(response: reqwest::Response) -> (u16, Option<String>, Value) {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().expect("ASCII").to_owned());
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, retry_after, body)
}

fn prompt(words: usize, max_tokens: u64) -> Value {
    json!({"prompt": vec!["word"; words].join(" "), "max_tokens": max_tokens})
}

/// One limit field of `entity`'s bucket on `resource`, as the real client
/// reads it back.
fn bucket_field(table: &str, entity: &str, resource: &str, limit: &str, f: &str) -> i64 {
    let dump = run_json("client_diff.py", &["dump", "--table", table]);
    let key = BucketKey {
        namespace: "{ns}".into(),
        entity: entity.into(),
        resource: resource.into(),
        shard: 0,
    };
    let bucket = dump["buckets"]
        .as_array()
        .expect("a list of buckets")
        .iter()
        .find(|b| b["PK"]["S"] == key.pk().as_str())
        .unwrap_or_else(|| panic!("no bucket {} in {dump}", key.pk()));
    let attr = limit_attr(limit, f);
    let n = bucket[&attr]["N"]
        .as_str()
        .unwrap_or_else(|| panic!("no {attr} in {bucket}"));
    n.parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_hard_rpm_limit_the_gateway_answers_429_with_the_rejections_retry_after() {
    let table = prepare(llm_limits(2, 1_000_000));
    let url = serve(limiter(&table, Options::default()).await).await;
    for _ in 0..2 {
        let (status, _, body) = complete(&url, Some("k1"), &prompt(3, 3)).await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, retry_after, body) = complete(&url, Some("k1"), &prompt(3, 3)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"], "rate_limit_exceeded");
    assert_eq!(body["limits"], json!(["rpm"]));
    let wait_ms = body["retry_after_ms"].as_i64().expect("retry_after_ms");
    // One request of two a day refills in 43,200 s (the client rounds the
    // wait up to the next millisecond); the rejection comes seconds after
    // the bucket was made.
    assert!((43_190_000..=43_200_001).contains(&wait_ms), "{body}");
    let header: i64 = retry_after
        .expect("a Retry-After")
        .parse()
        .expect("whole seconds");
    assert_eq!(header, wait_ms / 1000 + 1, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_tpm_limit_admits_every_request_into_debt() {
    let table = prepare(llm_limits(1000, 50));
    let url = serve(limiter(&table, Options::default()).await).await;
    for _ in 0..4 {
        let (status, _, body) = complete(&url, Some("k2"), &prompt(30, 30)).await;
        assert_eq!(status, 200, "{body}");
    }
    // 4 x 60 tokens against 50: the balance is about 50 - 240 tokens.
    let tk = bucket_field(&table, "k2", app::RESOURCE, "tpm", field::TOKENS);
    assert!((-190_000..-189_000).contains(&tk), "tpm tk = {tk}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_corrected_to_the_tokens_the_response_reports() {
    let table = prepare(llm_limits(1000, 1_000_000));
    let url = serve(limiter(&table, Options::default()).await).await;
    let (mut actual, mut estimated) = (0, 0);
    for (words, max_tokens) in [(5, 100), (40, 8), (12, 12)] {
        let body = prompt(words, max_tokens);
        let (status, _, answer) = complete(&url, Some("k3"), &body).await;
        assert_eq!(status, 200, "{answer}");
        actual += answer["usage"]["total_tokens"]
            .as_i64()
            .expect("total_tokens");
        estimated += (body.to_string().len() as i64 / app::BYTES_PER_TOKEN).max(1);
    }
    assert_ne!(actual, estimated, "the case must tell the two apart");
    let tc = bucket_field(&table, "k3", app::RESOURCE, "tpm", field::CONSUMED);
    assert_eq!(tc, actual * 1000, "estimated {estimated}, actual {actual}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlimited_requests_pass_uncounted_past_an_exhausted_limit() {
    let table = prepare(llm_limits(1, 1_000_000));
    let url = serve(limiter(&table, Options::default()).await).await;
    assert_eq!(complete(&url, Some("k4"), &prompt(2, 2)).await.0, 200);
    assert_eq!(complete(&url, Some("k4"), &prompt(2, 2)).await.0, 429);
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let health = client
            .get(format!("{url}/health"))
            .header(app::API_KEY, "k4");
        let (status, _, body) = answer(health.send().await.expect("an answer")).await;
        assert_eq!((status, body), (200, json!("ok")));
    }
    // Without a key the layer lets the completion through: the handler refuses it.
    assert_eq!(complete(&url, None, &prompt(2, 2)).await.0, 401);
    let tc = bucket_field(&table, "k4", app::RESOURCE, "rpm", field::CONSUMED);
    assert_eq!(tc, 1000, "only the first completion is counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_resource_answers_403_naming_the_error() {
    let mut setup = llm_limits(10, 1000);
    setup
        .as_array_mut()
        .expect("a list")
        .push(json!({"op": "disable", "resource": app::RESOURCE}));
    let table = prepare(setup);
    let url = serve(limiter(&table, Options::default()).await).await;
    let (status, _, body) = complete(&url, Some("k5"), &prompt(2, 2)).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"], "resource_disabled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_table_answers_503_under_block_and_admits_under_allow() {
    let table = prepare(llm_limits(10, 1000));
    let block = Options {
        on_unavailable: Some(OnUnavailable::Block),
        ..Options::default()
    };
    let allow = Options {
        on_unavailable: Some(OnUnavailable::Allow),
        ..Options::default()
    };
    let blocking = serve(limiter(&table, block).await).await;
    let allowing = serve(limiter(&table, allow).await).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk().await);
    dynamodb
        .delete_table()
        .table_name(&table)
        .send()
        .await
        .expect("delete the table");
    let (status, _, body) = complete(&blocking, Some("k6"), &prompt(2, 2)).await;
    assert_eq!(
        (status, &body["error"]),
        (503, &json!("unavailable")),
        "{body}"
    );
    let (status, _, body) = complete(&allowing, Some("k6"), &prompt(2, 2)).await;
    assert_eq!(status, 200, "{body}");
}

/// The layer around a plain service: its error refunds the lease, its
/// answer commits it (with the usage it reports), a 5xx answer included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_error_rolls_the_lease_back_and_its_answer_commits_it() {
    let table = prepare(llm_limits(10, 1000));
    let ask = |r: &http::Request<String>| {
        Some(
            Ask::new(r.uri().path().trim_start_matches('/'), "llm")
                .consume("rpm", 1)
                .consume("tpm", 100),
        )
    };
    let layer = RateLimitLayer::new(limiter(&table, Options::default()).await, ask);
    let service = layer.layer(::tower::service_fn(|r: http::Request<String>| async move {
        if r.uri().path() == "/failing" {
            return Err("the upstream failed");
        }
        let mut response = http::Response::new(String::new());
        if r.uri().path() == "/broken" {
            *response.status_mut() = http::StatusCode::BAD_GATEWAY;
            return Ok(response);
        }
        response
            .extensions_mut()
            .insert(Usage(vec![("tpm".into(), 30)]));
        Ok::<_, &str>(response)
    }));
    let failed = service.clone().oneshot(request("/failing")).await;
    assert_eq!(failed.err(), Some("the upstream failed"));
    let broken = service.clone().oneshot(request("/broken")).await;
    assert_eq!(broken.map(|r| r.status().as_u16()).ok(), Some(502));
    let served = service.oneshot(request("/serving")).await;
    assert_eq!(served.map(|r| r.status()).ok(), Some(http::StatusCode::OK));
    let read = |entity, limit| bucket_field(&table, entity, "llm", limit, field::CONSUMED);
    assert_eq!((read("failing", "rpm"), read("failing", "tpm")), (0, 0));
    assert_eq!(
        (read("broken", "rpm"), read("broken", "tpm")),
        (1000, 100_000),
        "a 5xx answer is an answer: committed as asked"
    );
    assert_eq!(
        (read("serving", "rpm"), read("serving", "tpm")),
        (1000, 30_000)
    );
}

fn request(path: &str) -> http::Request<String> {
    http::Request::builder()
        .uri(path)
        .body(String::new())
        .expect("a request")
}
