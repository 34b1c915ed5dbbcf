//! One tick of one namespace.

use super::Controller;
use std::collections::BTreeMap;
use zae_table::adaptive::estimator::{Decision, Estimator, Law, Observation};
use zae_table::adaptive::target::{Target, Tick};
use zae_table::adaptive::usage::{MINUTE_MS, Minute, minute_of};
use zae_table::adaptive::{Declaration, Factor, canary, pass};
use zae_table::keys::{self, Index};
use zae_table::store::{Query, Returns, Store, StoreError};

/// Minutes a target catches up on at most: older ones say little now.
const CATCH_UP: i64 = 3;
/// How long an aggregator may go on with a declaration it read before.
const DECLARATION_TTL_MS: i64 = crate::write::utilization::DECLARATION_TTL.as_millis() as i64;

/// What one tick did for one namespace.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct NamespaceTick {
    pub namespace: String,
    pub blind: bool,
    pub canaries_written: bool,
    /// Every canary written up to this instant has been sensed.
    pub sensed_through: Option<i64>,
    pub targets: Vec<TargetTick>,
}

/// What one tick did for one (resource, limit).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TargetTick {
    pub resource: String,
    pub limit: String,
    pub minutes: Vec<(i64, f64)>,
    pub factor: f64,
    pub moved: bool,
    pub generation: i64,
    pub buckets_stamped: usize,
    pub stamps_lost: usize,
    /// The pass stopped at the deadline; the next tick goes on from its cursor.
    pub pass_unfinished: bool,
    /// The declaration no longer scales it: its buckets are back at base
    /// and the target is gone.
    pub retired: bool,
}

