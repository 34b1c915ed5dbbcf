//! Mapping AWS SDK failures onto [`StoreError`], shared by every Lambda.

use crate::store_error::StoreError;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

/// Error codes DynamoDB uses for "slow down and try again".
const THROTTLING_CODES: [&str; 5] = [
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "LimitExceededException",
];

/// Classifies an SDK failure and names the call and key it belongs to.
pub fn classify<E, R>(operation: &'static str, key: String, err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + HasStatus,
{
    let message = DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Retryable {
                operation,
                key,
                message,
            }
        }
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            if code == "ConditionalCheckFailedException" {
                StoreError::ConditionFailed { operation, key }
            } else if service.raw().status_code() >= 500 || THROTTLING_CODES.contains(&code) {
                StoreError::Retryable {
                    operation,
                    key,
                    message,
                }
            } else {
                StoreError::Fatal {
                    operation,
                    key,
                    message,
                }
            }
        }
        _ => StoreError::Fatal {
            operation,
            key,
            message,
        },
    }
}

/// The HTTP status of a raw response, whichever response type the SDK uses.
pub trait HasStatus {
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_smithy_runtime_api::http::Response {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}
