//! The `aggregator` binary: the Lambda function, or `poll` against any endpoint.

use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;
use clap::{Parser, Subcommand, ValueEnum};
use lambda_runtime::service_fn;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zae_aggregator::metrics::EmfStdout;
use zae_aggregator::metrics::cloudwatch::{CloudWatchSink, SelectedSink};
use zae_aggregator::poll::streams::DynamoStreams;
use zae_aggregator::poll::{self, PollOptions, Start};
use zae_aggregator::settings::{self, Environment};
use zae_aggregator::write::archive::s3::S3Archive;
use zae_aggregator::{lambda, write::Aggregator};
use zae_runtime::aws::Timeouts;
use zae_runtime::telemetry;
use zae_table::SequenceNumber;
use zae_table::sdk::DynamoStore;

/// zae-limiter stream aggregator. Without a subcommand it runs as the Lambda
/// function; `poll` drives the same handler from a stream on any endpoint.
#[derive(Parser)]
#[command(name = "aggregator", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Read a table's stream (endpoint and credentials from the AWS environment)
    /// and feed the handler as the Lambda event source mapping would.
    Poll {
        #[arg(long)]
        table: String,
        /// Exit 0 once caught up with the stream.
        #[arg(long)]
        until_idle: bool,
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
    telemetry::init();
    let table_arg = cli
        .command
        .as_ref()
        .map(|Command::Poll { table, .. }| table.clone());
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
    let sdk = zae_runtime::aws::sdk_config(Timeouts::default()).await;
    // The aggregator retries table writes itself, with its own classification and deadline.
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .retry_config(RetryConfig::disabled())
            .build(),
    );
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
    match cli.command {
        None => run_lambda(&aggregator, &environment).await,
        Some(command) => run_poll(command, &aggregator, &environment, &sdk, &dynamodb).await,
    }
}

fn emf(environment: &Environment) -> EmfStdout {
    EmfStdout {
        namespace: environment.metric_namespace.clone(),
        table: environment.table_name.clone(),
    }
}

async fn run_lambda(aggregator: &Aggregator<Store>, environment: &Environment) -> ExitCode {
    let sink = SelectedSink::Emf(emf(environment));
    let run =
        lambda_runtime::run(service_fn(|event| lambda::handle(aggregator, &sink, event))).await;
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "lambda runtime stopped");
            ExitCode::FAILURE
        }
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
    } = command;
    let sink = match metrics {
        MetricsTarget::Emf => SelectedSink::Emf(emf(environment)),
        MetricsTarget::Cloudwatch => SelectedSink::CloudWatch(CloudWatchSink {
            client: aws_sdk_cloudwatch::Client::new(sdk),
            namespace: environment.metric_namespace.clone(),
            table: environment.table_name.clone(),
        }),
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
