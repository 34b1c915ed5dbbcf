//! Logs: one JSON object per line through `tracing`, on stderr so that stdout
//! carries only EMF documents and CLI output. The level comes from `AWS_LAMBDA_LOG_LEVEL` or
//! `RUST_LOG`, default `info`; the build's version line
//! ([`crate::version::announce`]) is logged at every level.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

pub fn init() {
    let level = std::env::var("AWS_LAMBDA_LOG_LEVEL")
        .ok()
        .map(|l| l.to_lowercase())
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".into());
    tracing::subscriber::set_global_default(subscriber(&level, std::io::stderr))
        .expect("the log subscriber is set once, first thing in main");
}

/// The subscriber `init` installs, writing to `writer` at `level` (an
/// `EnvFilter` directive; `info` when it does not parse).
pub fn subscriber<W>(level: &str, writer: W) -> impl tracing::Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    // An operator who set `warn` still learns which build runs: one line per start.
    let filter = filter.add_directive(
        format!("{}=info", crate::version::TARGET)
            .parse()
            .expect("a constant directive"),
    );
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
}
