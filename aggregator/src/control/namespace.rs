//! One tick of one namespace: each target's new complete minutes through the
//! estimator, a move persisted under a new generation and its lap of stamps
//! run; targets the declaration no longer scales retired.

use super::canaries::Watch;
use super::{Controller, StreamShards, passed};
use std::collections::BTreeMap;
use zae_adaptive::estimator::{Decision, Estimator, Law};
use zae_adaptive::pass::{self, Pass, Writes};
use zae_adaptive::share::ShareTick;
use zae_adaptive::share::plan::Plan;
use zae_adaptive::tick::{self, CATCH_UP};
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::usage::{MINUTE_MS, Minute};
use zae_table::adaptive::{Declaration, Factor};
use zae_table::keys::{self, Index};
use zae_table::store::{Query, Returns, Store, StoreError};

/// How long an aggregator may go on with a declaration it read before.
const DECLARATION_TTL_MS: i64 = crate::write::utilization::DECLARATION_TTL.as_millis() as i64;

/// What one tick did for one namespace.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct NamespaceTick {
    /// The namespace's name.
    pub namespace: String,
    pub namespace_id: String,
    pub targets: Vec<TargetTick>,
}

/// What one tick did for one (resource, limit).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TargetTick {
    pub resource: String,
    pub limit: String,
    /// The minutes evaluated: `(minute start, utilization)`.
    pub minutes: Vec<(i64, f64)>,
    pub factor: f64,
    pub moved: bool,
    /// Why the factor is what it is.
    pub reason: String,
    pub target_utilization: f64,
    /// Every level that opted it in is in shadow: nothing stamped.
    pub shadow: bool,
    pub generation: i64,
    pub buckets_stamped: usize,
    /// Buckets whose stamps kept losing: owed to the next tick.
    pub stamps_lost: usize,
    /// The lap is not through; the next tick goes on from its cursor.
    pub pass_unfinished: bool,
    /// The declaration no longer scales it: its buckets are back at base
    /// and the target is gone.
    pub retired: bool,
    /// Under `share: demand`: what the tick shared out, and to whom.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareTick>,
}

/// A namespace's records, read before the canaries.
pub struct Prepared {
    id: String,
    declaration: Option<Declaration>,
    stored: BTreeMap<(String, String), Target>,
}

