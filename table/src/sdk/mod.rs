//! The AWS SDK side of the table model: attribute values to and from the
//! SDK's, failures mapped onto [`StoreError`], and [`DynamoStore`], the
//! [`crate::store::Store`] both Lambdas run on.

mod store;

pub use store::DynamoStore;

use crate::store::StoreError;
use crate::value::{Attr, Item};
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// An SDK error (of any AWS client) with its sources, cut to
/// [`MESSAGE_SHOWN_BYTES`](crate::shown::MESSAGE_SHOWN_BYTES): the SDK's full
/// context includes the raw response, body and all (a GetRecords page is up
/// to 1 MB); the start says what failed.
pub fn error_text<E: std::error::Error>(err: &E) -> String {
    bounded(&DisplayErrorContext(err).to_string())
}

/// `text` cut to [`MESSAGE_SHOWN_BYTES`](crate::shown::MESSAGE_SHOWN_BYTES)
/// bytes at a character boundary, saying how much was left out.
pub fn bounded(text: &str) -> String {
    crate::shown::shown(text, crate::shown::MESSAGE_SHOWN_BYTES).into_owned()
}

pub fn to_sdk(value: &Attr) -> AttributeValue {
    match value {
        Attr::S(s) => AttributeValue::S(s.clone()),
        Attr::N(n) => AttributeValue::N(n.clone()),
        Attr::Bool(b) => AttributeValue::Bool(*b),
        Attr::L(items) => AttributeValue::L(items.iter().map(to_sdk).collect()),
        Attr::M(map) => {
            AttributeValue::M(map.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect())
        }
        Attr::Ss(set) => AttributeValue::Ss(set.iter().cloned().collect()),
        Attr::Null => AttributeValue::Null(true),
    }
}

/// Types the table never holds (binary, number sets) come back as `Null`,
/// which makes an item compare as different and so get rewritten.
pub fn from_sdk(value: &AttributeValue) -> Attr {
    match value {
        AttributeValue::S(s) => Attr::S(s.clone()),
        AttributeValue::N(n) => Attr::N(n.clone()),
        AttributeValue::Bool(b) => Attr::Bool(*b),
        AttributeValue::L(items) => Attr::L(items.iter().map(from_sdk).collect()),
        AttributeValue::M(map) => {
            Attr::M(map.iter().map(|(k, v)| (k.clone(), from_sdk(v))).collect())
        }
        AttributeValue::Ss(set) => Attr::Ss(set.iter().cloned().collect()),
        _ => Attr::Null,
    }
}

pub fn item_to_sdk(item: &Item) -> HashMap<String, AttributeValue> {
    item.iter().map(|(k, v)| (k.clone(), to_sdk(v))).collect()
}

pub fn item_from_sdk(map: &HashMap<String, AttributeValue>) -> Item {
    map.iter().map(|(k, v)| (k.clone(), from_sdk(v))).collect()
}

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
    let message = error_text(&err);
    let retryable = match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            if code == "ConditionalCheckFailedException" {
                return StoreError::ConditionFailed { operation, key };
            }
            if code == "ResourceNotFoundException" {
                return StoreError::TableMissing {
                    operation,
                    key,
                    message,
                };
            }
            if code == "ValidationException" {
                return StoreError::Rejected {
                    operation,
                    key,
                    message,
                };
            }
            service.raw().status_code() >= 500 || THROTTLING_CODES.contains(&code)
        }
        _ => false,
    };
    StoreError::transient_or_fatal(retryable, operation, key, message)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shown::MESSAGE_SHOWN_BYTES;

    #[test]
    fn error_text_is_bounded_at_a_character_boundary() {
        assert_eq!(bounded("short"), "short");
        let body = format!(
            "{}é{}",
            "x".repeat(MESSAGE_SHOWN_BYTES - 1),
            "y".repeat(200_000)
        );
        let cut = bounded(&body);
        assert!(cut.len() < MESSAGE_SHOWN_BYTES + 40, "{} bytes", cut.len());
        assert!(cut.ends_with("more bytes)"), "{cut}");
        assert!(!cut.contains('é'), "a character is never split");
    }
}
