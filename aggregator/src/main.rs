//! The `aggregator` binary: the Lambda function, or `poll` against any endpoint.
#![recursion_limit = "256"]

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use clap::{Parser, Subcommand, ValueEnum};
use lambda_runtime::service_fn;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zae_aggregator::control::stream_shards::TableStream;
use zae_aggregator::metrics::EmfStdout;
use zae_aggregator::metrics::SelectedSink;
use zae_aggregator::poll::streams::DynamoStreams;
use zae_aggregator::poll::{self, PollOptions, Start};
use zae_aggregator::settings::{self, Environment};
use zae_aggregator::write::archive::s3::S3Archive;
use zae_aggregator::{lambda, write::Aggregator};
use zae_runtime::aws::Timeouts;
use zae_runtime::cli::Table;
use zae_runtime::telemetry;
use zae_table::SequenceNumber;
use zae_table::sdk::DynamoStore;

/// zae-limiter stream aggregator. Without a subcommand it runs as the Lambda
/// function; `poll` drives the same handler from a stream on any endpoint.
#[derive(Parser)]
#[command(name = "aggregator", version = zae_runtime::version::long())]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Read a table's stream (endpoint and credentials from the AWS environment)
    /// and feed the handler as the Lambda event source mapping would.
    Poll {
        #[command(flatten)]
        at: Table,
        /// Exit 0 once caught up with the stream.
        #[arg(long)]
        until_idle: bool,
        /// Records per handler call, as the event source mapping's BatchSize.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=10_000))]
        batch_size: u16,
        /// Position file; a new one replays the stream from its start.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Where overdraw metrics go: EMF on stdout, or PutMetricData.
        #[arg(long, value_enum, default_value_t = MetricsTarget::Emf)]
        metrics: MetricsTarget,
        /// Redeliveries of a failing batch before giving up.
        #[arg(long, default_value_t = 5)]
        max_retries: u32,
        /// Start one shard at this record (inclusive), e.g. a dead letter's
        /// startSequenceNumber; other shards go on from the checkpoint.
        #[arg(long, value_name = "SEQUENCE", value_parser = parse_sequence)]
        from: Option<SequenceNumber>,
        /// The shard of --from (a dead letter's shardId); needed only when
        /// several shards' ranges hold the sequence.
        #[arg(long, value_name = "SHARD_ID", requires = "from")]
        shard: Option<String>,
    },
    /// Run the adaptive-limit controller against a table: one tick per
    /// minute, as the scheduled event runs it in Lambda.
    Control {
        #[command(flatten)]
        at: Table,
        /// One tick, then exit: evaluates each newly complete minute once.
        #[arg(long)]
        once: bool,
        /// The tick's clock, epoch milliseconds (with --once: for tests and
        /// replays); without it, the system clock, and the tick waits up to
        /// 15 s for its canaries to come through.
        #[arg(long, value_name = "MS", requires = "once")]
        now: Option<i64>,
    },
}

fn parse_sequence(text: &str) -> Result<SequenceNumber, String> {
    SequenceNumber::parse(text).map_err(|e| e.to_string())
}

#[derive(Clone, Copy, ValueEnum)]
enum MetricsTarget {
    Emf,
    Cloudwatch,
}

type Store = DynamoStore;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.command.is_none() && std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        // Not under Lambda: the runtime would only fail to reach its API.
        eprintln!(
            "aggregator: no subcommand, and no Lambda runtime (AWS_LAMBDA_RUNTIME_API is unset)\n"
        );
        let _ = <Cli as clap::CommandFactory>::command().write_long_help(&mut std::io::stderr());
        return ExitCode::from(64);
    }
    telemetry::init();
    zae_runtime::version::announce("aggregator");
    let at = cli.command.as_ref().map(|command| match command {
        Command::Poll { at, .. } | Command::Control { at, .. } => at.clone(),
    });
    let table_arg = at.as_ref().map(|at| at.table_name().to_owned());
    let environment = match settings::from_env(table_arg) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "invalid configuration");
            eprintln!("aggregator: {e}");
            return ExitCode::from(2);
        }
    };
    for warning in &environment.warnings {
        tracing::warn!("{warning}");
    }
    let sdk = match &at {
        Some(at) => at.sdk_config(Timeouts::default()).await,
        None => zae_runtime::aws::sdk_config(Timeouts::default()).await,
    };
    // The aggregator retries table writes itself, with its own classification and deadline.
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .retry_config(RetryConfig::disabled())
            .build(),
    );
    zae_aggregator::write::set_clock_skew(environment.clock_skew_ms);
    let mut aggregator = Aggregator::new(
        DynamoStore::new(dynamodb.clone(), &environment.table_name),
        environment.settings.clone(),
    );
    if let Some(bucket) = &environment.archive_bucket {
        // Retried by the aggregator, like its table writes. A local endpoint
        // (moto) serves buckets by path, not by host name.
        let local = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"]
            .iter()
            .any(|v| std::env::var_os(v).is_some());
        let client = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .retry_config(RetryConfig::disabled())
                .force_path_style(local)
                .build(),
        );
        let archive = S3Archive {
            client,
            bucket: bucket.clone(),
        };
        aggregator = aggregator.with_archive(std::sync::Arc::new(archive));
    }
    let shards = TableStream {
        dynamodb: dynamodb.clone(),
        streams: aws_sdk_dynamodbstreams::Client::new(&sdk),
        table: environment.table_name.clone(),
    };
    match cli.command {
        None => run_lambda(&aggregator, &environment, &shards).await,
        Some(Command::Control { once, now, .. }) => {
            run_control(&aggregator, &environment, &shards, once, now).await
        }
        Some(command) => run_poll(command, &aggregator, &environment, &sdk, &dynamodb).await,
    }
}

