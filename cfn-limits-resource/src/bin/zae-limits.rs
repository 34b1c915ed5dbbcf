//! `zae-limits`: the provisioner's core run directly against a table, for
//! local work and CI. Endpoint and credentials come from the AWS
//! environment (`AWS_ENDPOINT_URL_DYNAMODB` and friends).

use cfn_limits_resource::apply::state::namespace_id;
use cfn_limits_resource::apply::{Caller, Provisioner};
use cfn_limits_resource::manifest::Manifest;
use cfn_limits_resource::manifest::cloudformation::cfn_template;
use cfn_limits_resource::report;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use zae_runtime::aws::Timeouts;
use zae_table::sdk::DynamoStore;
use zae_table::store::Counted;

#[derive(Parser)]
#[command(
    name = "zae-limits",
    version,
    about = "Plan and apply zae-limiter limits manifests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Target {
    /// The limits manifest (YAML).
    #[arg(long, short = 'f')]
    file: PathBuf,
    /// The zae-limiter table (the stack name).
    #[arg(long, short = 't')]
    table: String,
    /// The namespace id; by default the manifest's namespace is looked up.
    #[arg(long)]
    namespace_id: Option<String>,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Print the DynamoDB calls made, by operation, as JSON on stderr.
    #[arg(long)]
    stats: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Show the levels an apply would write.
    Plan {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        quiet: bool,
    },
    /// Write the manifest's levels and fan them out to existing buckets.
    Apply {
        #[command(flatten)]
        target: Target,
        /// Rewrite every declared level and re-run every fan-out.
        #[arg(long)]
        full: bool,
        #[arg(long)]
        quiet: bool,
        /// Recorded as the audit events' principal.
        #[arg(long, default_value = "zae-limits-cli")]
        principal: String,
        /// Start no new work after this many seconds: fan-outs still running
        /// record their place, and the next apply goes on from there.
        #[arg(long, value_name = "SECONDS")]
        max_seconds: Option<u64>,
        /// Register the manifest's namespace if the table does not have it,
        /// and initialise a table no client or stack has opened (its version
        /// record, stamped for this project's Lambdas).
        #[arg(long)]
        create_namespace: bool,
    },
    /// Report where the table differs from the manifest.
    Diff {
        #[command(flatten)]
        target: Target,
    },
    /// Operate a namespace's adaptive limits.
    Adaptive {
        #[command(subcommand)]
        command: AdaptiveCommand,
    },
    /// Print a tenant stack with a Custom::ZaeLimiterLimits resource.
    CfnTemplate {
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// The stack that exports `<stack>-ProvisionerArn` (and names the table).
        #[arg(long)]
        stack: String,
        #[arg(long)]
        full: bool,
    },
}

/// A table's namespace, by name or id.
#[derive(Args)]
struct Namespace {
    /// The zae-limiter table (the stack name).
    #[arg(long, short = 't')]
    table: String,
    /// The namespace name; `default` unless given.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// The namespace id, instead of looking the name up.
    #[arg(long)]
    namespace_id: Option<String>,
}

#[derive(Subcommand)]
enum AdaptiveCommand {
    /// Return every stamped bucket of the namespace to base and every target
    /// to a factor of one. A running controller raises them again at its next
    /// tick while the manifest declares them adaptive: disable it first
    /// (`AdaptiveLimits=disabled`) or remove `adaptive` from the manifest.
    Reset {
        #[command(flatten)]
        at: Namespace,
    },
    /// Show, per resource and limit, the recent minutes' use, the estimated
    /// capacity, the utilization, the factor and its age, the controller's
    /// last tick, and per opted-in level base x factor = effective.
    Utilization {
        #[command(flatten)]
        at: Namespace,
        /// Only this resource.
        #[arg(long)]
        resource: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn read_manifest(file: &PathBuf) -> Result<Manifest, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    Manifest::from_yaml(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// A table's store, through the AWS environment.
async fn open(table: &str) -> Counted<DynamoStore> {
    let sdk = zae_runtime::aws::sdk_config(Timeouts::default()).await;
    Counted::new(DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), table))
}

/// The namespace id of a name, or the error that says how to get one.
async fn resolve_namespace(
    store: &Counted<DynamoStore>,
    name: &str,
    id: Option<&String>,
    table: &str,
) -> Result<String, String> {
    if let Some(id) = id {
        return Ok(id.clone());
    }
    namespace_id(store, name)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "namespace '{name}' is not registered in table '{table}'; register it with \
                 `zae-limits apply --create-namespace`, or pass --namespace-id"
            )
        })
}

/// `--create-namespace`: registers the namespace, first stamping the
/// version record of a table nobody has initialised.
async fn create_namespace(store: &Counted<DynamoStore>, name: &str) -> Result<(), String> {
    use cfn_limits_resource::registry;
    let now = chrono::Utc::now().timestamp_millis();
    let by = "zae-limits-cli";
    let names = [name.to_owned()];
    let registered = if registry::initialised(store)
        .await
        .map_err(|e| e.to_string())?
    {
        vec![
            registry::register(store, name, now)
                .await
                .map_err(|e| e.to_string())?,
        ]
    } else {
        eprintln!(
            "initialising the table: version record stamped {}",
            registry::LAMBDA_VERSION_STAMP
        );
        registry::initialise(store, &names, by, now)
            .await
            .map_err(|e| e.to_string())?
    };
    for r in registered.iter().filter(|r| r.created) {
        eprintln!("registered namespace '{}' (id {})", r.name, r.id);
    }
    Ok(())
}

