//! The table arguments both command lines share, spelled as the Python
//! CLI spells them: `--name/-n` (the stack, whose table has its name) or
//! `--table/-t` (a table named otherwise), `--region`, `--endpoint-url`.

use clap::Args;

/// Which table (by stack or by name, one of the two), and how to reach it.
#[derive(Args, Clone, Debug)]
#[command(group(clap::ArgGroup::new("table_or_stack").required(true).multiple(false)))]
pub struct Table {
    /// The stack whose table to use: a stack that created its table gave it
    /// its own name (as `zae-limiter --name`).
    #[arg(long, short = 'n', value_name = "STACK", group = "table_or_stack")]
    pub name: Option<String>,
    /// The table's name, for a stack attached to a table named otherwise.
    #[arg(long, short = 't', value_name = "TABLE", group = "table_or_stack")]
    pub table: Option<String>,
    /// The AWS region (default: the AWS environment's).
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// Send every AWS call to this endpoint (DynamoDB Local, moto, LocalStack).
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
}

impl Table {
    /// The table these arguments name.
    pub fn table_name(&self) -> &str {
        self.table
            .as_deref()
            .or(self.name.as_deref())
            .unwrap_or_default()
    }

    /// The SDK configuration for these arguments, with `timeouts` on every request.
    pub async fn sdk_config(&self, timeouts: crate::aws::Timeouts) -> aws_config::SdkConfig {
        crate::aws::sdk_config_at(timeouts, self.region.clone(), self.endpoint_url.clone()).await
    }
}
