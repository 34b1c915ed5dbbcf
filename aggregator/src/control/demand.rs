//! One tick of a `share: demand` target: the last complete minute's demand
//! (`zae_table::adaptive::demand`) read, shared out as `zae_adaptive`
//! decides (`zae_adaptive::share::plan`)
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
use zae_adaptive::pass;
use zae_adaptive::share::ShareTick;
use zae_adaptive::share::plan::{self, Decided, Governed, Plan};
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::demand::Demand;
use zae_table::adaptive::generation;
use zae_table::adaptive::stamp::Wanted;
use zae_table::adaptive::target::Target;
use zae_table::adaptive::{Declaration, Factor};
use zae_table::level::Level;
use zae_table::resolve::{Configured, Through};
use zae_table::resolve::{Resolver, first_with_limits};
use zae_table::store::{Returns, Store, StoreError};

/// Entities whose governing level is read at once: the share's reads are
/// one per listed or raised entity, at most a few thousand a tick.
const GOVERNING_IN_FLIGHT: usize = 16;

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
        let Some(minute) = minute.filter(|_| !blind) else {
            self.to_base(declaration, &levels, target, allocated, &mut plan)
                .await?;
            return Ok(plan);
        };
        let items = self
            .store
            .query(&Demand::query(namespace, resource, minute.0))
            .await?;
        let demand = Demand::from_items(&items, limit);
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
        let entities = entities
            .into_iter()
            .zip(levels_of)
            .map(|(entity, g)| (entity, g, allocated.get(entity).cloned()))
            .collect();
        let to_share = plan::to_share(declaration, resource, limit);
        Ok(plan::decide(minute, to_share, &demand, entities))
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
        let levels_of = self
            .governing_all(declaration, levels, allocated.keys(), target)
            .await?
            .unwrap_or_default();
        plan::to_base(allocated, levels_of, plan);
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

#[cfg(test)]
mod tests;
