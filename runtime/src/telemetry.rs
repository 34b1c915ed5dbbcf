//! Logs: one JSON object per line through `tracing`, on stderr so that stdout
//! carries only EMF documents and CLI output. The level comes from `AWS_LAMBDA_LOG_LEVEL` or
//! `RUST_LOG`, default `info`.

use tracing_subscriber::EnvFilter;

pub fn init() {
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .map(|l| l.to_lowercase())
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    let filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
