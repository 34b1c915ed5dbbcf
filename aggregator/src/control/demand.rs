//! One tick of a `share: demand` target: the last complete minute's demand
//! (`zae_table::adaptive::demand`) shared out (`zae_table::adaptive::share`)
//! and the entities whose allocation moved by 5% or more stamped on every
//! shard, each stamp checked against the target's generation. The target's
//! own factor stays at one; the raised entities are kept per target
//! (`zae_table::adaptive::allocation`) so that a return to base, blindness,
//! a retire or a reset reaches each of them, idle ones included.
//!
//! An allocation is written before its stamps, marked pending, and settled
//! after them: a tick cut short leaves it pending, and the next tick stamps
//! it whether or not it moved.

use super::{Controller, StreamShards};
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet};
use zae_table::adaptive::Declaration;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::demand::Demand;
use zae_table::adaptive::generation;
use zae_table::adaptive::law::Factor;
use zae_table::adaptive::pass::{self, Configured, Through};
use zae_table::adaptive::share::{self, BAND, Claimant, EntityShare, Share, ShareTick};
use zae_table::adaptive::stamp::Wanted;
use zae_table::adaptive::target::Target;
use zae_table::config::LimitConfig;
use zae_table::level::Level;
use zae_table::resolve::{Resolver, first_with_limits};
use zae_table::store::{Returns, Store, StoreError};

/// The why of an entity sent back to base by blindness.
const BLIND: &str = "blind";

/// What a tick decided for one entity, before it is stamped.
pub(super) struct Decided {
    base: LimitConfig,
    max_scale: Option<Factor>,
    shadow: bool,
    old: Option<Allocated>,
    factor: Factor,
    /// Its stamps are to be written: moved by the band, pending, or back
    /// to base.
    moved: bool,
    report: EntityShare,
}

/// A tick's share, decided and not yet stamped.
#[derive(Default)]
pub(super) struct Plan {
    pub tick: ShareTick,
    decided: Vec<Decided>,
    /// The stop instant came before the share was decided.
    pub out_of_time: bool,
}

/// Entities whose governing level is read at once: the share's reads are
/// one per listed or raised entity, at most a few thousand a tick.
const GOVERNING_IN_FLIGHT: usize = 16;

/// An entity's governing level and base for the limit, when it opted in.
struct Governed {
    base: LimitConfig,
    max_factor: Factor,
    max_scale: Option<Factor>,
    shadow: bool,
}

