//! Plan and apply: one pipeline for CloudFormation, the direct invoke and
//! the `zae-limits` CLI, in named phases.
//!
//! 1. [`Provisioner::plan`] ([`plan`]): the levels that would change.
//! 2. [`gate::check`]: refuse features the table's Lambdas cannot read.
//!    Then `record_intent` ([`state`]): the record names every level the
//!    apply may write and claims the namespace, in one conditional write.
//! 3. [`Provisioner::claim`] ([`pending`]): take over unfinished fan-outs and
//!    record every fan-out this apply will owe, before the first write.
//! 4. [`Provisioner::write_config`] ([`config`]): config items, registries,
//!    audit events ([`audit`]).
//! 5. [`Provisioner::fan_out`] ([`fanout`]): carry each change to the buckets
//!    that already exist, from live config.
//! 6. [`Provisioner::release`]: drop the pending items of finished fan-outs.
//! 7. [`Provisioner::record_state`] ([`state`]): the `#PROVISIONER` record.

pub mod adaptive;
pub mod audit;
pub mod change;
pub mod config;
pub mod fanout;
pub mod gate;
pub mod pending;
pub mod plan;
pub mod state;

pub use plan::{Action, Change, ChangeLine, Plan, Report};

use crate::manifest::{Level, LevelDecl, Manifest};
use config::{Written, every_kind, predicted};
use fanout::{Directive, FanOuts};
use gate::GateError;
use pending::Holder;
use std::collections::{BTreeMap, BTreeSet, HashSet};
// Tokio's clock: a test can pause it and let a slow page take virtual time.
use tokio::time::Instant;
use zae_table::BucketKey;
use zae_table::keys::config_key;
use zae_table::provisioner::{Cursor, FanOut, Kind};
use zae_table::store::{Store, StoreError};
use zae_table::value::same_item;

/// From this many owed fan-outs on, buckets are found by one namespace-wide
/// sweep instead of two queries per fan-out.
const SWEEP_THRESHOLD: usize = 64;
/// Rounds of "fan out, re-read config" before a moving level is left pending.
const FAN_OUT_ROUNDS: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("{context}: {source}")]
    Store {
        context: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "out of time after {done} of {total} config writes; nothing further was written. \
         The fan-outs owed so far are recorded as pending and the next apply finishes them"
    )]
    OutOfTime { done: usize, total: usize },
    #[error(
        "namespace {namespace} is managed by another custom resource (it claimed the namespace \
         while this request ran); nothing was written"
    )]
    Owned { namespace: String },
    #[error(
        "namespace {namespace} was claimed by another custom resource after this request's \
         writes; they landed, and the #PROVISIONER record was left as that resource wrote it"
    )]
    OwnedAfter { namespace: String },
    #[error(
        "the owner of namespace {namespace} changed while this apply ran (a stack claimed or \
         released it); nothing was written. Run the apply again"
    )]
    OwnerMoved { namespace: String },
    #[error(
        "the owner of namespace {namespace} changed after this apply's writes (a stack claimed \
         or released it); they landed, and the #PROVISIONER record was left as the stack wrote \
         it. Run the apply again to record them"
    )]
    OwnerMovedAfter { namespace: String },
    #[error(
        "the #PROVISIONER record of namespace {namespace} was rewritten by another apply while \
         this one ran (it recorded its managed levels); nothing was written. Run the apply again"
    )]
    RecordMoved { namespace: String },
    #[error(
        "the #PROVISIONER record of namespace {namespace} was rewritten by another apply after \
         this one's writes; they landed, and the record was left as the other apply wrote it. \
         Run the apply again to record them"
    )]
    RecordMovedAfter { namespace: String },
    #[error(
        "namespace {namespace} is being purged (the registry's entry for its id says so); \
         the #PROVISIONER record was not written"
    )]
    Purging { namespace: String },
}

fn store_err(context: impl Into<String>) -> impl FnOnce(StoreError) -> ApplyError {
    let context = context.into();
    move |source| ApplyError::Store { context, source }
}