fn emf(environment: &Environment) -> EmfStdout {
    EmfStdout {
        namespace: environment.metric_namespace.clone(),
        table: environment.table_name.clone(),
    }
}

async fn run_lambda(
    aggregator: &Aggregator<Store>,
    environment: &Environment,
    shards: &TableStream,
) -> ExitCode {
    let sink = SelectedSink::Emf(emf(environment));
    let run = lambda_runtime::run(service_fn(|event| {
        lambda::dispatch(aggregator, &sink, shards, event)
    }))
    .await;
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "lambda runtime stopped");
            ExitCode::FAILURE
        }
    }
}

/// `aggregator control`: ticks, printing each tick's report as a JSON line
/// on stderr (metrics as EMF go to stdout, one document per line). With
/// `--once`, exits 1 when the tick or any namespace's failed.
async fn run_control(
    aggregator: &Aggregator<Store>,
    environment: &Environment,
    shards: &TableStream,
    once: bool,
    now: Option<i64>,
) -> ExitCode {
    let sink = emf(environment);
    loop {
        let now_ms = now.unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
        let controller = zae_aggregator::control::Controller {
            store: aggregator.store(),
            shards,
            stop_at: None,
            wait: now.is_none().then_some(Duration::from_secs(15)),
        };
        let failed = match controller.tick_all(now_ms).await {
            Ok(tick) => {
                let events = zae_aggregator::control::metrics(&tick);
                if let Err(e) = zae_aggregator::metrics::MetricSink::publish(&sink, &events).await {
                    tracing::error!(error = %e, "publishing metrics failed");
                }
                eprintln!("{}", serde_json::json!({ "control": tick }));
                !tick.failed.is_empty()
            }
            Err(e) => {
                tracing::error!(error = %e, "controller tick failed");
                eprintln!("aggregator control: {e}");
                true
            }
        };
        if once {
            return if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
        // Next tick a few seconds into the next minute.
        let ms = chrono::Utc::now().timestamp_millis();
        let next = (ms.div_euclid(60_000) + 1) * 60_000 + 2_000;
        tokio::time::sleep(Duration::from_millis((next - ms).max(0) as u64)).await;
    }
}

async fn run_poll(
    command: Command,
    aggregator: &Aggregator<Store>,
    environment: &Environment,
    sdk: &SdkConfig,
    dynamodb: &aws_sdk_dynamodb::Client,
) -> ExitCode {
    let Command::Poll {
        until_idle,
        batch_size,
        checkpoint,
        metrics,
        max_retries,
        from,
        shard,
        ..
    } = command
    else {
        unreachable!("run_poll is called with Poll only")
    };
    let sink = match metrics {
        MetricsTarget::Emf => SelectedSink::Emf(emf(environment)),
        #[cfg(feature = "cloudwatch")]
        MetricsTarget::Cloudwatch => {
            SelectedSink::CloudWatch(zae_aggregator::metrics::cloudwatch::CloudWatchSink {
                client: aws_sdk_cloudwatch::Client::new(sdk),
                namespace: environment.metric_namespace.clone(),
                table: environment.table_name.clone(),
            })
        }
        #[cfg(not(feature = "cloudwatch"))]
        MetricsTarget::Cloudwatch => {
            eprintln!(
                "aggregator poll: --metrics cloudwatch needs the cloudwatch feature \
                 (cargo install --path aggregator --features cloudwatch)"
            );
            return ExitCode::from(64);
        }
    };
    let options = PollOptions {
        until_idle,
        batch_size: usize::from(batch_size),
        checkpoint,
        max_retries,
        idle_wait: Duration::from_secs(1),
        principal: "zae-aggregator-poll".into(),
        start: from.map(|sequence| Start { sequence, shard }),
        archiving: environment.archive_bucket.is_some(),
    };
    let result = async {
        let streams = aws_sdk_dynamodbstreams::Client::new(sdk);
        let source = DynamoStreams::for_table(dynamodb, streams, &environment.table_name).await?;
        poll::run(&source, aggregator, &sink, &options).await
    }
    .await;
    match result {
        Ok(summary) => {
            eprintln!("{}", serde_json::json!({"poll_summary": summary}));
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "poll stopped");
            eprintln!("aggregator poll: {e}");
            ExitCode::FAILURE
        }
    }
}
