//! Retrying retryable table errors with backoff, within the invocation's deadline.

use super::Aggregator;
use std::time::{Duration, Instant};
use zae_table::store::{Store, StoreError};

/// Backoff for retryable table errors: exponential, each wait drawn
/// between half the ceiling and the ceiling.
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

/// Whether `deadline` has come, on tokio's clock (a test that pauses it
/// gets a slow table without waiting for it).
pub(super) fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| tokio::time::Instant::now().into_std() >= d)
}

/// The error of work the deadline stopped: retryable, so that the records
/// it was for are redelivered.
pub(super) fn out_of_time(what: &str) -> StoreError {
    StoreError::Retryable {
        operation: "write",
        key: what.to_owned(),
        message: "stopped at the invocation's deadline".into(),
    }
}

/// `work`'s output, or `None` when `deadline` came first (then `work` is
/// dropped where it stood).
pub(super) async fn bounded<T>(
    deadline: Option<Instant>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), work).await.ok(),
        None => Some(work.await),
    }
}

/// `op`, stopped at `deadline`: an SDK attempt may take longer than the
/// margin the deadline keeps before Lambda's own timeout.
pub(super) async fn within<R>(
    deadline: Option<Instant>,
    op: impl std::future::Future<Output = Result<R, StoreError>>,
) -> Result<R, StoreError> {
    bounded(deadline, op)
        .await
        .unwrap_or_else(|| Err(out_of_time("an attempt in flight")))
}

impl<S: Store> Aggregator<S> {
    /// Runs `op` until it succeeds, fails for good, runs out of attempts, or
    /// the next backoff would end past `deadline`. No attempt starts at or
    /// past `deadline`, and none runs past it.
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
            if past(deadline) {
                return Err(out_of_time("an attempt not started"));
            }
            match within(deadline, op()).await {
                Err(e) if e.is_retryable() && attempt + 1 < policy.max_attempts => {
                    let delay = policy.delay(attempt);
                    // The wait and the next attempt's start must both fit.
                    if deadline.is_some_and(|d| d.checked_sub(delay).is_none_or(|s| past(Some(s))))
                    {
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