/// The target of an apply's phase events, which `zae-limits` shows as
/// progress (and the Lambda logs at INFO).
pub const PROGRESS: &str = "zae_limits::progress";

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The custom resource that owns a namespace, `<StackId>|<LogicalResourceId>`,
/// as an apply leaves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// A CLI or direct-invoke apply: whoever owned it still does.
    Keep,
    /// A custom resource's Create or Update: it owns the namespace now.
    Claim(String),
    /// The owning custom resource's Delete (`<StackId>|<LogicalResourceId>`):
    /// nobody owns it any more. Written only where this resource or nobody
    /// owns the record, never over another resource's claim.
    Release(String),
}

/// Who asks, and for how long they can wait.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The audit events' principal: a stack id, an invoker, a CLI user.
    pub principal: String,
    /// What the apply does to the namespace's owning custom resource.
    pub ownership: Ownership,
    /// Stop starting new work at this instant (the deadline guard).
    pub stop_at: Option<Instant>,
    /// How long pending items stay leased to this apply.
    pub lease_ms: i64,
}

impl Caller {
    pub fn local(principal: &str) -> Caller {
        Caller {
            principal: principal.to_owned(),
            ownership: Ownership::Keep,
            stop_at: None,
            lease_ms: 900_000 + 60_000,
        }
    }

    fn out_of_time(&self) -> bool {
        passed(self.stop_at)
    }
}

/// Whether a stop instant, if there is one, has come.
pub fn passed(stop_at: Option<Instant>) -> bool {
    stop_at.is_some_and(|stop| Instant::now() >= stop)
}

/// One namespace of one table.
pub struct Provisioner<'a, S> {
    pub store: &'a S,
    pub namespace: &'a str,
}

/// One apply's hold on pending items: what it holds and what it owes.
pub struct Run<'a, S> {
    holder: Holder<'a, S>,
    /// Pending items this apply has a share of.
    held: BTreeSet<FanOut>,
    /// Fan-outs this apply must run.
    owed: BTreeSet<FanOut>,
    /// Where claimed fan-outs that an earlier apply stopped go on from.
    cursors: BTreeMap<FanOut, Cursor>,
}

/// How a fan-out ended.
enum Settled {
    Finished,
    /// Config kept changing across it: left pending.
    Moving,
    /// Out of time: its place is recorded for the next run.
    Stopped(Cursor),
}

impl<S: Store> Run<'_, S> {
    /// Writes a pending share for every owed fan-out not held yet.
    async fn record_ahead(&mut self) -> Result<(), ApplyError> {
        let missing: Vec<FanOut> = self.owed.difference(&self.held).cloned().collect();
        for fan_out in missing {
            self.holder
                .write_ahead(&fan_out)
                .await
                .map_err(store_err(format!("recording pending {}", fan_out.sk())))?;
            self.held.insert(fan_out);
        }
        Ok(())
    }

    /// Ends the leases of everything held, for the next apply to take over.
    async fn expire_all(&self) {
        for fan_out in &self.held {
            if let Err(err) = self.holder.expire(fan_out, now_ms()).await {
                tracing::warn!(pending = %fan_out.sk(), error = %err, "expiring a pending share failed");
            }
        }
    }
}

impl<'a, S: Store> Provisioner<'a, S> {
    /// Plans and applies a manifest, and reports what it did. Errors before
    /// the first config write leave the table as it was; errors after it
    /// are listed in the report instead, and their fan-outs stay pending.
    pub async fn apply(
        &self,
        manifest: &Manifest,
        full: bool,
        caller: &Caller,
    ) -> Result<Report, ApplyError> {
        let plan = self.plan(manifest, full).await?;
        self.apply_plan(manifest, plan, caller).await
    }

