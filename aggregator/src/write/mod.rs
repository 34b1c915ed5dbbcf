//! The batch writer: one batch, end to end. Plan it, write its snapshot
//! updates ([`snapshot`]) and overdraw audit events ([`overdraw`]) with
//! bounded concurrency and retries ([`retry`]), and say which record Lambda
//! must redeliver from if anything could not be written.

pub mod archive;
mod cache;
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
use zae_table::shown;
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

/// The one fixture the unit and the end-to-end tests build settings from
/// (feature `test-fixtures`, which the crate's dev-dependency on itself
/// turns on for its integration tests; never in the Lambda).
#[cfg(any(test, feature = "test-fixtures"))]
impl Settings {
    /// `windows`, 90 days of snapshots, four writes at a time, `max_attempts`
    /// tries per write with millisecond backoff (a failing table costs the
    /// tests no time), and the refill pass on or off.
    pub fn for_tests(windows: &[Window], max_attempts: u32, refill: bool) -> Settings {
        Settings {
            windows: windows.to_vec(),
            snapshot_ttl_days: 90,
            concurrency: 4,
            retry: RetryPolicy {
                max_attempts,
                base: std::time::Duration::from_millis(1),
                cap: std::time::Duration::from_millis(2),
            },
            refill,
        }
    }
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
    /// Cascade parents whose id passes the client's cap (256 bytes): no
    /// parent, never read (its key may pass DynamoDB's); once per batch,
    /// counted in `records_skipped` as a bucket past the caps is.
    pub parents_beyond_caps: usize,
    /// Adaptive stamps the aggregator repaired on buckets it saw (or put
    /// back to base, the controller stopped), and repairs that failed.
    pub stamps_repaired: usize,
    pub repairs_failed: usize,
    /// Writes DynamoDB refused as invalid (a `ValidationException`), or
    /// whose keys `zae_table::keys` refused before the write: skipped and
    /// counted in `records_skipped`, never redelivered.
    pub writes_refused: usize,
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
    retention_days: Mutex<cache::Bounded<String, i64, { utilization::repair::NAMESPACES_KEPT }>>,
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
    /// A write DynamoDB refuses for good, or keys it would refuse.
    Refused(Refusal),
}

/// A write skipped because DynamoDB refuses it as invalid, every time.
pub(crate) struct Refusal {
    pub what: &'static str,
    /// The record it came from.
    pub sequence: SequenceNumber,
    pub key: String,
    pub reason: String,
    /// For a sensor write: the resource-minute whose use it loses.
    pub lost: Option<Lost>,
}

/// What a refused sensor write loses: a usage item, the batch's use of a
/// resource in a minute for every entity; a listing, one entity's demand.
pub(crate) struct Lost {
    pub resource: String,
    pub minute_ms: i64,
    pub entity: Option<String>,
}

impl Lost {
    fn minute(&self) -> String {
        chrono::DateTime::from_timestamp_millis(self.minute_ms).map_or_else(
            || self.minute_ms.to_string(),
            |at| at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
    }
}

impl Refusal {
    /// The refusal `error` is, when DynamoDB refused the write as invalid.
    pub(crate) fn of(
        what: &'static str,
        sequence: &SequenceNumber,
        error: &StoreError,
    ) -> Option<Refusal> {
        let StoreError::Rejected { key, message, .. } = error else {
            return None;
        };
        Some(Refusal {
            what,
            sequence: sequence.clone(),
            key: key.clone(),
            reason: message.clone(),
            lost: None,
        })
    }

    /// The same refusal, saying what it loses.
    pub(crate) fn losing(self, lost: Lost) -> Refusal {
        Refusal {
            lost: Some(lost),
            ..self
        }
    }
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

