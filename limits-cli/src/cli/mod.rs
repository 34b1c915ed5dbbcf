//! `zae-limits`: the provisioner's core run directly against a table, for
//! local work and CI. `bin/zae-limits.rs` only calls [`main`].

pub mod args;
pub mod error;
pub mod progress;
pub mod release;

use crate::report;
use args::{AdaptiveCommand, Cli, Command, Table, Target};
use clap::Parser;
use error::{CliError, Kind};
use std::path::Path;
use std::process::ExitCode;
use zae_provisioner::apply::state::namespace_id;
use zae_provisioner::apply::{Caller, Provisioner, Report};
use zae_provisioner::init;
use zae_provisioner::manifest::Manifest;
use zae_provisioner::manifest::stack::cfn_template;
use zae_runtime::aws::Timeouts;
use zae_table::keys::{self, Index};
use zae_table::sdk::DynamoStore;
use zae_table::store::{Counted, Query, Store};

type TableStore = Counted<DynamoStore>;

/// How a run that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Clean,
    /// Plan or diff found changes.
    Changes,
    /// An apply ran, and some of its writes failed (reported).
    WithErrors,
    /// An apply stopped at `--max-seconds` with fan-outs left (said on stderr).
    Unfinished,
}

pub async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Kind::Usage.code()
            } else {
                0
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let (json, exit_code) = output_flags(&cli.command);
    progress::init(!no_progress(&cli.command));
    match run(cli.command).await {
        Ok(Ended::Clean) => ExitCode::SUCCESS,
        Ok(Ended::Changes) if exit_code => ExitCode::from(Kind::Drift.code()),
        Ok(Ended::Changes) => ExitCode::SUCCESS,
        Ok(Ended::WithErrors) => ExitCode::from(Kind::ApplyErrors.code()),
        Ok(Ended::Unfinished) => ExitCode::from(Kind::Unfinished.code()),
        Err(err) => {
            if json {
                println!("{}", err.json());
            } else {
                eprintln!("{}", err.text());
            }
            ExitCode::from(err.kind.code())
        }
    }
}

/// `--json`, and `--exit-code` where the command has them.
fn output_flags(command: &Command) -> (bool, bool) {
    if let Some(target) = command.target() {
        let exit_code = matches!(
            command,
            Command::Plan {
                exit_code: true,
                ..
            } | Command::Diff {
                exit_code: true,
                ..
            }
        );
        return (target.json, exit_code);
    }
    match command {
        Command::Init { json, .. } => (*json, false),
        Command::Adaptive {
            command: AdaptiveCommand::Utilization { json, .. },
        } => (*json, false),
        _ => (false, false),
    }
}

fn no_progress(command: &Command) -> bool {
    command.target().is_some_and(|t| t.no_progress)
}

pub async fn run(command: Command) -> Result<Ended, CliError> {
    match command {
        Command::CfnTemplate { file, name, full } => {
            print!("{}", cfn_template(&read_manifest(&file)?, &name, full));
            Ok(Ended::Clean)
        }
        Command::Init {
            table,
            namespaces,
            json,
        } => init(&table, &namespaces, json).await,
        Command::Adaptive { command } => adaptive(command).await,
        Command::ReleaseOwner { at, yes } => release::release_owner(&at, yes).await,
        command => manifest_command(command).await,
    }
}

fn read_manifest(file: &Path) -> Result<Manifest, CliError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        CliError::new(
            Kind::InvalidInput,
            format!("reading {}: {e}", file.display()),
        )
    })?;
    Manifest::from_yaml(&text).map_err(|e| CliError::invalid(file, &e))
}

/// A table's store, through the AWS environment and the flags.
pub(crate) async fn open(table: &Table) -> TableStore {
    let sdk = table.sdk_config(Timeouts::default()).await;
    Counted::new(DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        table.table_name(),
    ))
}

/// The namespace id of a name, or the error that says how to get one (and
/// which registered name was probably meant).
pub(crate) async fn resolve_namespace(
    store: &impl Store,
    name: &str,
    id: Option<&String>,
    table: &str,
) -> Result<String, CliError> {
    if let Some(id) = id {
        return Ok(id.clone());
    }
    let found = namespace_id(store, name)
        .await
        .map_err(|e| CliError::aws(&format!("looking up namespace '{name}'"), &e))?;
    if let Some(id) = found {
        return Ok(id);
    }
    let registered = registered_namespaces(store).await.unwrap_or_default();
    let near = zae_provisioner::suggest::closest(name, registered.iter().map(String::as_str))
        .map(|n| format!(" Did you mean '{n}'?"))
        .unwrap_or_default();
    Err(CliError::new(
        Kind::Refused,
        format!("namespace '{name}' is not registered in table '{table}'.{near}"),
    )
    .with_hint(
        "register it with `zae-limits apply --create-namespace` (or `zae-limits init -N NAME`), \
         or list it in the stack's Namespaces parameter",
    ))
}