    /// Applies a plan of `manifest`, phase by phase.
    pub async fn apply_plan(
        &self,
        manifest: &Manifest,
        plan: Plan,
        caller: &Caller,
    ) -> Result<Report, ApplyError> {
        let declared = manifest.declared();
        let decls: Vec<&LevelDecl> = declared.iter().map(|(_, d)| *d).collect();
        gate::check(self.store, &decls).await?;
        let intent = self.record_intent(manifest, &plan, caller).await?;
        let mut run = self.claim(&plan, caller).await?;
        tracing::info!(target: PROGRESS, phase = "config", "writing {} level(s)", plan.changes.len());
        let mut written = self
            .write_config(&plan, &declared, caller, &mut run)
            .await?;
        // What only the writes' old images showed.
        run.record_ahead().await?;
        let mut errors = std::mem::take(&mut written.errors);
        if let Some(change) = &plan.adaptive {
            match self.write_adaptive(change).await {
                Ok(()) => written.count(change.action),
                Err(e) => errors.push(format!("adaptive declaration: {e}")),
            }
        }
        let config_errors = errors.len();
        self.repair_disabled(&declared, &run, caller, &mut errors)
            .await;
        let (finished, stopped) = self.fan_out(&run, &written, caller, &mut errors).await;
        if !plan.changes.is_empty() || plan.adaptive.is_some() {
            self.restamp_adaptive(caller, &mut errors).await;
        }
        let pending = self.release(&run, &plan, finished).await;
        self.record_state(manifest, plan.restore.as_ref(), &intent, caller)
            .await?;
        Ok(Report {
            status: "applied",
            changes: plan.lines(),
            created: Some(written.created),
            updated: Some(written.updated),
            deleted: Some(written.deleted),
            unchanged: plan.unchanged,
            full: plan.full,
            resumed: plan.resumed,
            pending,
            errors: Some(errors),
            config_errors,
            stopped,
            namespace: self.namespace.to_owned(),
            notes: plan.notes.clone(),
        })
    }

    /// A follow-up's work: the pending fan-outs nobody is working on,
    /// claimed and run from their recorded place. No config is written.
    pub async fn continue_pending(&self, caller: &Caller) -> Result<Report, ApplyError> {
        let pending = pending::read(self.store, self.namespace)
            .await
            .map_err(store_err("reading pending fan-outs"))?;
        let plan = Plan {
            pending,
            ..Plan::default()
        };
        let run = self.claim(&plan, caller).await?;
        let mut errors = Vec::new();
        let (finished, stopped) = self
            .fan_out(&run, &Written::default(), caller, &mut errors)
            .await;
        let pending = self.release(&run, &plan, finished).await;
        Ok(Report {
            status: "continued",
            pending,
            errors: Some(errors),
            stopped,
            namespace: self.namespace.to_owned(),
            ..Report::default()
        })
    }