    /// Processes one batch, phase by phase. `now_s` stamps the snapshot
    /// TTL; `deadline` is when work must stop so that the caller is answered
    /// in time. Each phase checks it before it starts, and no write runs
    /// past it: work it stopped is a batch-item failure from its earliest
    /// record, or for the refills and the stamp repair (which lose nothing:
    /// the client refills, the next record repairs), counted and left.
    pub async fn process<R: AsRef<str>>(
        &self,
        records: &[R],
        principal: &str,
        now_s: i64,
        deadline: Option<Instant>,
    ) -> BatchOutcome {
        let plan = plan_batch(records, &self.settings.windows);
        let mut outcome = BatchOutcome::planned(records.len(), &plan);
        log_skipped(&plan);
        let audit_metrics =
            Box::pin(self.write_items(&plan, principal, now_s, deadline, &mut outcome)).await;
        Box::pin(self.sense_in_time(&plan, deadline, &mut outcome)).await;
        Box::pin(self.repair_in_time(records, &plan, deadline, &mut outcome)).await;
        outcome.metrics = audit_metrics;
        if self.settings.refill {
            // Boxed: the pass's future is deep, and the poller's main
            // future would otherwise hold it inline.
            Box::pin(self.refill_pass(records, &plan, deadline, &mut outcome)).await;
        }
        outcome.count(&plan, records.len(), now_s.saturating_mul(1000));
        outcome
    }

    /// The first phase: snapshot updates, overdraw audit events and archive
    /// objects, written concurrently. Returns the transitions' metrics, in
    /// stream order whatever order the writes finished in.
    async fn write_items(
        &self,
        plan: &BatchPlan,
        principal: &str,
        now_s: i64,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) -> Vec<MetricEvent> {
        for skip in &plan.archive_skipped {
            outcome.skip_archive(skip.clone());
        }
        if retry::past(deadline) {
            // Removed audit items wait only for an archive; without one they
            // are nothing to redeliver.
            let archived = self.archive.is_some().then_some(&plan.removed_audit);
            let earliest = (plan.snapshots.iter().map(|u| u.earliest().clone()))
                .chain(plan.transitions.iter().map(|t| t.sequence.clone()))
                .chain(archived.into_iter().flatten().map(|(s, _)| s.clone()))
                .min();
            outcome.not_started("snapshots, audit events and the archive", earliest);
            return Vec::new();
        }
        let ttl = now_s + self.settings.snapshot_ttl_days * 86_400;
        let objects = match self.archive {
            Some(_) => archive::objects(
                &self
                    .registered(&plan.removed_audit, deadline, outcome)
                    .await,
            ),
            None => Vec::new(),
        };
        let jobs = (plan.snapshots.iter().map(Job::Snapshot))
            .chain(plan.transitions.iter().map(Job::Audit))
            .chain(objects.iter().map(Job::Archive));
        let mut done = futures::stream::iter(jobs)
            .map(|job| async move {
                (
                    job.earliest(),
                    self.write_job(job, principal, now_s, ttl, deadline).await,
                )
            })
            .buffer_unordered(self.settings.concurrency.max(1));
        let mut audit_metrics = Vec::new();
        while let Some((earliest, result)) = done.next().await {
            match result {
                Ok(done) => outcome.done(done, &mut audit_metrics),
                Err(e) => outcome.fail(&e, earliest),
            }
        }
        audit_metrics.sort_by_key(|m| match m {
            MetricEvent::Transition { transition_ms, .. } => *transition_ms,
            other => other.at_ms(),
        });
        audit_metrics
    }

