//! A failed table call, named by operation and key, in three kinds the
//! callers act on differently.

/// A failed table call, with the operation and key it was about.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{operation} on {key}: condition check failed")]
    ConditionFailed {
        operation: &'static str,
        key: String,
    },
    /// Throttling, a 5xx, a timeout or a dropped connection: worth another try.
    #[error("{operation} on {key}: {message} (retryable)")]
    Retryable {
        operation: &'static str,
        key: String,
        message: String,
    },
    #[error("{operation} on {key}: {message}")]
    Fatal {
        operation: &'static str,
        key: String,
        message: String,
    },
}

impl StoreError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Retryable { .. })
    }
}