impl<S: Store, C: StreamShards> Controller<'_, S, C> {
    /// A namespace's declaration and targets; `None` when it has neither.
    pub(super) async fn prepare(&self, id: String) -> Result<Option<Prepared>, StoreError> {
        let declaration = match Declaration::read(self.store, &id, true).await? {
            None => None,
            Some(Ok(d)) => Some(d),
            Some(Err(e)) => {
                tracing::error!(namespace = %id, error = %e, "adaptive declaration unreadable: not controlled");
                None
            }
        };
        let stored: BTreeMap<(String, String), Target> = Target::read_all(self.store, &id)
            .await?
            .into_iter()
            .map(|t| ((t.resource.clone(), t.limit.clone()), t))
            .collect();
        if declaration.is_none() && stored.is_empty() {
            return Ok(None);
        }
        Ok(Some(Prepared {
            id,
            declaration,
            stored,
        }))
    }

    /// Evaluates every target of a prepared namespace at `now_ms`.
    pub(super) async fn evaluate(
        &self,
        prepared: Prepared,
        now_ms: i64,
        watch: Watch,
    ) -> Result<NamespaceTick, StoreError> {
        let Prepared {
            id,
            declaration,
            mut stored,
        } = prepared;
        let mut report = NamespaceTick {
            namespace_id: id.clone(),
            ..NamespaceTick::default()
        };
        let mut usage = UsageReader::default();
        if let Some(declaration) = &declaration {
            for (resource, limit, max) in declaration.targets() {
                let read = stored.remove(&(resource.clone(), limit.clone()));
                let t = self
                    .tick_target(
                        &id,
                        declaration,
                        (&resource, &limit, max, read),
                        (now_ms, watch),
                        &mut usage,
                    )
                    .await?;
                report.targets.push(t);
            }
        }
        // What the declaration no longer scales goes back to base.
        for (_, target) in stored {
            report.targets.push(self.retire(&id, target, now_ms).await?);
        }
        Ok(report)
    }

    /// A target the declaration no longer scales: every bucket back to base,
    /// then the target deleted (resumed at the next tick when cut short).
    async fn retire(
        &self,
        namespace: &str,
        mut target: Target,
        now_ms: i64,
    ) -> Result<TargetTick, StoreError> {
        let mut read = target.generation;
        if target.shared.is_some() {
            // Shared by demand: raised entities carry generations above the
            // target's; a lap under one above theirs reaches every bucket.
            target.shared = None;
            target
                .restamp_above_raises(self.store, namespace, now_ms)
                .await?;
            self.store
                .update(&target.write(namespace, Some(read)), Returns::Nothing)
                .await?;
            read = target.generation;
            Allocated::forget_all(self.store, namespace, &target.resource, &target.limit).await?;
        }
        let out_of_time = || passed(self.stop_at);
        let pass = pass::run(
            self.store,
            namespace,
            None,
            &mut target,
            Writes::Pinned,
            out_of_time,
        )
        .await?;
        let mut report = report(&target, &pass);
        report.factor = 1.0;
        report.reason = "retired".to_owned();
        if pass.finished {
            target.remove(self.store, namespace).await?;
            report.retired = true;
        } else if !pass.superseded {
            self.store
                .update(&target.write(namespace, Some(read)), Returns::Nothing)
                .await?;
        }
        Ok(report)
    }

    async fn tick_target(
        &self,
        namespace: &str,
        declaration: &Declaration,
        (resource, limit, max, read): (&str, &str, Factor, Option<Target>),
        (now_ms, watch): (i64, Watch),
        usage: &mut UsageReader,
    ) -> Result<TargetTick, StoreError> {
        let mut target = read
            .clone()
            .unwrap_or_else(|| tick::first_target(resource, limit, now_ms, DECLARATION_TTL_MS));
        let read_generation = read.as_ref().map(|t| t.generation);
        let mut estimator = tick::estimator_of(&target);
        let law = tick::law(declaration, resource, limit, max);
        let demand = declaration.shares_by_demand(resource);
        let capacity = tick::capacity(declaration, resource, limit);
        let mut seen = Seen::default();
        if watch.blind {
            seen.decision = (estimator.blind(), 0);
        } else if let Some(complete) = watch.complete {
            let reading = (namespace, capacity, complete);
            seen = self
                .read_minutes(reading, &mut target, &mut estimator, law, demand, usage)
                .await?;
        }
        let share = self
            .share_if_demand(namespace, declaration, &mut target, &seen, (watch, now_ms))
            .await?;
        let wanted = tick::moves_to(&estimator, &seen.decision.0, max, &target, demand);
        let moved = wanted.is_some();
        if let Some(wanted) = wanted {
            let generation = target.fresh(self.store, namespace, now_ms).await?;
            let reason = tick::move_reason(&estimator, wanted, &target);
            target.moved(wanted, now_ms, reason, seen.decision.1, generation);
        }
        target.state = (!demand)
            .then(|| serde_json::to_string(&estimator).ok())
            .flatten();
        let declared = declaration.fingerprint(resource, limit);
        if target.declared.as_deref() != Some(declared.as_str()) {
            // Opt-ins changed: every bucket is stamped again under them.
            target.declared = Some(declared);
            let generation = target.fresh(self.store, namespace, now_ms).await?;
            target.restamp(generation);
        }
        // A share that ran out of time leaves the target unmarked: one that
        // never has the time is stopped for the repair, not frozen raised.
        if !share.as_ref().is_some_and(|p| p.out_of_time) {
            target.ticked_at_ms = Some(now_ms);
        }
        self.store
            .update(&target.write(namespace, read_generation), Returns::Nothing)
            .await?;
        let pass = self.lap(namespace, declaration, &mut target).await?;
        let mut report = report(&target, &pass);
        if let Some(plan) = share.filter(|_| !pass.superseded) {
            self.settle_share(namespace, &mut target, plan, now_ms, &mut report)
                .await?;
        }
        report.minutes = seen.minutes;
        report.moved = moved;
        report.reason = match demand {
            true => "share: demand".to_owned(),
            false => estimator.reason.name().to_owned(),
        };
        report.target_utilization = law.target;
        report.shadow = declaration.shadow_only(resource, limit);
        Ok(report)
    }

    /// The target's new complete minutes, up to `complete`, through the
    /// estimator (under `share: demand`, read only: the factor stays at one).
    async fn read_minutes(
        &self,
        (namespace, capacity, complete): (&str, i64, i64),
        target: &mut Target,
        estimator: &mut Estimator,
        law: Law,
        demand: bool,
        usage: &mut UsageReader,
    ) -> Result<Seen, StoreError> {
        let mut seen = Seen::default();
        let (resource, limit) = (target.resource.clone(), target.limit.clone());
        let first = (target.minute_ms + MINUTE_MS).max(complete - (CATCH_UP - 1) * MINUTE_MS);
        for minute in (first..=complete).step_by(MINUTE_MS as usize) {
            let used = usage
                .used(self.store, namespace, minute, &resource, &limit)
                .await?;
            let utilization = tick::utilization(used, capacity);
            seen.minutes.push((minute, utilization));
            target.minute_ms = minute;
            seen.last_used = Some((minute, used));
            if demand {
                continue;
            }
            let tail = usage.tail(minute, &resource, &limit);
            let obs = tick::observation(target, minute, utilization, tail, capacity);
            let d = estimator.observe(obs, law);
            let (factor, mixed) = (obs.factor, obs.mixed);
            tracing::debug!(namespace, resource = %resource, limit = %limit, minute, utilization, factor, mixed, decision = ?d, "minute evaluated");
            if let Decision::Move(_) = d {
                seen.decision = (d, minute);
            }
        }
        Ok(seen)
    }

    /// The tick's share when the target's resource shares by demand;
    /// otherwise `None`, a share it had left behind.
    async fn share_if_demand(
        &self,
        namespace: &str,
        declaration: &Declaration,
        target: &mut Target,
        seen: &Seen,
        (watch, now_ms): (Watch, i64),
    ) -> Result<Option<Plan>, StoreError> {
        if !declaration.shares_by_demand(&target.resource) {
            self.leave_demand(namespace, target, now_ms).await?;
            return Ok(None);
        }
        let plan = self
            .plan_demand(namespace, declaration, target, seen, watch.blind, now_ms)
            .await?;
        Ok(Some(plan))
    }

    /// Under `share: demand`: the tick's share, planned (stamped after the
    /// target is written), the last one kept on record when no minute is
    /// new, and the target's own factor at one.
    async fn plan_demand(
        &self,
        namespace: &str,
        declaration: &Declaration,
        target: &mut Target,
        seen: &Seen,
        blind: bool,
        now_ms: i64,
    ) -> Result<Plan, StoreError> {
        let plan = self
            .plan_share(namespace, declaration, target, seen.last_used, blind)
            .await?;
        if plan.tick.minute_ms > 0 || !plan.tick.entities.is_empty() || target.shared.is_none() {
            target.shared = plan.tick.on_record();
        }
        if target.factor != Factor::ONE {
            let generation = target.fresh(self.store, namespace, now_ms).await?;
            target.moved(Factor::ONE, now_ms, "share: demand", 0, generation);
        }
        Ok(plan)
    }

    /// Back to `share: base`: the declaration's new fingerprint restamps
    /// every bucket, under a generation above every raise's (whatever the
    /// clock of the controller that raised them), and the raises are
    /// forgotten.
    async fn leave_demand(
        &self,
        namespace: &str,
        target: &mut Target,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if target.shared.take().is_none() {
            return Ok(());
        }
        target
            .restamp_above_raises(self.store, namespace, now_ms)
            .await?;
        Allocated::forget_all(self.store, namespace, &target.resource, &target.limit).await?;
        Ok(())
    }

    /// The lap of a generation not yet stamped, its progress written.
    async fn lap(
        &self,
        namespace: &str,
        declaration: &Declaration,
        target: &mut Target,
    ) -> Result<Pass, StoreError> {
        if target.stamped >= target.generation {
            return Ok(Pass::default());
        }
        let written = target.generation;
        let out_of_time = || passed(self.stop_at);
        let pass = pass::run(
            self.store,
            namespace,
            Some(declaration),
            target,
            Writes::Pinned,
            out_of_time,
        )
        .await?;
        if !pass.superseded {
            self.store
                .update(&target.write(namespace, Some(written)), Returns::Nothing)
                .await?;
        }
        Ok(pass)
    }

    /// The share's stamps, and the share on record as stamped, for `explain`.
    async fn settle_share(
        &self,
        namespace: &str,
        target: &mut Target,
        plan: Plan,
        now_ms: i64,
        report: &mut TargetTick,
    ) -> Result<(), StoreError> {
        let (tick, stamped) = self.apply_share(namespace, target, plan, now_ms).await?;
        report.stamps_lost += stamped.lost;
        report.buckets_stamped += stamped.stamped;
        if !stamped.superseded && tick.entities.iter().any(|e| e.stamped) {
            target.shared = tick.on_record();
            let write = target.write(namespace, Some(target.generation));
            match self.store.update(&write, Returns::Nothing).await {
                // Moved on meanwhile: the newer tick's share is on record.
                Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        report.share = Some(tick);
        Ok(())
    }
}

/// What a tick read of a target's minutes.
struct Seen {
    /// `(minute start, utilization)`.
    minutes: Vec<(i64, f64)>,
    /// The last minute read and its use, millitokens.
    last_used: Option<(i64, i64)>,
    /// The estimator's last move, and the minute behind it.
    decision: (Decision, i64),
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            minutes: Vec::new(),
            last_used: None,
            decision: (Decision::Hold, 0),
        }
    }
}

