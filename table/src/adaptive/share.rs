//! The demand-aware share (`share: demand`): each tick, per (resource,
//! limit), the capacity to share (`t x estimated capacity`) goes first to
//! what is used by everyone who is not asking for more, and what is left to
//! the saturated entities, max-min fair weighted by base:
//!
//! - every saturated entity gets `min(ceiling, lambda x base)` for one
//!   common `lambda >= 1`, chosen so that the saturated allocations fill what
//!   is left; what a capped entity cannot take goes to the others;
//! - base always wins: when the bases alone exceed what is left, every
//!   saturated entity has its base (`lambda = 1`), and nobody less;
//! - an entity no longer saturated keeps `max(base, use x (1 + HEADROOM))`,
//!   reached by halving the distance each tick (never below it, never below
//!   base), so that a demand that falls settles without flipping between base
//!   and raised.
//!
//! Everything here is in tokens per minute; the stamp of an allocation is the
//! factor `allocation / base` ([`Allocation::factor`]).

use super::law::Factor;

/// What an unsaturated entity keeps above its use.
pub const HEADROOM: f64 = 0.2;
/// The share of the distance to its new level an unsaturated entity's
/// allocation comes down by each tick.
pub const DECAY: f64 = 0.5;
/// An allocation that moved less than this is not stamped again, and one
/// within it of base is base.
pub const BAND: f64 = 0.05;

/// One entity the share is computed for.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimant {
    pub entity: String,
    /// Its base rate, tokens per minute (> 0).
    pub base: f64,
    /// The most it scales: `min(cp / ra, max_scale)` of its governing level.
    pub max_factor: f64,
    /// What it was admitted in the minute, tokens.
    pub used: f64,
    /// Its balance left no room for another request on every shard.
    pub saturated: bool,
    /// Its allocation in force, tokens per minute (its base if never raised).
    pub current: f64,
}

impl Claimant {
    pub fn ceiling(&self) -> f64 {
        self.base * self.max_factor.max(1.0)
    }
}

/// Why an entity got what it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Saturated: `lambda x base`.
    Share,
    /// Saturated, and its share is above its ceiling.
    Ceiling,
    /// Saturated, and the bases alone fill what is left: base.
    BaseWins,
    /// Not saturated: its use plus headroom, or base.
    Use,
    /// Not saturated, coming down towards its use plus headroom.
    Easing,
}

impl Why {
    pub fn name(self) -> &'static str {
        match self {
            Why::Share => "share",
            Why::Ceiling => "ceiling",
            Why::BaseWins => "base wins",
            Why::Use => "use",
            Why::Easing => "easing",
        }
    }
}

/// One entity's allocation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Allocation {
    pub entity: String,
    /// Tokens per minute.
    pub allocation: f64,
    pub base: f64,
    pub used: f64,
    pub saturated: bool,
    pub why: Why,
}

impl Allocation {
    /// The factor its buckets are stamped with.
    pub fn factor(&self) -> Factor {
        let f = Factor::from_f64(self.allocation / self.base);
        if Factor::ONE.differs(f, BAND) {
            f
        } else {
            Factor::ONE
        }
    }
}

/// The share of one minute.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Share {
    /// `t x estimated capacity`, tokens per minute.
    pub to_share: f64,
    /// Use by everyone not saturated (unmanaged buckets, entities not opted
    /// in, light ones).
    pub others: f64,
    /// What is left for the saturated entities: `to_share - others`.
    pub left: f64,
    /// The common multiple of base (1 when nobody is saturated).
    pub lambda: f64,
    pub allocations: Vec<Allocation>,
}

/// Shares `to_share` tokens per minute among `claimants`, where `used` is
/// the minute's whole use of the resource (every bucket, counted once).
pub fn share(to_share: f64, used: f64, claimants: &[Claimant]) -> Share {
    let saturated_use: f64 = claimants
        .iter()
        .filter(|c| c.saturated)
        .map(|c| c.used)
        .sum();
    let others = (used - saturated_use).max(0.0);
    let left = to_share - others;
    let lambda = common_lambda(left, claimants.iter().filter(|c| c.saturated));
    let allocations = claimants.iter().map(|c| allocate(c, lambda)).collect();
    Share {
        to_share,
        others,
        left,
        lambda,
        allocations,
    }
}

/// The `lambda >= 1` at which `sum(min(ceiling, lambda x base))` over the
/// saturated fills `left`; 1 when their bases alone do, and the largest
/// ratio when every one is capped.
fn common_lambda<'a>(left: f64, saturated: impl Iterator<Item = &'a Claimant>) -> f64 {
    let mut by_ratio: Vec<&Claimant> = saturated.filter(|c| c.base > 0.0).collect();
    by_ratio.sort_by(|a, b| a.max_factor.total_cmp(&b.max_factor));
    let mut weight: f64 = by_ratio.iter().map(|c| c.base).sum();
    if weight <= 0.0 || left <= weight {
        return 1.0;
    }
    let mut remaining = left;
    for c in &by_ratio {
        // Capped before the level the others reach: it takes its ceiling.
        if c.max_factor.max(1.0) * weight <= remaining {
            remaining -= c.ceiling();
            weight -= c.base;
            if weight <= 0.0 {
                return c.max_factor.max(1.0);
            }
        } else {
            break;
        }
    }
    (remaining / weight).max(1.0)
}

fn allocate(c: &Claimant, lambda: f64) -> Allocation {
    let (allocation, why) = if c.saturated {
        let scaled = lambda * c.base;
        match scaled {
            _ if lambda <= 1.0 => (c.base, Why::BaseWins),
            s if s >= c.ceiling() => (c.ceiling(), Why::Ceiling),
            s => (s, Why::Share),
        }
    } else {
        // Never above what it holds: an entity that is not asking for more
        // does not creep up on its own headroom.
        let level = (c.used * (1.0 + HEADROOM)).clamp(c.base, c.ceiling());
        if c.current * (1.0 - BAND) >= level {
            // A step too small to stamp goes the whole way.
            let eased = c.current - DECAY * (c.current - level);
            let eased = if eased > c.current * (1.0 - BAND) {
                level
            } else {
                eased
            };
            (eased.max(level), Why::Easing)
        } else {
            (c.current.min(level).max(c.base), Why::Use)
        }
    };
    Allocation {
        entity: c.entity.clone(),
        allocation,
        base: c.base,
        used: c.used,
        saturated: c.saturated,
        why,
    }
}

/// What one tick shared out, for the report and `explain`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShareTick {
    /// The minute shared (its start).
    pub minute_ms: i64,
    /// `t x estimated capacity`, tokens per minute.
    pub to_share: f64,
    /// Use by everyone not saturated.
    pub others: f64,
    /// What was left for the saturated entities.
    pub left: f64,
    pub lambda: f64,
    /// Entities the cap left out of the minute: unlisted ones held.
    pub overflow: i64,
    pub entities: Vec<EntityShare>,
}

/// One entity's share.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EntityShare {
    pub entity: String,
    /// Tokens admitted in the minute.
    pub used: f64,
    pub saturated: bool,
    /// Tokens per minute: its base and its share.
    pub base: f64,
    pub allocation: f64,
    /// The factor its buckets carry after the tick.
    pub factor: f64,
    pub why: String,
    /// Its buckets were stamped this tick.
    pub stamped: bool,
    /// Its level is in shadow: reported, not stamped.
    pub shadow: bool,
}

#[cfg(test)]
mod tests;
