//! [`StreamSource`] over the AWS SDK's DynamoDB Streams client.

use crate::poll::{PollError, ShardInfo, StreamSource, lambda_record};
use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use serde_json::Value;
use zae_table::SequenceNumber;

pub struct DynamoStreams {
    client: Client,
    stream_arn: String,
}

fn stream_error<E: std::error::Error + 'static>(
    operation: &'static str,
    target: &str,
    e: E,
) -> PollError {
    PollError::Stream {
        operation,
        target: target.into(),
        message: DisplayErrorContext(&e).to_string(),
    }
}

impl DynamoStreams {
    /// Finds the table's current stream.
    pub async fn for_table(
        dynamodb: &aws_sdk_dynamodb::Client,
        client: Client,
        table: &str,
    ) -> Result<DynamoStreams, PollError> {
        let described = dynamodb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| stream_error("DescribeTable", table, e))?;
        let stream_arn = described
            .table
            .and_then(|t| t.latest_stream_arn)
            .ok_or_else(|| PollError::Stream {
                operation: "DescribeTable",
                target: table.into(),
                message: "the table has no stream; enable NEW_AND_OLD_IMAGES".into(),
            })?;
        Ok(DynamoStreams { client, stream_arn })
    }
}

impl StreamSource for DynamoStreams {
    fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    async fn shards(&self) -> Result<Vec<ShardInfo>, PollError> {
        let mut shards = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| stream_error("DescribeStream", &self.stream_arn, e))?;
            let Some(description) = out.stream_description else {
                break;
            };
            shards.extend(
                description
                    .shards
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|s| {
                        Some(ShardInfo {
                            id: s.shard_id?,
                            parent: s.parent_shard_id,
                        })
                    }),
            );
            match description.last_evaluated_shard_id {
                Some(next) => start = Some(next),
                None => break,
            }
        }
        Ok(shards)
    }

    async fn read_after(
        &self,
        shard: &str,
        after: Option<&SequenceNumber>,
        limit: i32,
    ) -> Result<Vec<Value>, PollError> {
        // A fresh iterator for every read: an iterator held across a cancelled
        // transaction goes blind on moto, and real ones expire after 15 minutes.
        let request = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard);
        let request = match after {
            Some(sequence) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(sequence.as_stream()),
            None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
        };
        let iterator = request
            .send()
            .await
            .map_err(|e| stream_error("GetShardIterator", shard, e))?
            .shard_iterator;
        let Some(iterator) = iterator else {
            return Ok(Vec::new());
        };
        let out = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await
            .map_err(|e| stream_error("GetRecords", shard, e))?;
        Ok(out
            .records
            .unwrap_or_default()
            .iter()
            .map(|r| lambda_record(r, &self.stream_arn))
            .collect())
    }
}