    /// The claim phase: takes over pending items nobody is working on, and
    /// records every fan-out the plan predicts before the first config write,
    /// so a run that dies after it leaves the work owed, not lost.
    async fn claim(&self, plan: &Plan, caller: &Caller) -> Result<Run<'a, S>, ApplyError> {
        let now = now_ms();
        let mut run = Run {
            holder: Holder {
                store: self.store,
                namespace: self.namespace.to_owned(),
                token: uuid::Uuid::new_v4().simple().to_string(),
                lease_ms: now + caller.lease_ms,
                full: plan.full,
            },
            held: BTreeSet::new(),
            owed: BTreeSet::new(),
            cursors: BTreeMap::new(),
        };
        for pending in plan.pending.iter().filter(|p| p.claimable(now)) {
            let claimed = run
                .holder
                .claim(pending, now)
                .await
                .map_err(store_err(format!(
                    "claiming pending {}",
                    pending.fan_out.sk()
                )))?;
            if claimed {
                run.held.insert(pending.fan_out.clone());
                // Its place holds only under the config it ran with (`settle`).
                if let Some(cursor) = &pending.cursor {
                    run.cursors.insert(pending.fan_out.clone(), cursor.clone());
                }
            }
        }
        run.owed = run.held.clone();
        run.owed
            .extend(plan.state.cascade_pending.iter().map(|level| FanOut {
                kind: Kind::Cascade,
                level: level.clone(),
            }));
        let change_only = !plan.full || plan.resumed;
        for change in &plan.changes {
            let kinds = if change_only {
                predicted(change)
            } else {
                every_kind(&change.level)
            };
            run.owed.extend(kinds.into_iter().map(|kind| FanOut {
                kind,
                level: change.level.clone(),
            }));
        }
        run.record_ahead().await?;
        Ok(run)
    }

    /// The repair pass: an explicit `disabled` is stamped again on every
    /// apply, for buckets created while an earlier fan-out ran.
    async fn repair_disabled(
        &self,
        declared: &[(Level, &LevelDecl)],
        run: &Run<'_, S>,
        caller: &Caller,
        errors: &mut Vec<String>,
    ) {
        let fan_outs = FanOuts {
            store: self.store,
            namespace: self.namespace,
            known: None,
            stop_at: caller.stop_at,
            resume: None,
        };
        for (level, decl) in declared {
            let Some(disabled) = decl.disabled else {
                continue;
            };
            let already = run.owed.contains(&FanOut {
                kind: Kind::Disabled,
                level: level.clone(),
            });
            if already || matches!(level, Level::System) || caller.out_of_time() {
                continue;
            }
            let directive = Directive {
                reassert: Some(disabled),
                ..Directive::default()
            };
            match fan_outs.run(Kind::Disabled, level, &directive).await {
                Err(err) => errors.push(format!(
                    "disable fan-out {} {}: {err} (retried on the next apply)",
                    level.kind(),
                    level.target().unwrap_or_default()
                )),
                // The repair runs on every apply: the next one goes on.
                Ok(tally) if tally.stopped.is_some() => tracing::warn!(
                    level = %level.describe(),
                    "the disabled repair stopped at the deadline"
                ),
                Ok(_) => {}
            }
        }
    }

    /// The fan-out phase: every owed fan-out, in kind order, from live
    /// config. Many fan-outs share one namespace-wide discovery, swept before
    /// and after them all (the second sweep catches buckets created
    /// meanwhile). Returns the fan-outs that finished, and how many stopped
    /// at the deadline with their place recorded.
    async fn fan_out(
        &self,
        run: &Run<'_, S>,
        written: &Written,
        caller: &Caller,
        errors: &mut Vec<String>,
    ) -> (Vec<(FanOut, Directive)>, usize) {
        let mut order: Vec<FanOut> = run.owed.iter().cloned().collect();
        order.sort_by_key(|f| (f.run_order(), f.level.clone()));
        let swept = if order.len() >= SWEEP_THRESHOLD {
            self.sweep_or_warn().await
        } else {
            None
        };
        let mut finished = Vec::new();
        let mut stopped = 0;
        let total = order.len() as u64;
        if total > 0 {
            tracing::info!(target: PROGRESS, phase = "fan-out", "{total} level(s) to their buckets");
        }
        for (done, fan_out) in (1u64..).zip(order) {
            if done > 1 {
                tracing::info!(target: PROGRESS, phase = "fan-out", done = done - 1, total);
            }
            let carried = run.cursors.get(&fan_out);
            let directive = directive(written, &fan_out, carried);
            if caller.out_of_time() {
                // Not started: the next run starts it, with what this one knew.
                stopped += 1;
                let cursor = directive.carry(Cursor::start(), None);
                self.keep_place(run, &fan_out, &cursor).await;
                continue;
            }
            let fan_outs = FanOuts {
                store: self.store,
                namespace: self.namespace,
                known: swept.as_deref(),
                stop_at: caller.stop_at,
                resume: carried.cloned(),
            };
            match self.settle(fan_outs, &fan_out, &directive).await {
                Ok(Settled::Finished) => finished.push((fan_out, directive)),
                Ok(Settled::Moving) => tracing::warn!(
                    pending = %fan_out.sk(),
                    "config kept changing during the fan-out; left pending for the next apply"
                ),
                Ok(Settled::Stopped(cursor)) => {
                    stopped += 1;
                    self.keep_place(run, &fan_out, &cursor).await;
                }
                Err(err) => errors.push(fan_out_error(&fan_out, &err)),
            }
        }
        if total > 0 {
            tracing::info!(target: PROGRESS, phase = "fan-out", done = total, total);
        }
        match &swept {
            Some(first) => {
                let (kept, late) = self.catch_up(first, finished, run, caller, errors).await;
                (kept, stopped + late)
            }
            None => (finished, stopped),
        }
    }

    /// Records where a stopped fan-out goes on; a failure only costs a
    /// start from the beginning.
    async fn keep_place(&self, run: &Run<'_, S>, fan_out: &FanOut, cursor: &Cursor) {
        if let Err(err) = run.holder.save_cursor(fan_out, cursor).await {
            tracing::warn!(pending = %fan_out.sk(), error = %err, "recording where the fan-out stopped failed; the next run starts it over");
        }
    }

    async fn sweep_or_warn(&self) -> Option<Vec<BucketKey>> {
        match fanout::sweep(self.store, self.namespace, fanout::SWEEP_MAX_BUCKETS).await {
            Ok(Some(buckets)) => Some(buckets),
            Ok(None) => {
                tracing::info!(
                    "more than {} buckets: discovering per level instead of one sweep",
                    fanout::SWEEP_MAX_BUCKETS
                );
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "bucket sweep failed; discovering per level");
                None
            }
        }
    }

    /// After a swept fan-out phase: the finished fan-outs run again on the
    /// buckets created since the first sweep. Returns those still finished.
    async fn catch_up(
        &self,
        first: &[BucketKey],
        finished: Vec<(FanOut, Directive)>,
        run: &Run<'_, S>,
        caller: &Caller,
        errors: &mut Vec<String>,
    ) -> (Vec<(FanOut, Directive)>, usize) {
        let seen: HashSet<&BucketKey> = first.iter().collect();
        let fresh: Vec<BucketKey> =
            match fanout::sweep(self.store, self.namespace, fanout::SWEEP_MAX_BUCKETS).await {
                Ok(Some(all)) => all.into_iter().filter(|key| !seen.contains(key)).collect(),
                Ok(None) => {
                    errors.push(format!(
                        "bucket sweep: the namespace grew past {} buckets during the apply \
                         (fan-outs retried on the next apply, per level)",
                        fanout::SWEEP_MAX_BUCKETS
                    ));
                    return (Vec::new(), 0);
                }
                Err(err) => {
                    errors.push(format!(
                        "bucket sweep: {err} (fan-outs retried on the next apply)"
                    ));
                    return (Vec::new(), 0);
                }
            };
        if fresh.is_empty() {
            return (finished, 0);
        }
        let late = FanOuts {
            store: self.store,
            namespace: self.namespace,
            known: Some(&fresh),
            stop_at: caller.stop_at,
            resume: None,
        };
        let (mut kept, mut stopped) = (Vec::new(), 0);
        for (fan_out, directive) in finished {
            match late.run(fan_out.kind, &fan_out.level, &directive).await {
                Ok(tally) if tally.stopped.is_none() => kept.push((fan_out, directive)),
                // Left pending, run again from the start with what it knew.
                Ok(_) => {
                    stopped += 1;
                    let cursor = directive.carry(Cursor::start(), None);
                    self.keep_place(run, &fan_out, &cursor).await;
                }
                Err(err) => errors.push(fan_out_error(&fan_out, &err)),
            }
        }
        (kept, stopped)
    }

    /// Runs a fan-out from live config until the level holds still across
    /// it; the first round goes on from the recorded place, if any.
    async fn settle(
        &self,
        mut fan_outs: FanOuts<'_, S>,
        fan_out: &FanOut,
        directive: &Directive,
    ) -> Result<Settled, StoreError> {
        let (pk, sk) = config_key(self.namespace, &fan_out.level);
        let mut before = self.store.get(&pk, &sk, true).await?;
        let config = fanout::fingerprint(before.as_ref());
        fan_outs.resume = fan_outs
            .resume
            .map(|cursor| cursor.resumed_under(config.as_deref()));
        for _ in 0..FAN_OUT_ROUNDS {
            let tally = fan_outs
                .run_on(fan_out.kind, &fan_out.level, before.as_ref(), directive)
                .await?;
            tracing::info!(
                fan_out = %fan_out.sk(),
                stamped = tally.stamped,
                skipped = tally.skipped,
                stopped = tally.stopped.is_some(),
                "fan-out ran"
            );
            if let Some(cursor) = tally.stopped {
                let config = fanout::fingerprint(before.as_ref());
                return Ok(Settled::Stopped(directive.carry(cursor, config)));
            }
            fan_outs.resume = None;
            let after = self.store.get(&pk, &sk, true).await?;
            let still = match (&before, &after) {
                (Some(a), Some(b)) => same_item(a, b),
                (None, None) => true,
                _ => false,
            };
            if still {
                return Ok(Settled::Finished);
            }
            before = after;
        }
        Ok(Settled::Moving)
    }

    /// The release phase: finished fan-outs give up their pending items, the
    /// rest are handed on by expiring this apply's lease. Returns how many
    /// pending items remain, counted from what the plan read and what this
    /// apply did rather than read again.
    async fn release(
        &self,
        run: &Run<'_, S>,
        plan: &Plan,
        finished: Vec<(FanOut, Directive)>,
    ) -> usize {
        let mut released = BTreeSet::new();
        let mut removed = BTreeSet::new();
        for (fan_out, _) in finished {
            match run.holder.release(&fan_out).await {
                Ok(true) => {
                    removed.insert(fan_out.clone());
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(pending = %fan_out.sk(), error = %err, "releasing a finished fan-out failed")
                }
            }
            released.insert(fan_out);
        }
        let later = now_ms();
        for fan_out in run.held.difference(&released) {
            if let Err(err) = run.holder.expire(fan_out, later).await {
                tracing::warn!(pending = %fan_out.sk(), error = %err, "expiring a pending share failed");
            }
        }
        let mut remaining: BTreeSet<&FanOut> = plan.pending.iter().map(|p| &p.fan_out).collect();
        remaining.extend(&run.held);
        remaining.retain(|fan_out| !removed.contains(*fan_out));
        remaining.len()
    }
}