impl<S: Store> Controller<'_, S> {
    /// One tick of `namespace`; `None` when it declares nothing adaptive
    /// and has no target left to retire.
    pub async fn tick(
        &self,
        namespace: &str,
        now_ms: i64,
    ) -> Result<Option<NamespaceTick>, StoreError> {
        let pk = keys::pk_adaptive(namespace);
        let declaration = self.declaration(namespace).await?;
        let mut stored: BTreeMap<(String, String), Target> =
            Target::read_all(self.store, namespace)
                .await?
                .into_iter()
                .map(|t| ((t.resource.clone(), t.limit.clone()), t))
                .collect();
        let Some(declaration) = declaration else {
            if stored.is_empty() {
                return Ok(None);
            }
            let mut report = NamespaceTick {
                namespace: namespace.to_owned(),
                ..NamespaceTick::default()
            };
            for (_, target) in stored {
                report.targets.push(self.retire(namespace, target).await?);
            }
            return Ok(Some(report));
        };
        let mut tick = Tick::read(self.store, namespace, true).await?;
        let sensed = self.store.get(&pk, keys::SK_ADAPTIVE_SENSED, true).await?;
        let sensed_through = canary::sensed_through(sensed.as_ref());
        let blind = tick.blind(now_ms, sensed_through);
        let canaries = tick.canaries_due(now_ms);
        if canaries {
            for index in 0..canary::CANARIES {
                self.store
                    .put(&canary::item(namespace, index, now_ms), None)
                    .await?;
            }
        }
        tick.ticked(now_ms, canaries);
        let sensed_through = match (self.wait, canaries) {
            (Some(wait), true) => self.wait_for_canaries(namespace, now_ms, wait).await?,
            _ => sensed_through,
        };
        // A minute is complete once a canary written after its end came through.
        let complete = sensed_through.map(|s| minute_of(s) - MINUTE_MS);
        let mut report = NamespaceTick {
            namespace: namespace.to_owned(),
            blind,
            canaries_written: canaries,
            sensed_through,
            targets: Vec::new(),
        };
        let mut usage = UsageReader::default();
        for (resource, limit, max) in declaration.targets() {
            let read = stored.remove(&(resource.clone(), limit.clone()));
            let t = self
                .tick_target(
                    namespace,
                    &declaration,
                    (&resource, &limit, max, read),
                    (now_ms, complete, blind),
                    &mut usage,
                )
                .await?;
            report.targets.push(t);
        }
        // What the declaration no longer scales goes back to base.
        for (_, target) in stored {
            report.targets.push(self.retire(namespace, target).await?);
        }
        self.store
            .update(&tick.write(namespace), Returns::Nothing)
            .await?;
        Ok(Some(report))
    }

    /// A target the declaration no longer scales: every bucket back to base,
    /// then the target deleted (resumed at the next tick when cut short).
    async fn retire(&self, namespace: &str, target: Target) -> Result<TargetTick, StoreError> {
        let out_of_time = || super::passed(self.stop_at);
        let pass = pass::run(self.store, namespace, None, &target, out_of_time).await?;
        let mut report = TargetTick {
            resource: target.resource.clone(),
            limit: target.limit.clone(),
            factor: 1.0,
            generation: target.generation,
            buckets_stamped: pass.stamped,
            stamps_lost: pass.lost,
            pass_unfinished: !pass.finished,
            retired: pass.finished,
            ..TargetTick::default()
        };
        if pass.finished && pass.lost == 0 {
            target.remove(self.store, namespace).await?;
        } else {
            let mut kept = target;
            kept.cursor = if pass.finished { None } else { pass.cursor };
            let generation = kept.generation;
            self.store
                .update(&kept.write(namespace, Some(generation)), Returns::Nothing)
                .await?;
            report.retired = false;
        }
        Ok(report)
    }

    /// Waits (polling) until this tick's canaries came through, or `wait`
    /// passed: then the minute that just ended is complete at this tick.
    async fn wait_for_canaries(
        &self,
        namespace: &str,
        now_ms: i64,
        wait: std::time::Duration,
    ) -> Result<Option<i64>, StoreError> {
        let pk = keys::pk_adaptive(namespace);
        let until = std::time::Instant::now() + wait;
        loop {
            let sensed = self.store.get(&pk, keys::SK_ADAPTIVE_SENSED, true).await?;
            let through = canary::sensed_through(sensed.as_ref());
            if through.is_some_and(|t| t >= now_ms) || std::time::Instant::now() >= until {
                return Ok(through);
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }

    async fn declaration(&self, namespace: &str) -> Result<Option<Declaration>, StoreError> {
        let read = Declaration::read(self.store, namespace, true).await?;
        Ok(read.and_then(|d| {
            d.map_err(|e| {
                tracing::error!(namespace, error = %e, "adaptive declaration unreadable: not controlled");
            })
            .ok()
        }))
    }

    async fn tick_target(
        &self,
        namespace: &str,
        declaration: &Declaration,
        (resource, limit, max, read): (&str, &str, Factor, Option<Target>),
        (now_ms, complete, blind): (i64, Option<i64>, bool),
        usage: &mut UsageReader,
    ) -> Result<TargetTick, StoreError> {
        let mut target = read.clone().unwrap_or_else(|| {
            // A new target's first minute starts after every aggregator
            // has read the declaration that made it (its cache): the
            // minutes before may not have been sensed at all.
            let mut base = Target::base(resource, limit);
            base.minute_ms = minute_of(now_ms + DECLARATION_TTL_MS);
            base
        });
        let read_generation = read.as_ref().map(|t| t.generation);
        let mut estimator: Estimator = target
            .state
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        // The target is the truth: a reset or a first tick starts from it.
        if Factor::from_f64(estimator.factor) != target.factor {
            estimator = Estimator {
                factor: target.factor.as_f64(),
                ..Estimator::default()
            };
        }
        let mut report = TargetTick {
            resource: resource.to_owned(),
            limit: limit.to_owned(),
            ..TargetTick::default()
        };
        let capacity = declaration.capacity(resource, limit).unwrap_or(1).max(1);
        let mut decision = Decision::Hold;
        if blind {
            decision = estimator.blind();
        } else if let Some(complete) = complete {
            let first = (target.minute_ms + MINUTE_MS).max(complete - (CATCH_UP - 1) * MINUTE_MS);
            for minute in (first..=complete).step_by(MINUTE_MS as usize) {
                let used = usage
                    .used(self.store, namespace, minute, resource, limit)
                    .await?;
                let utilization = used as f64 / (capacity as f64 * 1000.0);
                let (factor, mixed) = target.in_force(minute, minute + MINUTE_MS);
                let d = estimator.observe(
                    Observation {
                        utilization,
                        factor,
                        mixed,
                    },
                    Law {
                        target: declaration.target_utilization(resource, limit),
                        max_factor: max.as_f64(),
                    },
                );
                tracing::debug!(minute, utilization, factor, mixed, decision = ?d, "minute evaluated");
                if let Decision::Move(_) = d {
                    decision = d;
                }
                report.minutes.push((minute, utilization));
                target.minute_ms = minute;
            }
        }
        let wanted = Factor::from_f64(estimator.factor).min(max);
        if let Decision::Move(_) = decision
            && wanted != target.factor
        {
            target.previous = target.factor;
            target.factor = wanted;
            target.set_at_ms = now_ms;
            target.generation += 1;
            target.cursor = None;
            report.moved = true;
        }
        target.state = serde_json::to_string(&estimator).ok();
        let declared = declaration.fingerprint(resource, limit);
        if target.declared.as_deref() != Some(declared.as_str()) {
            // Opt-ins changed: every bucket is stamped again under them.
            target.declared = Some(declared);
            target.generation += 1;
            target.cursor = None;
        }
        self.store
            .update(&target.write(namespace, read_generation), Returns::Nothing)
            .await?;
        if target.stamped < target.generation {
            let written_generation = target.generation;
            let out_of_time = || super::passed(self.stop_at);
            let pass = pass::run(
                self.store,
                namespace,
                Some(declaration),
                &target,
                out_of_time,
            )
            .await?;
            report.buckets_stamped = pass.stamped;
            report.stamps_lost = pass.lost;
            if pass.finished {
                target.cursor = None;
                target.stamped = target.generation;
            } else {
                target.cursor = pass.cursor;
                report.pass_unfinished = true;
            }
            self.store
                .update(
                    &target.write(namespace, Some(written_generation)),
                    Returns::Nothing,
                )
                .await?;
        }
        report.factor = target.factor.as_f64();
        report.generation = target.generation;
        Ok(report)
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
}