async fn run_adaptive(command: AdaptiveCommand) -> Result<bool, String> {
    let at = match &command {
        AdaptiveCommand::Reset { at } | AdaptiveCommand::Utilization { at, .. } => at,
    };
    let store = open(&at.table).await;
    let id = resolve_namespace(&store, &at.namespace, at.namespace_id.as_ref(), &at.table).await?;
    if let AdaptiveCommand::Utilization { resource, json, .. } = &command {
        let now = chrono::Utc::now().timestamp_millis();
        let status = cfn_limits_resource::adaptive::status(&store, &id, resource.as_deref(), now)
            .await
            .map_err(|e| e.to_string())?;
        if *json {
            println!(
                "{}",
                serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?
            );
        } else {
            println!(
                "{}",
                cfn_limits_resource::adaptive::render_status(&status, now)
            );
        }
        return Ok(true);
    }
    let reset = cfn_limits_resource::adaptive::reset(&store, &id)
        .await
        .map_err(|e| e.to_string())?;
    for r in &reset {
        println!(
            "  {} {}: factor 1, {} bucket(s) back to base{}",
            r.resource,
            r.limit,
            r.buckets_stamped,
            if r.stamps_lost > 0 {
                format!(", {} lost their race (run again)", r.stamps_lost)
            } else {
                String::new()
            }
        );
    }
    println!("Reset: {} target(s) of namespace {id}.", reset.len());
    Ok(reset.iter().all(|r| r.stamps_lost == 0))
}

async fn run(command: Command) -> Result<bool, String> {
    let (target, manifest) = match &command {
        Command::CfnTemplate { file, stack, full } => {
            print!("{}", cfn_template(&read_manifest(file)?, stack, *full));
            return Ok(true);
        }
        Command::Adaptive { .. } => unreachable!("answered in main"),
        Command::Plan { target, .. } | Command::Apply { target, .. } | Command::Diff { target } => {
            (target, read_manifest(&target.file)?)
        }
    };
    let store = open(&target.table).await;
    if matches!(
        command,
        Command::Apply {
            create_namespace: true,
            ..
        }
    ) && target.namespace_id.is_none()
    {
        create_namespace(&store, &manifest.namespace).await?;
    }
    let namespace = resolve_namespace(
        &store,
        &manifest.namespace,
        target.namespace_id.as_ref(),
        &target.table,
    )
    .await?;
    let provisioner = Provisioner {
        store: &store,
        namespace: &namespace,
    };
    let state = provisioner.read_state().await.map_err(|e| e.to_string())?;
    if let Some(owner) = &state.owner {
        eprintln!(
            "warning: namespace {namespace} is managed by the custom resource {owner}; \
             changes made here are undone by that stack's next update"
        );
    }
    let full = matches!(command, Command::Apply { full: true, .. });
    let plan = provisioner
        .plan_from(state, &manifest, full)
        .await
        .map_err(|e| e.to_string())?;
    let (report, text) = match &command {
        Command::Plan { quiet, .. } => {
            let report = plan.report();
            let text = report::render_plan(&report, *quiet);
            (report, text)
        }
        Command::Diff { .. } => {
            let report = plan.report();
            let text = report::render_diff(&report);
            (report, text)
        }
        Command::Apply {
            quiet,
            principal,
            max_seconds,
            ..
        } => {
            let caller = Caller {
                stop_at: max_seconds
                    .map(|s| tokio::time::Instant::now() + std::time::Duration::from_secs(s)),
                ..Caller::local(principal)
            };
            let report = provisioner
                .apply_plan(&manifest, plan, &caller)
                .await
                .map_err(|e| e.to_string())?;
            if report.stopped > 0 {
                eprintln!(
                    "{} fan-out(s) stopped at --max-seconds with their place recorded; \
                     apply again to go on",
                    report.stopped
                );
            }
            let text = report::render_apply(&report, *quiet);
            (report, text)
        }
        Command::CfnTemplate { .. } | Command::Adaptive { .. } => unreachable!("answered above"),
    };
    if target.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!("{text}");
    }
    if target.stats {
        eprintln!(
            "{}",
            serde_json::json!({ "dynamodb_calls": store.counts() })
        );
    }
    let errors = report.errors.unwrap_or_default();
    if !errors.is_empty() {
        eprintln!("Errors ({}):", errors.len());
        for error in &errors {
            eprintln!("  - {error}");
        }
    }
    Ok(errors.is_empty())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Adaptive { command } => run_adaptive(command).await,
        command => run(command).await,
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("Error: {message}");
            ExitCode::FAILURE
        }
    }
}
