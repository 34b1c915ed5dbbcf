//! `zae-load`: acquires against a table at a given concurrency, one JSON
//! line of results. The command line and the run live in `zae_client::load`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    zae_client::load::main().await
}