    async fn write_job(
        &self,
        job: Job<'_>,
        principal: &str,
        now_s: i64,
        ttl: i64,
        deadline: Option<Instant>,
    ) -> Result<Done, StoreError> {
        match job {
            Job::Snapshot(u) => self.write_snapshot(u, ttl, deadline).await,
            Job::Audit(t) => self.write_audit(t, principal, now_s, deadline).await,
            Job::Archive(o) => match self.write_object(o, deadline).await {
                Ok(()) => Ok(Done::Archived(o.events)),
                // S3 will never take this object (its key): skipped, never
                // a stalled shard.
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
        }
    }

    /// The adaptive sensor's phase: not started past the deadline, its
    /// records (the canaries' included) then redelivered.
    async fn sense_in_time(
        &self,
        plan: &BatchPlan,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        if retry::past(deadline) {
            let earliest = (plan.sensed.iter().map(|s| s.earliest.clone()))
                .chain(plan.canaries.iter().map(|c| c.sequence.clone()))
                .min();
            outcome.not_started("adaptive sensing", earliest);
            return;
        }
        self.sense(plan, deadline, outcome).await;
    }

    /// The stamp repair, stopped whole at the deadline: its writes are
    /// compare-and-sets, and the next record of a bucket repairs it.
    async fn repair_in_time<R: AsRef<str>>(
        &self,
        records: &[R],
        plan: &BatchPlan,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        let mut repairs = utilization::repair::Repairs::default();
        if !retry::past(deadline) {
            let repair = self.repair(records, plan, (self.clock)(), deadline, &mut repairs);
            retry::bounded(deadline, repair).await;
        }
        // What the deadline left is counted with the failures, as the
        // refills' are: the next record of each bucket repairs it.
        let left = (plan.buckets.iter().skip(repairs.done))
            .filter(|b| self.may_need_repair(&b.pk))
            .count();
        if left > 0 {
            tracing::warn!(left, "adaptive stamp repair stopped at the deadline");
        }
        outcome.stats.stamps_repaired = repairs.repaired;
        outcome.stats.repairs_failed = repairs.failed + left;
    }
}

impl Job<'_> {
    fn earliest(&self) -> SequenceNumber {
        match self {
            Job::Snapshot(u) => u.earliest().clone(),
            Job::Audit(t) => t.sequence.clone(),
            Job::Archive(o) => o.earliest.clone(),
        }
    }
}

impl BatchOutcome {
    fn planned(records: usize, plan: &BatchPlan) -> BatchOutcome {
        BatchOutcome {
            stats: BatchStats {
                records,
                bucket_records: plan.bucket_records,
                ignored: plan.ignored,
                skipped: plan.skipped.len(),
                counters_left_out: plan.counters_left_out.len(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// One write of the first phase done.
    fn done(&mut self, done: Done, audit_metrics: &mut Vec<MetricEvent>) {
        let stats = &mut self.stats;
        match done {
            Done::SnapshotWritten => stats.snapshot_writes += 1,
            Done::Archived(events) => {
                stats.archive_objects += 1;
                stats.events_archived += events;
            }
            Done::ArchiveRejected(skip) => self.skip_archive(skip),
            Done::SnapshotAlreadyApplied => stats.snapshots_already_applied += 1,
            Done::SnapshotRejected => stats.snapshots_rejected += 1,
            Done::Refused(refusal) => self.refuse(&refusal),
            Done::AuditWritten(metric) => {
                stats.audit_events_written += 1;
                audit_metrics.push(metric);
            }
            Done::AuditExisting(metric) => {
                stats.audit_events_existing += 1;
                audit_metrics.push(metric);
            }
        }
    }

    /// A phase the deadline stopped before it began: redelivered from the
    /// earliest record it had work for (if any).
    fn not_started(&mut self, phase: &str, earliest: Option<SequenceNumber>) {
        if let Some(earliest) = earliest {
            self.fail(&retry::out_of_time(phase), earliest);
        }
    }

    /// The batch's counts as metrics, stamped `at_ms`.
    fn count(&mut self, plan: &BatchPlan, records: usize, at_ms: i64) {
        let usage_skipped = self.stats.snapshots_rejected + self.stats.counters_left_out;
        for (name, count) in [
            (metrics::RECORDS_PROCESSED, records),
            (
                metrics::RECORDS_SKIPPED,
                plan.skipped.len() + self.stats.writes_refused + self.stats.parents_beyond_caps,
            ),
            (metrics::WRITES_REFUSED, self.stats.writes_refused),
            (metrics::ARCHIVE_SKIPPED, self.stats.archive_skipped),
            (metrics::DEMAND_OVERFLOW, self.stats.demand_overflow),
            (metrics::USAGE_SKIPPED, usage_skipped),
        ] {
            if count > 0 {
                self.metrics.push(MetricEvent::Count {
                    name,
                    at_ms,
                    count: count as u64,
                });
            }
        }
    }

    /// An audit removal left out of the archive: logged with its key, counted.
    fn skip_archive(&mut self, skip: ArchiveSkip) {
        tracing::warn!(
            sequence_number = skip.sequence.as_stream(),
            pk = %shown::shown(&skip.key, shown::KEY_SHOWN_BYTES),
            reason = %shown::shown(&skip.reason, shown::MESSAGE_SHOWN_BYTES),
            events = skip.events,
            "audit removal left out of the archive"
        );
        self.stats.archive_skipped += skip.events;
    }

    /// A write DynamoDB refuses for good: logged (its key and reason cut
    /// short: a key may be 2 KB) and counted; the batch goes on.
    pub(crate) fn refuse(&mut self, refusal: &Refusal) {
        let shown = |text: &str| shown::shown(text, shown::KEY_SHOWN_BYTES).into_owned();
        let lost = refusal.lost.as_ref();
        tracing::warn!(
            sequence_number = refusal.sequence.as_stream(),
            pk = %shown(&refusal.key),
            reason = %shown::shown(&refusal.reason, shown::MESSAGE_SHOWN_BYTES),
            resource = lost.map(|l| shown(&l.resource)),
            minute = lost.map(Lost::minute),
            entity = lost.and_then(|l| l.entity.as_deref().map(shown)),
            "{} refused as invalid: skipped, not redelivered{}",
            refusal.what,
            match lost {
                Some(Lost { entity: None, .. }) => {
                    "; the batch's use of the resource in that minute is lost for every entity"
                }
                Some(_) => "; the entity's demand in that minute is not listed",
                None => "",
            }
        );
        self.stats.writes_refused += 1;
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
        if retry::past(deadline) {
            // The client refills on its own slow path: nothing is lost.
            outcome.stats.refills_skipped += plan.buckets.len();
            tracing::warn!(
                buckets = plan.buckets.len(),
                "refill pass not started: the deadline came"
            );
        } else {
            self.refills(records, plan, now_ms, deadline, outcome).await;
        }
        self.propagations(plan, now_ms, deadline, outcome).await;
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

    async fn refills<R: AsRef<str>>(
        &self,
        records: &[R],
        plan: &BatchPlan,
        now_ms: i64,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
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
    }

    /// In record order: a later raise finds the earlier one's shards. A
    /// raise the deadline stops, and every one after it, is redelivered.
    async fn propagations(
        &self,
        plan: &BatchPlan,
        now_ms: i64,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        for raise in &plan.raises {
            let what = format!(
                "shard-count propagation of {} to {}",
                raise.key.pk(),
                raise.to
            );
            if retry::past(deadline) {
                outcome.not_started(&what, Some(raise.sequence.clone()));
                return;
            }
            let done = self.propagate(raise, now_ms, deadline).await;
            let stats = &mut outcome.stats;
            stats.shards_raised += done.raised;
            stats.shards_cloned += done.cloned;
            stats.propagations_failed += usize::from(done.failed);
            if done.retry {
                outcome.fail(
                    &format!("{what} stopped on a transient error"),
                    raise.sequence.clone(),
                );
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
            pk = skip
                .partition_key
                .as_deref()
                .map(|pk| shown::shown(pk, shown::KEY_SHOWN_BYTES).into_owned()),
            reason = %shown::shown(&skip.reason.to_string(), shown::MESSAGE_SHOWN_BYTES),
            "skipping malformed record"
        );
    }
}

#[cfg(test)]
mod tests;
