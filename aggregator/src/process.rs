//! One batch, end to end: plan it, write snapshots and audit events with
//! bounded concurrency and retries, and say which record Lambda must
//! redeliver from if anything could not be written.

use crate::audit;
use crate::expressions::{Guard, snapshot_write, watermark_attr};
use crate::metrics::MetricEvent;
use crate::plan::{BatchPlan, SnapshotUpdate, Transition, plan_batch};
use crate::store::{StoreError, Table};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zae_table::{SequenceNumber, Window};

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

#[derive(Debug, Clone)]
pub struct Settings {
    pub windows: Vec<Window>,
    pub snapshot_ttl_days: i64,
    pub concurrency: usize,
    pub retry: RetryPolicy,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchStats {
    pub records: usize,
    pub bucket_records: usize,
    pub ignored: usize,
    pub skipped: usize,
    pub snapshot_writes: usize,
    pub snapshots_already_applied: usize,
    pub audit_events_written: usize,
    pub audit_events_existing: usize,
    pub failed_writes: usize,
}

#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// The earliest record whose effects are not all written: Lambda's
    /// batch-item failure. Everything before it is done.
    pub first_failure: Option<SequenceNumber>,
    pub metrics: Vec<MetricEvent>,
    pub stats: BatchStats,
    pub errors: Vec<String>,
}

pub struct Aggregator<T> {
    table: T,
    settings: Settings,
    retention_days: Mutex<HashMap<String, i64>>,
}

