//! How many open shards the table's stream has: the canaries of a tick are
//! as many as reach all of them (`zae_table::adaptive::canary::count_for`).

use crate::poll::source::StreamSource;
use crate::poll::streams::DynamoStreams;
use std::future::Future;

/// The stream's open shards, counted once a tick.
pub trait StreamShards: Sync {
    fn open_shards(&self) -> impl Future<Output = Result<usize, String>> + Send;
    /// The table whose stream this is, when known: a stream batch naming
    /// another table's stream is ignored.
    fn table(&self) -> Option<&str> {
        None
    }
}

/// A known count: tests, and streams whose shards are counted elsewhere.
pub struct Fixed(pub usize);

impl StreamShards for Fixed {
    async fn open_shards(&self) -> Result<usize, String> {
        Ok(self.0)
    }
}

/// The table's latest stream, through DynamoDB Streams' `DescribeStream`
/// (the shards without an ending sequence number are open).
pub struct TableStream {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub streams: aws_sdk_dynamodbstreams::Client,
    pub table: String,
}

impl StreamShards for TableStream {
    fn table(&self) -> Option<&str> {
        Some(&self.table)
    }

    async fn open_shards(&self) -> Result<usize, String> {
        let stream = DynamoStreams::for_table(&self.dynamodb, self.streams.clone(), &self.table)
            .await
            .map_err(|e| e.to_string())?;
        let shards = stream.shards().await.map_err(|e| e.to_string())?;
        Ok(shards.iter().filter(|s| s.last.is_none()).count())
    }
}
