//! `zae-limits`: plan and apply limits manifests on a table directly. The
//! command line and its exit codes live in `zae_limits::cli`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    zae_limits::cli::main().await
}
