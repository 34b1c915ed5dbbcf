//! [`StreamSource`] over the AWS SDK's DynamoDB Streams client.

use crate::poll::source::{Page, Position, ShardInfo, StreamSource};
use crate::poll::{PollError, lambda_record};
use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::operation::get_records::GetRecordsError;
use aws_sdk_dynamodbstreams::operation::get_shard_iterator::GetShardIteratorError;
use aws_sdk_dynamodbstreams::types::{Shard, ShardIteratorType};
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
                    .filter_map(shard_info),
            );
            match description.last_evaluated_shard_id {
                Some(next) => start = Some(next),
                None => break,
            }
        }
        Ok(shards)
    }

    async fn iterator(&self, shard: &str, from: &Position) -> Result<Option<String>, PollError> {
        let request = self
            .client
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard);
        let request = match from {
            Position::TrimHorizon => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            Position::After(sequence) => request
                .shard_iterator_type(ShardIteratorType::AfterSequenceNumber)
                .sequence_number(sequence.as_stream()),
            Position::At(sequence) => request
                .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                .sequence_number(sequence.as_stream()),
        };
        match request.send().await {
            Ok(out) => Ok(out.shard_iterator),
            Err(e) => match e.as_service_error() {
                Some(GetShardIteratorError::TrimmedDataAccessException(_)) => {
                    Err(PollError::Trimmed {
                        shard: shard.into(),
                        position: format!("{from:?}"),
                    })
                }
                // A shard trimmed away since the listing has nothing more to give.
                Some(GetShardIteratorError::ResourceNotFoundException(_)) => Ok(None),
                _ => Err(stream_error("GetShardIterator", shard, e)),
            },
        }
    }

    async fn page(&self, iterator: &str, limit: i32) -> Result<Page, PollError> {
        let out = self
            .client
            .get_records()
            .shard_iterator(iterator)
            .limit(limit)
            .send()
            .await;
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                return Err(match e.as_service_error() {
                    Some(GetRecordsError::ExpiredIteratorException(_)) => {
                        PollError::IteratorExpired {
                            shard: shard_in(iterator),
                        }
                    }
                    _ => stream_error("GetRecords", &shard_in(iterator), e),
                });
            }
        };
        Ok(Page {
            records: out
                .records
                .unwrap_or_default()
                .iter()
                .map(|r| lambda_record(r, &self.stream_arn))
                .collect(),
            next: out.next_shard_iterator,
        })
    }
}

fn shard_info(shard: Shard) -> Option<ShardInfo> {
    let range = shard.sequence_number_range;
    let number = |n: Option<String>| n.and_then(|n| SequenceNumber::parse(&n).ok());
    Some(ShardInfo {
        id: shard.shard_id?,
        parent: shard.parent_shard_id,
        first: number(
            range
                .as_ref()
                .and_then(|r| r.starting_sequence_number.clone()),
        ),
        last: number(range.and_then(|r| r.ending_sequence_number)),
    })
}

/// Iterators are opaque; name the error by a prefix, never the whole token.
fn shard_in(iterator: &str) -> String {
    format!(
        "iterator {}…",
        iterator.chars().take(24).collect::<String>()
    )
}