enum Job<'p> {
    Snapshot(&'p SnapshotUpdate),
    Audit(&'p Transition),
}

enum Done {
    SnapshotWritten,
    SnapshotAlreadyApplied,
    AuditWritten(MetricEvent),
    AuditExisting,
}

/// At most this many read-and-rewrite rounds when a snapshot's watermark
/// keeps changing under the writer.
const CONFLICT_ROUNDS: usize = 5;

impl<T: Table> Aggregator<T> {
    pub fn new(table: T, settings: Settings) -> Self {
        Aggregator {
            table,
            settings,
            retention_days: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn table(&self) -> &T {
        &self.table
    }

    /// Processes one batch. `now_s` stamps the snapshot TTL; `deadline` is when
    /// retrying must stop so that the caller is answered in time.
    pub async fn process<S: AsRef<str>>(
        &self,
        records: &[S],
        principal: &str,
        now_s: i64,
        deadline: Option<Instant>,
    ) -> BatchOutcome {
        let plan = plan_batch(records, &self.settings.windows);
        let mut outcome = BatchOutcome {
            stats: BatchStats {
                records: records.len(),
                bucket_records: plan.bucket_records,
                ignored: plan.ignored,
                skipped: plan.skipped.len(),
                ..Default::default()
            },
            ..Default::default()
        };
        log_skipped(&plan);
        let ttl = now_s + self.settings.snapshot_ttl_days * 86_400;

        let jobs = plan
            .snapshots
            .iter()
            .map(Job::Snapshot)
            .chain(plan.transitions.iter().map(Job::Audit));
        let mut done = futures::stream::iter(jobs)
            .map(|job| async move {
                let earliest = match job {
                    Job::Snapshot(u) => u.earliest().clone(),
                    Job::Audit(t) => t.sequence.clone(),
                };
                let result = match job {
                    Job::Snapshot(u) => self.write_snapshot(u, ttl, deadline).await,
                    Job::Audit(t) => self.write_audit(t, principal, deadline).await,
                };
                (earliest, result)
            })
            .buffer_unordered(self.settings.concurrency.max(1));

        let mut audit_metrics = Vec::new();
        while let Some((earliest, result)) = done.next().await {
            match result {
                Ok(Done::SnapshotWritten) => outcome.stats.snapshot_writes += 1,
                Ok(Done::SnapshotAlreadyApplied) => outcome.stats.snapshots_already_applied += 1,
                Ok(Done::AuditWritten(metric)) => {
                    outcome.stats.audit_events_written += 1;
                    audit_metrics.push(metric);
                }
                Ok(Done::AuditExisting) => outcome.stats.audit_events_existing += 1,
                Err(e) => {
                    tracing::error!(error = %e, first_record = %earliest, "write failed; the batch will be redelivered from this record");
                    outcome.stats.failed_writes += 1;
                    outcome.errors.push(e.to_string());
                    if outcome.first_failure.as_ref().is_none_or(|f| earliest < *f) {
                        outcome.first_failure = Some(earliest);
                    }
                }
            }
        }
        // Stream order, whatever order the writes finished in.
        audit_metrics.sort_by_key(|m| m.at_ms());
        outcome.metrics = audit_metrics;
        if !plan.skipped.is_empty() {
            let at_ms = now_s.saturating_mul(1000);
            outcome.metrics.push(MetricEvent::RecordsSkipped {
                at_ms,
                count: plan.skipped.len() as u64,
            });
        }
        outcome
    }

    async fn write_snapshot(
        &self,
        update: &SnapshotUpdate,
        ttl: i64,
        deadline: Option<Instant>,
    ) -> Result<Done, StoreError> {
        let mut guard = Guard::Fresh;
        for _ in 0..CONFLICT_ROUNDS {
            let totals = match &guard {
                Guard::Fresh => update.totals_after(&BTreeMap::new()),
                Guard::Exactly(marks) => update.totals_after(marks),
            };
            let Some(totals) = totals else {
                return Ok(Done::SnapshotAlreadyApplied);
            };
            let write = snapshot_write(update, &totals, &guard, ttl);
            match self
                .retrying(deadline, || self.table.update_snapshot(&write))
                .await
            {
                Ok(()) => return Ok(Done::SnapshotWritten),
                Err(StoreError::ConditionFailed { .. }) => {
                    guard = Guard::Exactly(self.read_watermarks(update, deadline).await?);
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Fatal {
            operation: "UpdateItem",
            key: format!("{} {}", update.key.pk(), update.key.sk()),
            message: format!(
                "watermarks changed under {CONFLICT_ROUNDS} rounds of read and rewrite"
            ),
        })
    }

    async fn read_watermarks(
        &self,
        update: &SnapshotUpdate,
        deadline: Option<Instant>,
    ) -> Result<BTreeMap<u32, Option<SequenceNumber>>, StoreError> {
        let (pk, sk) = (update.key.pk(), update.key.sk());
        let attrs: Vec<String> = update.sources.keys().map(|s| watermark_attr(*s)).collect();
        let read = self
            .retrying(deadline, || self.table.read_strings(&pk, &sk, &attrs))
            .await?;
        update
            .sources
            .keys()
            .map(|shard| {
                let attr = watermark_attr(*shard);
                match read.get(&attr) {
                    None => Ok((*shard, None)),
                    Some(text) => SequenceNumber::from_padded(text)
                        .map(|m| (*shard, Some(m)))
                        .ok_or_else(|| StoreError::Fatal {
                            operation: "GetItem",
                            key: format!("{pk} {sk}"),
                            message: format!(
                                "watermark `{attr}` holds `{text}`, not a padded sequence number"
                            ),
                        }),
                }
            })
            .collect()
    }

    async fn write_audit(
        &self,
        transition: &Transition,
        principal: &str,
        deadline: Option<Instant>,
    ) -> Result<Done, StoreError> {
        let namespace = &transition.bucket.namespace;
        let cached = self
            .retention_days
            .lock()
            .ok()
            .and_then(|c| c.get(namespace).copied());
        let retention = match cached {
            Some(days) => days,
            None => {
                let days = self
                    .retrying(deadline, || self.table.audit_retention_days(namespace))
                    .await?
                    .unwrap_or(audit::DEFAULT_RETENTION_DAYS);
                if let Ok(mut cache) = self.retention_days.lock() {
                    cache.insert(namespace.clone(), days);
                }
                days
            }
        };
        let put = audit::audit_put(transition, principal, retention);
        if !self
            .retrying(deadline, || self.table.put_audit_event(&put))
            .await?
        {
            return Ok(Done::AuditExisting);
        }
        let event_id = audit::event_id(transition);
        tracing::info!(
            action = transition.kind.action(),
            entity = %transition.bucket.entity,
            resource = %transition.bucket.resource,
            limit = %transition.limit,
            shard = transition.bucket.shard,
            balance = transition.balance,
            event_id = %event_id,
            "soft limit transition"
        );
        Ok(Done::AuditWritten(MetricEvent::Transition {
            kind: transition.kind,
            at_ms: transition.at_ms,
            namespace_id: namespace.clone(),
            entity: transition.bucket.entity.clone(),
            resource: transition.bucket.resource.clone(),
            limit: transition.limit.clone(),
            shard: transition.bucket.shard,
            balance: transition.balance,
            event_id,
        }))
    }

    async fn retrying<R, F, Fut>(
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

fn log_skipped(plan: &BatchPlan) {
    for skip in &plan.skipped {
        tracing::warn!(
            record_index = skip.index,
            sequence_number = skip.sequence.as_ref().map(|s| s.as_stream().to_owned()),
            pk = skip.partition_key.as_deref(),
            reason = %skip.reason,
            "skipping malformed record"
        );
    }
}

#[cfg(test)]
mod tests;