/// The names the write knew, with those a stopped run carried.
/// What a fan-out of `fan_out`'s level carries to its buckets: what this
/// apply wrote, with what a stopped run before it had carried.
fn directive(written: &Written, fan_out: &FanOut, carried: Option<&Cursor>) -> Directive {
    let previous = written.previous.get(&fan_out.level);
    Directive {
        reassert: None,
        soft_changed: with_carried(
            written
                .soft_changed
                .get(&fan_out.level)
                .into_iter()
                .flatten()
                .cloned(),
            carried.map(|c| &c.soft_changed),
        ),
        previous: with_carried(
            previous
                .into_iter()
                .flat_map(|c| c.limits.iter().map(|l| l.name.clone())),
            carried.map(|c| &c.previous),
        ),
    }
}

fn with_carried(
    written: impl Iterator<Item = String>,
    carried: Option<&BTreeSet<String>>,
) -> BTreeSet<String> {
    written
        .chain(carried.into_iter().flatten().cloned())
        .collect()
}

fn fan_out_error(fan_out: &FanOut, err: &StoreError) -> String {
    format!(
        "{} fan-out {} {}: {err} (retried on the next apply)",
        fan_out.kind.name(),
        fan_out.level.kind(),
        fan_out.level.target().unwrap_or_default()
    )
}

#[cfg(test)]
pub(crate) mod tests;
