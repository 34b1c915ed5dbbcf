//! The batch writer: one batch, end to end. Plan it, write its snapshot
//! updates ([`snapshot`]) and overdraw audit events ([`overdraw`]) with
//! bounded concurrency and retries ([`retry`]), and say which record Lambda
//! must redeliver from if anything could not be written.

pub mod archive;
mod bounded;
pub mod overdraw;
mod refill;
pub mod retry;
pub mod shard;
pub mod snapshot;
pub mod utilization;

pub use retry::RetryPolicy;

use crate::metrics::{self, MetricEvent};
use crate::plan::{ArchiveSkip, BatchPlan, SnapshotUpdate, Transition, plan_batch};
use futures::StreamExt;
use std::sync::Mutex;
use std::time::Instant;
use zae_table::store::{Store, StoreError};
use zae_table::{SequenceNumber, Window};

#[derive(Debug, Clone)]
pub struct Settings {
    pub windows: Vec<Window>,
    pub snapshot_ttl_days: i64,
    pub concurrency: usize,
    pub retry: RetryPolicy,
    /// Run the refill pass after each batch's snapshots.
    pub refill: bool,
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
    /// Snapshot items DynamoDB rejected (skipped, not retried).
    pub snapshots_rejected: usize,
    /// Limit counters left out: the limit's name is a snapshot attribute.
    pub counters_left_out: usize,
    /// Refill pass: writes that landed, lost their race, were dropped after
    /// their retries, and buckets skipped (unreadable image or schedule).
    pub refills_written: usize,
    pub refills_lost: usize,
    pub refills_dropped: usize,
    pub refills_skipped: usize,
    /// Shard 0 doublings for a low `wcu`; shards raised to a new count and
    /// shards pre-created by propagation; propagations that stopped on an error.
    pub doublings: usize,
    pub shards_raised: usize,
    pub shards_cloned: usize,
    pub propagations_failed: usize,
    /// Removed audit events written to the archive, and the objects holding them.
    pub events_archived: usize,
    pub archive_objects: usize,
    /// Audit removals left out of the archive: not the table's own audit
    /// key, an unregistered namespace, or an object S3 refuses for good.
    pub archive_skipped: usize,
    /// Adaptive sensor: usage items written, canaries sensed, and cascade
    /// stamps that could not be read (their buckets counted).
    pub usage_writes: usize,
    /// Demand-aware share: entities listed in a minute's demand, and those
    /// the cap (1,000 per resource and minute) left out.
    pub demand_listed: usize,
    pub demand_overflow: usize,
    pub canaries_sensed: usize,
    pub cascade_lookups_failed: usize,
    /// Adaptive stamps the aggregator repaired on buckets it saw (or put
    /// back to base, the controller stopped), and repairs that failed.
    pub stamps_repaired: usize,
    pub repairs_failed: usize,
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

/// Epoch milliseconds now; a seam so tests can fix the refill pass's clock.
pub type Clock = fn() -> i64;

/// Milliseconds added to the system clock (`ZAE_CLOCK_SKEW_MS`): for the
/// clock-skew measurements only, so that a poller's clock can run ahead of
/// or behind its clients' on one machine.
static CLOCK_SKEW_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

pub fn set_clock_skew(ms: i64) {
    CLOCK_SKEW_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

fn system_clock() -> i64 {
    let skew = CLOCK_SKEW_MS.load(std::sync::atomic::Ordering::Relaxed);
    chrono::Utc::now().timestamp_millis().saturating_add(skew)
}

pub struct Aggregator<S> {
    store: S,
    settings: Settings,
    /// Audit retention per namespace: bounded, a client may write under any prefix.
    retention_days: Mutex<bounded::Bounded<String, i64, { utilization::repair::NAMESPACES_KEPT }>>,
    clock: Clock,
    archive: Option<std::sync::Arc<dyn archive::Archive>>,
    declarations: utilization::DeclarationCache,
    repair: utilization::RepairCache,
    overflowed: utilization::OverflowCache,
}

enum Job<'p> {
    Snapshot(&'p SnapshotUpdate),
    Audit(&'p Transition),
    Archive(&'p archive::Object),
}

enum Done {
    SnapshotWritten,
    SnapshotAlreadyApplied,
    /// DynamoDB refuses this item's write, and always will: skipped.
    SnapshotRejected,
    AuditWritten(MetricEvent),
    /// Written by an earlier delivery; its metric is published again all the
    /// same, since that delivery may have died before publishing it.
    AuditExisting(MetricEvent),
    /// An archive object holding this many removed audit events.
    Archived(usize),
    /// An archive object S3 refuses for good (its key).
    ArchiveRejected(ArchiveSkip),
}

impl<S: Store> Aggregator<S> {
    pub fn new(store: S, settings: Settings) -> Self {
        Aggregator {
            store,
            settings,
            retention_days: Mutex::new(Default::default()),
            clock: system_clock,
            archive: None,
            declarations: Default::default(),
            repair: Default::default(),
            overflowed: Default::default(),
        }
    }

    /// The same aggregator archiving removed audit items to `archive`.
    pub fn with_archive(mut self, archive: std::sync::Arc<dyn archive::Archive>) -> Self {
        self.archive = Some(archive);
        self
    }

    /// The same aggregator reading `clock` for the refill pass.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The table it writes to.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Processes one batch. `now_s` stamps the snapshot TTL; `deadline` is when
    /// retrying must stop so that the caller is answered in time.
    pub async fn process<R: AsRef<str>>(
        &self,
        records: &[R],
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

        for skip in &plan.archive_skipped {
            outcome.skip_archive(skip.clone());
        }
        let objects = match self.archive {
            Some(_) => archive::objects(&self.registered(&plan.removed_audit, &mut outcome).await),
            None => Vec::new(),
        };
        let jobs = plan
            .snapshots
            .iter()
            .map(Job::Snapshot)
            .chain(plan.transitions.iter().map(Job::Audit))
            .chain(objects.iter().map(Job::Archive));
        let mut done = futures::stream::iter(jobs)
            .map(|job| async move {
                let earliest = match job {
                    Job::Snapshot(u) => u.earliest().clone(),
                    Job::Audit(t) => t.sequence.clone(),
                    Job::Archive(o) => o.earliest.clone(),
                };
                let result = match job {
                    Job::Snapshot(u) => self.write_snapshot(u, ttl, deadline).await,
                    Job::Audit(t) => self.write_audit(t, principal, now_s, deadline).await,
                    Job::Archive(o) => match self.write_object(o, deadline).await {
                        Ok(()) => Ok(Done::Archived(o.events)),
                        // S3 will never take this object (its key): skipped,
                        // never a stalled shard.
                        Err(StoreError::Rejected { message, .. }) => {
                            Ok(Done::ArchiveRejected(ArchiveSkip {
                                sequence: o.earliest.clone(),
                                key: o.key.clone(),
                                reason: message,
                                events: o.events,
                            }))
                        }
                        Err(e) => Err(e),
                    },
                };
                (earliest, result)
            })
            .buffer_unordered(self.settings.concurrency.max(1));

        let mut audit_metrics = Vec::new();
        while let Some((earliest, result)) = done.next().await {
            match result {
                Ok(Done::SnapshotWritten) => outcome.stats.snapshot_writes += 1,
                Ok(Done::Archived(events)) => {
                    outcome.stats.archive_objects += 1;
                    outcome.stats.events_archived += events;
                }
                Ok(Done::ArchiveRejected(skip)) => outcome.skip_archive(skip),
                Ok(Done::SnapshotAlreadyApplied) => outcome.stats.snapshots_already_applied += 1,
                Ok(Done::SnapshotRejected) => outcome.stats.snapshots_rejected += 1,
                Ok(Done::AuditWritten(metric)) => {
                    outcome.stats.audit_events_written += 1;
                    audit_metrics.push(metric);
                }
                Ok(Done::AuditExisting(metric)) => {
                    outcome.stats.audit_events_existing += 1;
                    audit_metrics.push(metric);
                }
                Err(e) => outcome.fail(&e, earliest),
            }
        }
        drop(done);
        Box::pin(self.sense(&plan, deadline, &mut outcome)).await;
        let (repaired, failed) =
            Box::pin(self.repair(records, &plan, (self.clock)(), deadline)).await;
        outcome.stats.stamps_repaired = repaired;
        outcome.stats.repairs_failed = failed;
        // Stream order, whatever order the writes finished in.
        audit_metrics.sort_by_key(|m| match m {
            MetricEvent::Transition { transition_ms, .. } => *transition_ms,
            other => other.at_ms(),
        });
        outcome.metrics = audit_metrics;
        if self.settings.refill {
            // Boxed: the pass's future is deep, and the poller's main
            // future would otherwise hold it inline.
            Box::pin(self.refill_pass(records, &plan, deadline, &mut outcome)).await;
        }
        let at_ms = now_s.saturating_mul(1000);
        if !records.is_empty() {
            outcome.metrics.push(MetricEvent::Count {
                name: metrics::RECORDS_PROCESSED,
                at_ms,
                count: records.len() as u64,
            });
        }
        if !plan.skipped.is_empty() {
            outcome.metrics.push(MetricEvent::Count {
                name: metrics::RECORDS_SKIPPED,
                at_ms,
                count: plan.skipped.len() as u64,
            });
        }
        for (name, count) in [
            (metrics::ARCHIVE_SKIPPED, outcome.stats.archive_skipped),
            (metrics::DEMAND_OVERFLOW, outcome.stats.demand_overflow),
        ] {
            if count > 0 {
                outcome.metrics.push(MetricEvent::Count {
                    at_ms,
                    name,
                    count: count as u64,
                });
            }
        }
        outcome.stats.counters_left_out = plan.counters_left_out.len();
        let usage_skipped = outcome.stats.snapshots_rejected + outcome.stats.counters_left_out;
        if usage_skipped > 0 {
            outcome.metrics.push(MetricEvent::Count {
                name: metrics::USAGE_SKIPPED,
                at_ms,
                count: usage_skipped as u64,
            });
        }
        outcome
    }
}

impl BatchOutcome {
    /// An audit removal left out of the archive: logged with its key, counted.
    fn skip_archive(&mut self, skip: ArchiveSkip) {
        tracing::warn!(
            sequence_number = skip.sequence.as_stream(),
            pk = %skip.key,
            reason = %skip.reason,
            events = skip.events,
            "audit removal left out of the archive"
        );
        self.stats.archive_skipped += skip.events;
    }

    /// A write that failed: the batch is redelivered from `earliest`.
    fn fail(&mut self, error: &dyn std::fmt::Display, earliest: SequenceNumber) {
        tracing::error!(error = %error, first_record = %earliest, "write failed; the batch will be redelivered from this record");
        self.stats.failed_writes += 1;
        self.errors.push(error.to_string());
        if self.first_failure.as_ref().is_none_or(|f| earliest < *f) {
            self.first_failure = Some(earliest);
        }
    }
}

impl<S: Store> Aggregator<S> {
    /// After the snapshots, so that a refill never delays them: the refill
    /// pass and doublings per bucket, then shard-count propagation per
    /// raise. `now` is read once, when the pass starts.
    async fn refill_pass<R: AsRef<str>>(
        &self,
        records: &[R],
        plan: &BatchPlan,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        let now_ms = (self.clock)();
        let mut done = futures::stream::iter(&plan.buckets)
            .map(|bucket| self.refill(records, bucket, now_ms, deadline))
            .buffer_unordered(self.settings.concurrency.max(1));
        while let Some((result, doubled)) = done.next().await {
            let stats = &mut outcome.stats;
            stats.doublings += usize::from(doubled);
            match result {
                refill::Refill::NotNeeded => {}
                refill::Refill::Written => stats.refills_written += 1,
                refill::Refill::LostRace => stats.refills_lost += 1,
                refill::Refill::Skipped => stats.refills_skipped += 1,
                refill::Refill::Dropped(e) => {
                    stats.refills_dropped += 1;
                    outcome.errors.push(format!("refill dropped: {e}"));
                }
            }
        }
        drop(done);
        // In record order: a later raise finds the earlier one's shards.
        for raise in &plan.raises {
            let done = self.propagate(raise, now_ms, deadline).await;
            let stats = &mut outcome.stats;
            stats.shards_raised += done.raised;
            stats.shards_cloned += done.cloned;
            stats.propagations_failed += usize::from(done.failed);
            if done.retry {
                let what = format!(
                    "shard-count propagation of {} to {}",
                    raise.key.pk(),
                    raise.to
                );
                outcome.fail(
                    &format!("{what} stopped on a transient error"),
                    raise.sequence.clone(),
                );
            }
        }
        for (name, count) in [
            (metrics::REFILLS_DROPPED, outcome.stats.refills_dropped),
            (
                metrics::PROPAGATIONS_FAILED,
                outcome.stats.propagations_failed,
            ),
        ] {
            if count > 0 {
                outcome.metrics.push(MetricEvent::Count {
                    name,
                    at_ms: now_ms,
                    count: count as u64,
                });
            }
        }
    }
}

fn log_skipped(plan: &BatchPlan) {
    for (pk, limit) in &plan.counters_left_out {
        tracing::warn!(
            pk = %pk,
            limit = %limit,
            "the limit's name is a snapshot attribute: its counter is left out of the usage snapshots"
        );
    }
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
