//! `zae-limits`'s command line, spelled like the Python CLI's where the two
//! overlap (`--name/-n`, `--region`, `--endpoint-url`, `--file/-f`, `--quiet/-q`).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
pub use zae_runtime::cli::Table;

pub const EXIT_CODES: &str = "\
Exit codes:
  0   done; plan and diff also when they find changes, unless --exit-code
  1   an apply (or adaptive reset) ran, and some of its writes failed
  2   plan or diff with --exit-code found changes
  3   invalid manifest or input file
  4   an AWS call failed (credentials, network, throttling, no such table)
  5   refused by the table's state (namespace not registered, Lambdas too old)
  64  bad command line";

#[derive(Parser)]
#[command(
    name = "zae-limits",
    version = zae_runtime::version::long(),
    about = "Plan and apply zae-limiter limits manifests on a table, with no Lambda in between",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// A manifest and where it goes.
#[derive(Args, Debug)]
pub struct Target {
    /// The limits manifest (YAML).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub table: Table,
    /// The namespace id, instead of looking up the manifest's namespace name.
    #[arg(long, value_name = "ID")]
    pub namespace_id: Option<String>,
    /// Print the report, or the error, as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Print the DynamoDB calls made, by operation, as JSON on stderr.
    #[arg(long)]
    pub stats: bool,
    /// No progress lines on stderr (warnings are still printed).
    #[arg(long)]
    pub no_progress: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show the levels an apply would write, and why.
    Plan {
        #[command(flatten)]
        target: Target,
        /// Print only the summary, not a line per changed entry.
        #[arg(long, short = 'q')]
        quiet: bool,
        /// Exit 2 when there are changes (0 when there are none).
        #[arg(long)]
        exit_code: bool,
    },
    /// Write the manifest's levels and fan them out to existing buckets.
    Apply {
        #[command(flatten)]
        target: Target,
        /// Rewrite every declared level and re-run every fan-out.
        #[arg(long)]
        full: bool,
        /// Print only the summary, not a line per changed entry.
        #[arg(long, short = 'q')]
        quiet: bool,
        /// Recorded as the audit events' principal.
        #[arg(long, default_value = "zae-limits-cli", value_name = "NAME")]
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
        /// Exit 2 when there is drift (0 when there is none).
        #[arg(long)]
        exit_code: bool,
    },
    /// Initialise a table as this project's stack does: stamp the version
    /// record for these Lambdas and register namespaces (idempotent).
    Init {
        #[command(flatten)]
        table: Table,
        /// A namespace to register; repeat for more.
        #[arg(
            long = "namespace",
            short = 'N',
            value_name = "NAME",
            default_value = "default"
        )]
        namespaces: Vec<String>,
        /// Print what was done as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Operate a namespace's adaptive limits.
    Adaptive {
        #[command(subcommand)]
        command: AdaptiveCommand,
    },
    /// Release a namespace from the custom resource that owns it, when that
    /// resource's stack no longer exists (a stack deleted or rolled back
    /// without releasing it): shows the owner, asks to confirm, and removes
    /// it only while the record still names that owner. Levels stay as they
    /// are; the next stack that declares the namespace takes it over.
    ReleaseOwner {
        #[command(flatten)]
        at: Namespace,
        /// Release without asking (scripts); required without a terminal.
        #[arg(long)]
        yes: bool,
    },
    /// Print a tenant stack with a Custom::ZaeLimiterLimits resource.
    CfnTemplate {
        /// The limits manifest (YAML).
        #[arg(long, short = 'f', value_name = "FILE")]
        file: PathBuf,
        /// The stack that exports `<stack>-ProvisionerArn` and `<stack>-TableName`.
        #[arg(long, short = 'n', visible_alias = "stack", value_name = "STACK")]
        name: String,
        /// Emit FullApply: every stack update applies in full.
        #[arg(long)]
        full: bool,
    },
}

impl Command {
    /// The manifest and table of `plan`, `apply` and `diff`; `None` for the
    /// commands without a manifest.
    pub fn target(&self) -> Option<&Target> {
        match self {
            Command::Plan { target, .. }
            | Command::Apply { target, .. }
            | Command::Diff { target, .. } => Some(target),
            _ => None,
        }
    }
}

/// A table's namespace, by name or id.
#[derive(Args, Debug)]
pub struct Namespace {
    #[command(flatten)]
    pub table: Table,
    /// The namespace name.
    #[arg(long, short = 'N', default_value = "default", value_name = "NAME")]
    pub namespace: String,
    /// The namespace id, instead of looking the name up.
    #[arg(long, value_name = "ID")]
    pub namespace_id: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum AdaptiveCommand {
    /// Return every stamped bucket of the namespace to base and every target
    /// to a factor of one. A running controller raises them again at its next
    /// tick while the manifest declares them adaptive: disable it first
    /// (`AdaptiveLimits=disabled`) or remove `adaptive` from the manifest.
    Reset {
        #[command(flatten)]
        at: Namespace,
    },
    /// Show, per resource and limit, the use of the recent complete minutes
    /// (the minute in progress apart, marked partial), the estimated
    /// capacity and target, the utilization of the last complete minute,
    /// the factor, why and its age, the controller's last tick, per
    /// opted-in level base x factor = effective, and the refill amounts the
    /// buckets carry (min, median, max).
    Utilization {
        #[command(flatten)]
        at: Namespace,
        /// Only this resource.
        #[arg(long, value_name = "RESOURCE")]
        resource: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Say why a resource's limit has the factor it has: the minutes the
    /// controller kept, the response it fitted, its reading of use at base,
    /// the noise band, the reason for the last move, the last moves, and the
    /// last hour drawn minute by minute (utilization against the target,
    /// and the factor).
    Explain {
        #[command(flatten)]
        at: Namespace,
        /// The resource.
        #[arg(long, value_name = "RESOURCE")]
        resource: String,
        /// The limit.
        #[arg(long, value_name = "LIMIT")]
        limit: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}
