//! The archive in an S3 bucket: one PutObject per object, gzip JSON Lines.

use super::Archive;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use futures::future::BoxFuture;
use zae_table::store::StoreError;

pub struct S3Archive {
    pub client: aws_sdk_s3::Client,
    pub bucket: String,
}

impl Archive for S3Archive {
    fn put<'a>(&'a self, key: &'a str, body: Vec<u8>) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .content_type("application/x-ndjson")
                .content_encoding("gzip")
                .body(ByteStream::from(body))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify(&self.bucket, key, e))
        })
    }
}

/// What S3 answers for a key it will never take.
const KEY_REFUSED: [&str; 3] = ["KeyTooLongError", "InvalidURI", "InvalidObjectName"];

/// Throttling, a 5xx, a timeout or a dropped connection is worth another try.
/// A key S3 will never take is rejected (the object is skipped, counted and
/// logged). Anything else, access denied or a missing bucket included, fails
/// the batch: the item is already gone from the table, so it must wait for
/// a retry rather than be dropped.
fn classify<E, R>(bucket: &str, key: &str, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
{
    let message = zae_table::sdk::error_text(&err);
    let code = match &err {
        SdkError::ServiceError(e) => e.err().code(),
        _ => None,
    };
    if code.is_some_and(|c| KEY_REFUSED.contains(&c)) {
        return StoreError::Rejected {
            operation: "PutObject",
            key: format!("s3://{bucket}/{key}"),
            message,
        };
    }
    let retryable = match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(e) => {
            const TRANSIENT: [&str; 4] = [
                "SlowDown",
                "RequestTimeout",
                "InternalError",
                "ServiceUnavailable",
            ];
            e.err().code().is_some_and(|c| TRANSIENT.contains(&c))
        }
        _ => false,
    };
    StoreError::transient_or_fatal(
        retryable,
        "PutObject",
        format!("s3://{bucket}/{key}"),
        message,
    )
}