impl<S: Store, C: StreamShards> Controller<'_, S, C> {
    /// The share of `minute` (`None`: no complete minute this tick, and
    /// nothing moves unless blind): `used` is the minute's whole use of the
    /// resource, millitokens.
    pub(super) async fn plan_share(
        &self,
        namespace: &str,
        declaration: &Declaration,
        target: &Target,
        minute: Option<(i64, i64)>,
        blind: bool,
    ) -> Result<Plan, StoreError> {
        let (resource, limit) = (target.resource.as_str(), target.limit.as_str());
        let allocated: BTreeMap<String, Allocated> =
            Allocated::read(self.store, namespace, resource, limit)
                .await?
                .into_iter()
                .map(|a| (a.entity.clone(), a))
                .collect();
        let mut plan = Plan::default();
        // Nothing to move: no new minute, or blind with nobody raised.
        if (!blind && minute.is_none()) || (blind && allocated.is_empty()) {
            return Ok(plan);
        }
        let configured = Configured::read(self.store, namespace, resource).await?;
        // One resolver for the tick: the system and resource levels are read once.
        let resolver = Resolver::new(self.store, namespace);
        let levels = Through {
            source: &resolver,
            configured: &configured,
        };
        let Some((minute_ms, used)) = minute.filter(|_| !blind) else {
            self.to_base(declaration, &levels, target, allocated, &mut plan)
                .await?;
            return Ok(plan);
        };
        let items = self
            .store
            .query(&Demand::query(namespace, resource, minute_ms))
            .await?;
        let demand = Demand::from_items(&items, limit);
        let capacity = declaration.capacity(resource, limit).unwrap_or(1).max(1) as f64;
        let to_share = declaration.target_utilization(resource, limit) * capacity;
        let entities: BTreeSet<&String> = demand.entities.keys().chain(allocated.keys()).collect();
        let Some(levels_of) = self
            .governing_all(declaration, &levels, entities.iter().copied(), target)
            .await?
        else {
            // Out of time before every entity's level was read: nothing
            // moves, and the target is not marked ticked (a namespace that
            // never has the time is stopped for the repair).
            plan.out_of_time = true;
            return Ok(plan);
        };
        let mut claimants = Vec::new();
        let mut governed = Vec::new();
        for (entity, g) in entities.into_iter().zip(levels_of) {
            // A raised entity is listed whenever it is used, outside the
            // cap: one unlisted is idle, overflow or not, and eases down.
            let seen = demand.entities.get(entity);
            let old = allocated.get(entity).cloned();
            let Some(g) = g else {
                if let Some(old) = old {
                    // No longer opted in: back to base with the others.
                    plan.decided.push(back_to_base(old, "not opted in"));
                }
                continue;
            };
            let base = per_minute(&g.base);
            let current = old.as_ref().map_or(1.0, |a| a.factor.as_f64()) * base;
            claimants.push(Claimant {
                entity: entity.clone(),
                base,
                max_factor: g.max_factor.as_f64(),
                used: seen.map_or(0.0, |s| s.used as f64 / 1000.0),
                saturated: seen.is_some_and(|s| s.saturated),
                current,
            });
            governed.push((g, old));
        }
        let shared = share::share(to_share, used as f64 / 1000.0, &claimants);
        plan.tick = summary(minute_ms, &shared, demand.overflow);
        for (allocation, (g, old)) in shared.allocations.iter().zip(governed) {
            let factor = allocation.factor();
            let before = old.as_ref().map_or(Factor::ONE, |a| a.factor);
            let pending = old.as_ref().is_some_and(|a| a.pending);
            let moved = before.differs(factor, BAND) || pending;
            // Entities at base that stay there are not reported one by one.
            if !moved && old.is_none() {
                continue;
            }
            let factor = if moved { factor } else { before };
            plan.decided.push(Decided {
                base: g.base,
                max_scale: g.max_scale,
                shadow: g.shadow,
                factor,
                moved,
                old,
                report: EntityShare {
                    entity: allocation.entity.clone(),
                    used: allocation.used,
                    saturated: allocation.saturated,
                    base: allocation.base,
                    allocation: allocation.allocation,
                    factor: factor.as_f64(),
                    why: allocation.why.name().to_owned(),
                    stamped: false,
                    shadow: g.shadow,
                },
            });
        }
        plan.tick.entities = plan.decided.iter().map(|d| d.report.clone()).collect();
        Ok(plan)
    }

    /// Blind: every raised entity back to base.
    async fn to_base(
        &self,
        declaration: &Declaration,
        levels: &Through<'_, Resolver<'_, S>>,
        target: &Target,
        allocated: BTreeMap<String, Allocated>,
        plan: &mut Plan,
    ) -> Result<(), StoreError> {
        // Out of time, the placeholder base of `back_to_base` still takes
        // every bucket carrying our amount back to what it had before.
        let mut levels_of = self
            .governing_all(declaration, levels, allocated.keys(), target)
            .await?
            .unwrap_or_default()
            .into_iter();
        for (_, old) in allocated {
            let governed = levels_of.next().flatten();
            let mut decided = back_to_base(old, BLIND);
            if let Some(g) = governed {
                decided.base = g.base;
                decided.max_scale = g.max_scale;
            }
            plan.decided.push(decided);
        }
        plan.tick.entities = plan.decided.iter().map(|d| d.report.clone()).collect();
        Ok(())
    }

    /// [`Controller::governed`] for each of `entities`, in their order, read
    /// `GOVERNING_IN_FLIGHT` at a time; `None` when the stop instant came
    /// first.
    async fn governing_all<'e>(
        &self,
        declaration: &Declaration,
        levels: &Through<'_, Resolver<'_, S>>,
        entities: impl Iterator<Item = &'e String>,
        target: &Target,
    ) -> Result<Option<Vec<Option<Governed>>>, StoreError> {
        let mut reads = futures::stream::iter(entities)
            .map(|entity| self.governed(declaration, levels, entity, target))
            .buffered(GOVERNING_IN_FLIGHT);
        let mut all = Vec::new();
        while let Some(read) = reads.next().await {
            if super::passed(self.stop_at) {
                return Ok(None);
            }
            all.push(read?);
        }
        Ok(Some(all))
    }

    /// The level deciding `entity`'s limits on the target's resource, and
    /// its opt-in; `None` when it has no such limit or did not opt in.
    async fn governed(
        &self,
        declaration: &Declaration,
        levels: &Through<'_, Resolver<'_, S>>,
        entity: &str,
        target: &Target,
    ) -> Result<Option<Governed>, StoreError> {
        let walk = Level::resolution(entity, &target.resource, true);
        let Some((level, config)) = first_with_limits(levels, walk).await? else {
            return Ok(None);
        };
        let Some(base) = config.limits.into_iter().find(|l| l.name == target.limit) else {
            return Ok(None);
        };
        let Some(opt_in) = declaration.opt_in(&level, &target.limit) else {
            return Ok(None);
        };
        if base.refill_amount <= 0 || base.refill_period <= 0 {
            return Ok(None);
        }
        Ok(Some(Governed {
            base,
            max_factor: opt_in.max_factor,
            max_scale: opt_in.max_scale,
            shadow: opt_in.shadow,
        }))
    }

    /// Stamps what moved, each entity's allocation recorded (pending) before
    /// its stamps and settled after; stops when the target moved on, and
    /// starts none past the stop instant (one at a time: each stamp is a
    /// transaction on the target item, which concurrent ones would conflict
    /// on). Returns
    /// the share with what was stamped, and the buckets stamped and lost.
    pub(super) async fn apply_share(
        &self,
        namespace: &str,
        target: &Target,
        plan: Plan,
        now_ms: i64,
    ) -> Result<(ShareTick, pass::Pass), StoreError> {
        let Plan {
            mut tick, decided, ..
        } = plan;
        let mut total = pass::Pass::default();
        let mut generation = self
            .generations(namespace, target, &decided, now_ms)
            .await?;
        for (d, report) in decided.iter().zip(tick.entities.iter_mut()) {
            if d.moved && super::passed(self.stop_at) {
                // Out of time: the entities left keep what they have, and
                // the next tick decides them again.
                report.factor = d.old.as_ref().map_or(1.0, |a| a.factor.as_f64());
                continue;
            }
            if d.moved {
                let p = self
                    .stamp_decided(namespace, target, d, (generation, now_ms))
                    .await?;
                generation = generation.saturating_add(1);
                if p.superseded {
                    total.superseded = true;
                    break;
                }
                total.lost += p.lost;
                total.stamped += p.stamped;
                report.stamped = p.stamped > 0;
                if !p.finished {
                    report.factor = d.old.as_ref().map_or(1.0, |a| a.factor.as_f64());
                }
            }
        }
        Ok((tick, total))
    }

    /// The first of one new generation for each entity to stamp, taken in
    /// one block from the namespace's counter: above the target's and every
    /// allocation's read.
    async fn generations(
        &self,
        namespace: &str,
        target: &Target,
        decided: &[Decided],
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let moving = decided.iter().filter(|d| d.moved).count() as i64;
        if moving == 0 {
            return Ok(0);
        }
        let floor = decided
            .iter()
            .filter_map(|d| d.old.as_ref().map(|a| a.generation))
            .fold(target.generation, i64::max)
            .saturating_add(1);
        generation::take(self.store, namespace, moving, floor, now_ms).await
    }

    /// Records one entity's allocation (pending), stamps its shards under
    /// its new generation, and settles the record (deleted at base) once
    /// every shard carries it.
    async fn stamp_decided(
        &self,
        namespace: &str,
        target: &Target,
        d: &Decided,
        (generation, now_ms): (i64, i64),
    ) -> Result<pass::Pass, StoreError> {
        let mut allocated = Allocated {
            resource: target.resource.clone(),
            limit: target.limit.clone(),
            entity: d.report.entity.clone(),
            factor: d.factor,
            generation,
            used: d.report.used.round() as i64,
            saturated: d.report.saturated,
            why: d.report.why.clone(),
            at_ms: now_ms,
            pending: true,
        };
        // Written before the stamps, a return to base included: the
        // repair's transaction checks it, so a raise being withdrawn is
        // never stamped on a shard the client creates meanwhile.
        self.store
            .update(&allocated.write(namespace), Returns::Nothing)
            .await?;
        let wanted = Wanted {
            base: &d.base,
            factor: if d.shadow { Factor::ONE } else { d.factor },
            max_scale: d.max_scale,
            generation,
        };
        let p =
            pass::stamp_entity(self.store, namespace, target, &allocated.entity, wanted).await?;
        if p.finished {
            allocated.pending = false;
            if d.factor == Factor::ONE {
                allocated.remove(self.store, namespace).await?;
            } else {
                self.store
                    .update(&allocated.write(namespace), Returns::Nothing)
                    .await?;
            }
        }
        Ok(p)
    }
}

/// An entity sent back to base, with why.
fn back_to_base(old: Allocated, why: &str) -> Decided {
    let report = EntityShare {
        entity: old.entity.clone(),
        factor: old.factor.as_f64(),
        why: why.to_owned(),
        ..EntityShare::default()
    };
    Decided {
        // No configured base (its level no longer opts in, or blind callers
        // put the governing one here): a base no bucket carries makes the
        // stamp return a bucket still carrying our amount to the amount it
        // had before the first stamp, and leave any other alone.
        base: LimitConfig::drip(&old.limit, 0, 0, 1),
        max_scale: None,
        shadow: false,
        factor: Factor::ONE,
        moved: true,
        old: Some(old),
        report,
    }
}

/// A limit's base rate in tokens per minute.
fn per_minute(base: &LimitConfig) -> f64 {
    base.refill_amount as f64 * 60.0 / base.refill_period as f64
}

fn summary(minute_ms: i64, shared: &Share, overflow: i64) -> ShareTick {
    ShareTick {
        minute_ms,
        to_share: shared.to_share,
        others: shared.others,
        left: shared.left,
        lambda: shared.lambda,
        overflow,
        entities: Vec::new(),
        omitted: 0,
    }
}

#[cfg(test)]
mod tests;
