//! The provisioner Lambda (`bootstrap`): CloudFormation custom-resource
//! events and direct invokes of the zae-limiter CLI.

use aws_config::BehaviorVersion;
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_norway::Value as Tree;
use std::sync::Arc;
use zae_limits::cfn::HttpResponder;
use zae_limits::lambda::{self, Deps};
use zae_table::telemetry;

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init();
    let sdk = aws_config::load_defaults(BehaviorVersion::latest()).await;
    let deps = Arc::new(Deps {
        client: aws_sdk_dynamodb::Client::new(&sdk),
        default_table: std::env::var("TABLE_NAME").ok().filter(|t| !t.is_empty()),
        responder: HttpResponder::new()?,
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Tree>| {
        let deps = deps.clone();
        async move {
            let context = event.context;
            lambda::handle(deps, event.payload, context.deadline, context.invoked_function_arn)
                .await
                .map_err(Error::from)
        }
    }))
    .await
}
