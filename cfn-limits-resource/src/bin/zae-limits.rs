//! `zae-limits`: plan and apply limits manifests on a table directly. The
//! command line and its exit codes live in `cfn_limits_resource::cli`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    cfn_limits_resource::cli::main().await
}