/// The report of a target and the pass run for it.
fn report(target: &Target, pass: &Pass) -> TargetTick {
    TargetTick {
        resource: target.resource.clone(),
        limit: target.limit.clone(),
        factor: target.factor.as_f64(),
        generation: target.generation,
        buckets_stamped: pass.stamped,
        stamps_lost: pass.lost,
        pass_unfinished: target.stamped < target.generation,
        ..TargetTick::default()
    }
}

/// Usage items of a namespace by minute, read once per minute for all its
/// resources.
#[derive(Default)]
struct UsageReader {
    minutes: BTreeMap<i64, Vec<Minute>>,
}

impl UsageReader {
    async fn used<S: Store>(
        &mut self,
        store: &S,
        namespace: &str,
        minute_ms: i64,
        resource: &str,
        limit: &str,
    ) -> Result<i64, StoreError> {
        if let std::collections::btree_map::Entry::Vacant(entry) = self.minutes.entry(minute_ms) {
            let query = Query {
                index: &Index::TABLE,
                pk: keys::pk_adaptive(namespace),
                sk_prefix: keys::sk_adaptive_usage(minute_ms, ""),
                consistent: true,
            };
            let items = store.query(&query).await?;
            entry.insert(items.iter().filter_map(Minute::from_item).collect());
        }
        Ok(self.minutes[&minute_ms]
            .iter()
            .filter(|m| m.resource == resource)
            .filter_map(|m| m.used.get(limit))
            .sum())
    }

    /// What the minute's tail used, once `used` read the minute; `None`
    /// when no item records it (nothing in the tail, or an older sensor).
    fn tail(&self, minute_ms: i64, resource: &str, limit: &str) -> Option<i64> {
        let minutes = self.minutes.get(&minute_ms)?.iter();
        let tails: Vec<i64> = minutes
            .filter(|m| m.resource == resource)
            .filter_map(|m| m.tail.get(limit).copied())
            .collect();
        (!tails.is_empty()).then(|| tails.iter().fold(0i64, |a, b| a.saturating_add(*b)))
    }
}
