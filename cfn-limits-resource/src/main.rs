//! The provisioner Lambda (`bootstrap`): CloudFormation custom-resource
//! events and direct invokes of the zae-limiter CLI. `--version` prints the
//! build and its table stamp.

// The whole apply is one future inside the runtime's: its type nests deeper
// than the default limit allows the compiler to lay out.
#![recursion_limit = "256"]

use cfn_limits_resource::cloudformation::HttpResponder;
use cfn_limits_resource::lambda::{self, Deps};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use std::sync::Arc;
use zae_runtime::aws::Timeouts;
use zae_runtime::{telemetry, version};

const BINARY: &str = "cfn-limits-resource";

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match version::bootstrap_args(BINARY, &args) {
        Ok(None) => {}
        Ok(Some(line)) => {
            println!("{line}");
            return Ok(());
        }
        Err(refused) => {
            eprintln!("{refused}");
            std::process::exit(64);
        }
    }
    telemetry::init();
    version::announce(BINARY);
    let sdk = zae_runtime::aws::sdk_config(Timeouts::default()).await;
    let deps = Arc::new(Deps {
        tables: aws_sdk_dynamodb::Client::new(&sdk),
        default_table: std::env::var("TABLE_NAME").ok().filter(|t| !t.is_empty()),
        responder: HttpResponder::new()?,
        continuer: aws_sdk_lambda::Client::new(&sdk),
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let deps = deps.clone();
        async move {
            let context = event.context;
            lambda::handle(
                deps,
                event.payload,
                context.deadline,
                context.invoked_function_arn,
            )
            .await
        }
    }))
    .await
}
