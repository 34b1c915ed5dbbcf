//! A tick's share, decided from what the controller read: the minute's
//! demand, the allocations in force and each entity's governing level. Which
//! entities move (by [`BAND`] or more, or pending from a tick cut short),
//! which go back to base, and what the tick reports; the controller stamps
//! what moved.

use super::{BAND, Claimant, EntityShare, Share, ShareTick, share};
use crate::law::Factor;
use std::collections::BTreeMap;
use zae_table::adaptive::Declaration;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::demand::Demand;
use zae_table::config::LimitConfig;

/// The why of an entity sent back to base by blindness.
pub const BLIND: &str = "blind";

/// An entity's governing level and base for the limit, when it opted in.
#[derive(Debug, Clone)]
pub struct Governed {
    pub base: LimitConfig,
    pub max_factor: Factor,
    pub max_scale: Option<Factor>,
    pub shadow: bool,
}

/// What a tick decided for one entity, before it is stamped.
#[derive(Debug, Clone)]
pub struct Decided {
    pub base: LimitConfig,
    pub max_scale: Option<Factor>,
    pub shadow: bool,
    pub old: Option<Allocated>,
    pub factor: Factor,
    /// Its stamps are to be written: moved by the band, pending, or back
    /// to base.
    pub moved: bool,
    pub report: EntityShare,
}

/// A tick's share, decided and not yet stamped.
#[derive(Debug, Default)]
pub struct Plan {
    pub tick: ShareTick,
    pub decided: Vec<Decided>,
    /// The stop instant came before the share was decided.
    pub out_of_time: bool,
}

/// What the tick shares out of a (resource, limit), tokens per minute:
/// the target utilization of its estimated capacity.
pub fn to_share(declaration: &Declaration, resource: &str, limit: &str) -> f64 {
    let capacity = declaration.capacity(resource, limit).unwrap_or(1).max(1) as f64;
    declaration.target_utilization(resource, limit) * capacity
}

/// The share of the minute `minute_ms` (`used`: its whole use of the
/// resource, millitokens) among `entities`, each with its governing level
/// (`None`: no longer opted in) and its allocation in force.
pub fn decide(
    (minute_ms, used): (i64, i64),
    to_share: f64,
    demand: &Demand,
    entities: Vec<(&String, Option<Governed>, Option<Allocated>)>,
) -> Plan {
    let mut plan = Plan::default();
    let mut claimants = Vec::new();
    let mut governed = Vec::new();
    for (entity, g, old) in entities {
        // A raised entity is listed whenever it is used, outside the
        // cap: one unlisted is idle, overflow or not, and eases down.
        let seen = demand.entities.get(entity);
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
    let shared = share(to_share, used as f64 / 1000.0, &claimants);
    plan.tick = summary(minute_ms, &shared, demand.overflow);
    for (allocation, (g, old)) in shared.allocations.iter().zip(governed) {
        plan.decided.extend(moved(allocation, g, old));
    }
    plan.tick.entities = plan.decided.iter().map(|d| d.report.clone()).collect();
    plan
}

/// One allocation against the one in force: `None` for an entity at base
/// that stays there (not reported one by one).
fn moved(allocation: &super::Allocation, g: Governed, old: Option<Allocated>) -> Option<Decided> {
    let factor = allocation.factor();
    let before = old.as_ref().map_or(Factor::ONE, |a| a.factor);
    let pending = old.as_ref().is_some_and(|a| a.pending);
    let moved = before.differs(factor, BAND) || pending;
    if !moved && old.is_none() {
        return None;
    }
    let factor = if moved { factor } else { before };
    Some(Decided {
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
    })
}

/// Blind: every raised entity back to base, under its governing level
/// when it was read (`governed`, in the order of `allocated`).
pub fn to_base(
    allocated: BTreeMap<String, Allocated>,
    governed: impl IntoIterator<Item = Option<Governed>>,
    plan: &mut Plan,
) {
    let mut governed = governed.into_iter();
    for (_, old) in allocated {
        let mut decided = back_to_base(old, BLIND);
        if let Some(g) = governed.next().flatten() {
            decided.base = g.base;
            decided.max_scale = g.max_scale;
        }
        plan.decided.push(decided);
    }
    plan.tick.entities = plan.decided.iter().map(|d| d.report.clone()).collect();
}

/// An entity sent back to base, with why.
pub fn back_to_base(old: Allocated, why: &str) -> Decided {
    // The factor its buckets carry after the tick: base, once the stamp
    // finishes (the controller puts the old one back when it does not).
    let report = EntityShare {
        entity: old.entity.clone(),
        factor: 1.0,
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
