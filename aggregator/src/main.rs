use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use clap::{Parser, Subcommand, ValueEnum};
use lambda_runtime::service_fn;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zae_aggregator::cloudwatch::{CloudWatchSink, SelectedSink};
use zae_aggregator::dynamo::DynamoTable;
use zae_aggregator::metrics::EmfStdout;
use zae_aggregator::poll::{self, PollOptions};
use zae_aggregator::process::Aggregator;
use zae_aggregator::streams::DynamoStreams;
use zae_aggregator::{config, lambda};
use zae_table::telemetry;

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
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum MetricsTarget {
    Emf,
    Cloudwatch,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init();
    let table_arg = cli
        .command
        .as_ref()
        .map(|Command::Poll { table, .. }| table.clone());
    let config = match config::from_env(table_arg) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "invalid configuration");
            eprintln!("aggregator: {e}");
            return ExitCode::from(2);
        }
    };
    let sdk = aws_config::load_defaults(BehaviorVersion::latest()).await;
    // The aggregator retries table writes itself, with its own classification and deadline.
    let dynamodb_config = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .retry_config(RetryConfig::disabled())
        .build();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(dynamodb_config);
    let aggregator = Aggregator::new(
        DynamoTable::new(dynamodb.clone(), &config.table_name),
        config.settings.clone(),
    );
    let emf = EmfStdout {
        namespace: config.metric_namespace.clone(),
        table: config.table_name.clone(),
    };

    let Some(Command::Poll {
        until_idle,
        batch_size,
        checkpoint,
        metrics,
        max_retries,
        ..
    }) = cli.command
    else {
        let sink = SelectedSink::Emf(emf);
        let run = lambda_runtime::run(service_fn(|event| {
            lambda::handle(&aggregator, &sink, event)
        }))
        .await;
        return match run {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "lambda runtime stopped");
                ExitCode::FAILURE
            }
        };
    };
    let sink = match metrics {
        MetricsTarget::Emf => SelectedSink::Emf(emf),
        MetricsTarget::Cloudwatch => SelectedSink::CloudWatch(CloudWatchSink {
            client: aws_sdk_cloudwatch::Client::new(&sdk),
            namespace: config.metric_namespace.clone(),
            table: config.table_name.clone(),
        }),
    };
    let options = PollOptions {
        until_idle,
        batch_size: usize::from(batch_size),
        checkpoint,
        max_retries,
        idle_wait: Duration::from_secs(1),
        principal: "zae-aggregator-poll".into(),
    };
    let result = async {
        let source = DynamoStreams::for_table(
            &dynamodb,
            aws_sdk_dynamodbstreams::Client::new(&sdk),
            &config.table_name,
        )
        .await?;
        poll::run(&source, &aggregator, &sink, &options).await
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
