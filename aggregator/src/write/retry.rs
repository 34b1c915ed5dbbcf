//! Retrying retryable table errors with backoff, within the invocation's deadline.

use super::Aggregator;
use std::time::{Duration, Instant};
use zae_table::store::{Store, StoreError};

/// Backoff for retryable table errors: exponential with full jitter.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base: Duration::from_millis(25),
            cap: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.cap);
        ceiling.mul_f64(jitter())
    }
}

/// A number in [0.5, 1): enough spread to keep retries of concurrent writes apart.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, RandomState};
    let bits = RandomState::new().hash_one(Instant::now());
    0.5 + (bits >> 11) as f64 / (1u64 << 53) as f64 / 2.0
}

impl<S: Store> Aggregator<S> {
    /// Runs `op` until it succeeds, fails for good, runs out of attempts, or
    /// the next backoff would end past `deadline`.
    pub(super) async fn retrying<R, F, Fut>(
        &self,
        deadline: Option<Instant>,
        mut op: F,
    ) -> Result<R, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<R, StoreError>>,
    {
        let policy = self.settings.retry;
        let mut attempt = 0;
        loop {
            match op().await {
                Err(e) if e.is_retryable() && attempt + 1 < policy.max_attempts => {
                    let delay = policy.delay(attempt);
                    if deadline.is_some_and(|d| Instant::now() + delay >= d) {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, attempt, "retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }
}
