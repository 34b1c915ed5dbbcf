//! [`StreamSource`] over the AWS SDK's DynamoDB Streams client.

use crate::poll::record::page_from_body;
use crate::poll::source::{Page, Position, ShardInfo, StreamSource};
use crate::poll::{PollError, lambda_record};
use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::config::http::HttpResponse;
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
        message: zae_table::sdk::error_text(&e),
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
                if let Some(page) = self.unreadable_page(&e) {
                    return page;
                }
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

impl DynamoStreams {
    /// A page the service answered (2xx) but the SDK could not read, read
    /// here instead: DynamoDB Local 3.x writes an empty map in an image as
    /// `{}`, with no type, which the SDK's union of attribute types refuses
    /// for the whole page (amazon-dynamodb-local-samples#37).
    fn unreadable_page(
        &self,
        e: &aws_sdk_dynamodbstreams::error::SdkError<GetRecordsError, HttpResponse>,
    ) -> Option<Result<Page, PollError>> {
        let raw = e.raw_response().filter(|raw| raw.status().is_success())?;
        let body = raw.body().bytes()?;
        tracing::warn!(
            bytes = body.len(),
            "GetRecords answered a page the SDK cannot read; reading its records directly"
        );
        Some(
            page_from_body(body, &self.stream_arn).map_err(|message| PollError::Stream {
                operation: "GetRecords",
                target: self.stream_arn.clone(),
                message,
            }),
        )
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

#[cfg(test)]
mod tests {
    //! GetRecords answers replayed through the SDK's own mock client, so the
    //! SDK's deserialiser meets the bytes DynamoDB Local sent.
    use super::*;
    use aws_smithy_mocks::{mock, mock_client};
    use aws_smithy_types::body::SdkBody;
    use zae_table::StreamRecord;

    /// A page of DynamoDB Local 3.3.1's stream (the 0.17.0 client's set-up
    /// and first requests), as it answered GetRecords: entity items carry
    /// `"metadata":{}`, an empty map without its type.
    const DYNAMODB_LOCAL_3: &str =
        include_str!("../../../tests/fixtures/dynamodb_local_3_get_records.json");

    fn answering(body: &'static [u8]) -> DynamoStreams {
        let rule = mock!(Client::get_records).then_http_response(move || {
            HttpResponse::new(200.try_into().unwrap(), SdkBody::from(body))
        });
        DynamoStreams {
            client: mock_client!(aws_sdk_dynamodbstreams, [&rule]),
            stream_arn: "arn:stream".into(),
        }
    }

    #[tokio::test]
    async fn a_page_with_untyped_empty_maps_is_read_whole() {
        let page = answering(DYNAMODB_LOCAL_3.as_bytes())
            .page("it", 100)
            .await
            .unwrap();
        assert_eq!(page.records.len(), 30);
        assert!(page.next.is_some(), "an open shard goes on");
        let texts: Vec<String> = page.records.iter().map(|r| r.to_string()).collect();
        let parsed: Vec<StreamRecord> = texts
            .iter()
            .map(|t| StreamRecord::parse(t).expect("every record reads"))
            .collect();
        let first = &parsed[0];
        assert_eq!(first.sequence_number.as_stream(), "000000000000000000008");
        let meta = texts
            .iter()
            .find(|t| t.contains("ENTITY#proj-1") && t.contains("#META"))
            .unwrap();
        assert!(meta.contains(r#""metadata":{"M":{}}"#), "{meta}");
        let buckets = parsed
            .iter()
            .filter(|r| {
                r.partition_key()
                    .is_some_and(|pk| pk.contains(&format!("/{}", zae_table::keys::BUCKET_PREFIX)))
            })
            .count();
        assert_eq!(buckets, 4, "the bucket records, with their images");
        assert!(
            texts
                .iter()
                .all(|t| t.contains(r#""eventSourceARN":"arn:stream""#))
        );
    }

    #[tokio::test]
    async fn a_body_that_is_not_a_page_is_an_error_of_bounded_text() {
        let junk: &'static [u8] = Box::leak(
            format!("<html>{}</html>", "x".repeat(200_000))
                .into_bytes()
                .into_boxed_slice(),
        );
        let err = answering(junk)
            .page("it", 100)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("GetRecords"), "{err}");
        assert!(err.len() < 700, "{} bytes: {err}", err.len());
    }
}