async fn registered_namespaces(store: &impl Store) -> Result<Vec<String>, CliError> {
    let prefix = keys::sk_namespace("");
    let query = Query {
        index: &Index::TABLE,
        pk: keys::pk_registry(),
        sk_prefix: prefix.clone(),
        consistent: false,
    };
    let items = store
        .query(&query)
        .await
        .map_err(|e| CliError::aws("listing namespaces", &e))?;
    Ok(items
        .iter()
        .filter_map(|item| keys::sk_of(item)?.strip_prefix(&prefix).map(str::to_owned))
        .collect())
}

/// `--create-namespace`: registers the namespace, first stamping the
/// version record of a table nobody has initialised.
async fn create_namespace(store: &impl Store, name: &str) -> Result<(), CliError> {
    let initialised = init::initialised(store)
        .await
        .map_err(|e| CliError::aws("reading the version record", &e))?;
    let now = chrono::Utc::now().timestamp_millis();
    if !initialised {
        eprintln!(
            "the table has no version record: initialising it, stamped {}",
            init::LAMBDA_VERSION_STAMP
        );
        init::initialise(store, &[], &init::Stamper::Cli("zae-limits-cli"), now)
            .await
            .map_err(registry_error)?;
    }
    let registered = init::register(store, name, now)
        .await
        .map_err(registry_error)?;
    if registered.created {
        eprintln!(
            "registered namespace '{}' (id {})",
            registered.name, registered.id
        );
    }
    Ok(())
}

fn registry_error(err: init::RegistryError) -> CliError {
    match err {
        init::RegistryError::BadName(..) => CliError::new(Kind::InvalidInput, err.to_string()),
        _ => CliError::new(Kind::Aws, err.to_string()),
    }
}

async fn init(table: &Table, namespaces: &[String], json: bool) -> Result<Ended, CliError> {
    let store = open(table).await;
    let now = chrono::Utc::now().timestamp_millis();
    let registered = init::initialise(
        &store,
        namespaces,
        &init::Stamper::Cli("zae-limits-cli"),
        now,
    )
    .await
    .map_err(registry_error)?;
    if json {
        let out = serde_json::json!({
            "table": table.table_name(),
            "lambda_version": init::LAMBDA_VERSION_STAMP,
            "namespaces": registered,
        });
        println!("{out}");
        return Ok(Ended::Clean);
    }
    println!(
        "Version record of '{}' stamped {}.",
        table.table_name(),
        init::LAMBDA_VERSION_STAMP
    );
    for r in &registered {
        let what = if r.created {
            "registered"
        } else {
            "already registered"
        };
        println!("  {} {what} (id {})", r.name, r.id);
    }
    Ok(Ended::Clean)
}

async fn manifest_command(command: Command) -> Result<Ended, CliError> {
    let Some(target) = command.target() else {
        unreachable!("run answers the commands without a manifest")
    };
    let manifest = read_manifest(&target.file)?;
    for warning in manifest.cascade_warnings() {
        tracing::warn!("{warning}");
    }
    let store = open(&target.table).await;
    let ended = on_store(&command, &store, &manifest).await;
    if target.stats {
        eprintln!(
            "{}",
            serde_json::json!({ "dynamodb_calls": store.counts() })
        );
    }
    ended
}

/// Plan, diff or apply `manifest` on `store`: what the command prints, and
/// how it ended.
pub async fn on_store(
    command: &Command,
    store: &impl Store,
    manifest: &Manifest,
) -> Result<Ended, CliError> {
    let Some(target) = command.target() else {
        unreachable!("only plan, apply and diff have a manifest")
    };
    let create = matches!(
        command,
        Command::Apply {
            create_namespace: true,
            ..
        }
    );
    if create && target.namespace_id.is_none() {
        create_namespace(store, &manifest.namespace).await?;
    }
    let table = target.table.table_name();
    let namespace = resolve_namespace(
        store,
        &manifest.namespace,
        target.namespace_id.as_ref(),
        table,
    )
    .await?;
    let report = plan_or_apply(command, store, manifest, &namespace).await?;
    print_report(command, target, &report)?;
    let errors = report.errors.as_deref().unwrap_or_default();
    if !errors.is_empty() {
        eprintln!("Errors ({}):", errors.len());
        for error in errors {
            eprintln!("  - {error}");
        }
        return Ok(Ended::WithErrors);
    }
    if report.stopped > 0 {
        eprintln!(
            "Unfinished: {} bucket fan-out(s) stopped at --max-seconds with their place recorded \
             ({} pending in all); run the same apply again to go on",
            report.stopped, report.pending
        );
        return Ok(Ended::Unfinished);
    }
    let changed = !report.changes.is_empty();
    Ok(if changed && !matches!(command, Command::Apply { .. }) {
        Ended::Changes
    } else {
        Ended::Clean
    })
}

