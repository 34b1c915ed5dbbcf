//! An LLM gateway in front of a zae-limiter table: `POST /v1/complete` is
//! limited per `x-api-key` on resource `llm` (one `rpm` and the estimated
//! `tpm`, corrected by the tokens the model reports), `GET /health` is not.
//!
//!     cargo run -p zae-client --features tower --example gateway -- \
//!         --table TABLE [--namespace default] [--port 8080]
//!
//! The table and namespace may come from `ZAE_TABLE` and `ZAE_NAMESPACE`;
//! region, credentials and endpoint (`AWS_ENDPOINT_URL`) from the AWS
//! environment.

mod app;

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gateway",
    about = "An LLM gateway limited by a zae-limiter table"
)]
struct Args {
    /// The table (default: $ZAE_TABLE).
    #[arg(long, value_name = "TABLE")]
    table: Option<String>,
    /// The namespace's name (default: $ZAE_NAMESPACE, else "default").
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The loopback port to listen on (0: any free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let Some(table) = args.table.or_else(|| std::env::var("ZAE_TABLE").ok()) else {
        eprintln!("gateway: --table (or ZAE_TABLE) is required");
        return ExitCode::from(64);
    };
    let namespace = args
        .namespace
        .or_else(|| std::env::var("ZAE_NAMESPACE").ok())
        .unwrap_or_else(|| "default".to_owned());
    match serve(&table, &namespace, args.port).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gateway: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(table: &str, namespace: &str, port: u16) -> Result<(), String> {
    let limiter = zae_client::RateLimiter::open(namespace, table)
        .await
        .map_err(|e| format!("opening {namespace} in {table}: {e}"))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("listening on 127.0.0.1:{port}: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{address}");
    axum::serve(listener, app::router(limiter))
        .await
        .map_err(|e| format!("serving: {e}"))
}