async fn plan_or_apply(
    command: &Command,
    store: &impl Store,
    manifest: &Manifest,
    namespace: &str,
) -> Result<Report, CliError> {
    let provisioner = Provisioner { store, namespace };
    tracing::info!(target: zae_provisioner::apply::PROGRESS, phase = "plan", "reading namespace {namespace}");
    let state = provisioner.read_state().await?;
    if let Some(owner) = &state.owner {
        tracing::warn!(
            "namespace {namespace} is managed by the custom resource {owner}; changes made \
             here are undone by that stack's next update"
        );
    }
    let full = matches!(command, Command::Apply { full: true, .. });
    let plan = provisioner.plan_from(state, manifest, full).await?;
    let Command::Apply {
        principal,
        max_seconds,
        ..
    } = command
    else {
        return Ok(plan.report());
    };
    let caller = Caller {
        stop_at: max_seconds
            .map(|s| tokio::time::Instant::now() + std::time::Duration::from_secs(s)),
        ..Caller::local(principal)
    };
    provisioner
        .apply_plan(manifest, plan, &caller)
        .await
        .map_err(Into::into)
}

fn print_report(command: &Command, target: &Target, report: &Report) -> Result<(), CliError> {
    if target.json {
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| CliError::new(Kind::ApplyErrors, e.to_string()))?;
        println!("{text}");
        return Ok(());
    }
    let text = match command {
        Command::Plan { quiet, .. } => report::render_plan(report, *quiet),
        Command::Diff { .. } => report::render_diff(report),
        Command::Apply { quiet, .. } => report::render_apply(report, *quiet),
        _ => String::new(),
    };
    println!("{text}");
    Ok(())
}

async fn adaptive(command: AdaptiveCommand) -> Result<Ended, CliError> {
    let at = match &command {
        AdaptiveCommand::Reset { at }
        | AdaptiveCommand::Utilization { at, .. }
        | AdaptiveCommand::Explain { at, .. } => at,
    };
    let store = open(&at.table).await;
    let table = at.table.table_name();
    let id = resolve_namespace(&store, &at.namespace, at.namespace_id.as_ref(), table).await?;
    let now = chrono::Utc::now().timestamp_millis();
    match &command {
        AdaptiveCommand::Utilization { resource, json, .. } => {
            let status = crate::adaptive::status(&store, &id, resource.as_deref(), now)
                .await
                .map_err(|e| CliError::aws("reading adaptive targets", &e))?;
            print_either(*json, &status, || {
                crate::adaptive::render_status(&status, now)
            })?;
            Ok(Ended::Clean)
        }
        AdaptiveCommand::Explain {
            resource,
            limit,
            json,
            ..
        } => {
            let explained = crate::adaptive::explain(&store, &id, (resource, limit), now)
                .await
                .map_err(|e| CliError::aws("reading the adaptive target", &e))?
                .ok_or_else(|| {
                    CliError::new(
                        Kind::Refused,
                        format!(
                            "namespace {} declares no adaptive {limit} on {resource}: nothing scales it",
                            at.namespace
                        ),
                    )
                })?;
            print_either(*json, &explained, || {
                crate::adaptive::render_explanation(&explained, now)
            })?;
            Ok(Ended::Clean)
        }
        AdaptiveCommand::Reset { .. } => reset(&store, &id).await,
    }
}

/// JSON on `json`, else the text `render` makes.
fn print_either<T: serde::Serialize>(
    json: bool,
    value: &T,
    render: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if json {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| CliError::new(Kind::ApplyErrors, e.to_string()))?;
        println!("{text}");
    } else {
        println!("{}", render());
    }
    Ok(())
}

async fn reset<S: zae_table::store::Store>(store: &S, id: &str) -> Result<Ended, CliError> {
    let reset = crate::adaptive::reset(store, id)
        .await
        .map_err(|e| CliError::aws("resetting adaptive targets", &e))?;
    for r in &reset {
        let lost = if r.stamps_lost > 0 {
            format!(", {} lost their race (run again)", r.stamps_lost)
        } else {
            String::new()
        };
        let moved = if r.superseded {
            "; the controller moved it meanwhile and stamps it (disable it to keep base)"
        } else {
            ""
        };
        println!(
            "  {} {}: factor 1, {} bucket(s) back to what the client would have{lost}{moved}",
            r.resource, r.limit, r.buckets_stamped
        );
    }
    println!("Reset: {} target(s) of namespace {id}.", reset.len());
    Ok(
        if reset.iter().all(|r| r.stamps_lost == 0 && !r.superseded) {
            Ended::Clean
        } else {
            Ended::WithErrors
        },
    )
}

#[cfg(test)]
mod tests;
