//! The demand-aware share (`share: demand`): each tick, per (resource,
//! limit), the capacity to share (`t x estimated capacity`) goes first to
//! what is used by everyone who holds base and asks for no more, and what is
//! left to the entities that are raised or ask to be, max-min fair weighted
//! by base:
//!
//! - each of them gets `min(want, lambda x base)` for one common
//!   `lambda >= 1`, chosen so that their allocations fill what is left; what
//!   one cannot take (its want is lower) goes to the others. A saturated
//!   entity wants its ceiling; one no longer saturated wants
//!   `max(base, use x (1 + HEADROOM))`, reached by halving the distance each
//!   tick (never below it, never below base), so that a demand that falls
//!   settles without flipping between base and raised;
//! - **the sum bound**: their allocations plus the use of everyone else never
//!   exceed the capacity to share, unless their bases alone with that use
//!   do: then every one of them is at base, and nobody less (base always
//!   wins). A raised entity's whole allocation counts, used or not, so an
//!   overload takes back what the light ones were lent; an entity at base
//!   that asks for nothing counts by its use, so that its idle base is not
//!   held back from the others.
//!
//! Everything here is in tokens per minute; the stamp of an allocation is the
//! factor `allocation / base` ([`Allocation::factor`]).

use crate::law::Factor;

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
    /// Its want is above its share: `lambda x base`.
    Share,
    /// Saturated, and its share is above its ceiling.
    Ceiling,
    /// Raised or asking, and the bases alone fill what is left: base.
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
    /// Use by everyone at base asking for nothing more (unmanaged buckets,
    /// entities not opted in, light ones).
    pub others: f64,
    /// What is left for the entities raised or asking: `to_share - others`.
    pub left: f64,
    /// The common multiple of base (1 when the bases fill what is left; the
    /// largest want over base when every want fits).
    pub lambda: f64,
    pub allocations: Vec<Allocation>,
}

/// What an entity asks of a tick: the most it is allocated, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Want {
    level: f64,
    why: Why,
}

/// Shares `to_share` tokens per minute among `claimants`, where `used` is
/// the minute's whole use of the resource (every bucket, counted once).
pub fn share(to_share: f64, used: f64, claimants: &[Claimant]) -> Share {
    let wants: Vec<Want> = claimants.iter().map(want).collect();
    let asking = || {
        claimants
            .iter()
            .zip(&wants)
            .filter(|(c, w)| w.level > c.base)
    };
    let asking_use: f64 = asking().map(|(c, _)| c.used).sum();
    let others = (used - asking_use).max(0.0);
    let left = to_share - others;
    let lambda = common_lambda(left, asking().map(|(c, w)| (c.base, w.level)));
    let allocations = claimants
        .iter()
        .zip(&wants)
        .map(|(c, w)| allocate(c, *w, lambda))
        .collect();
    Share {
        to_share,
        others,
        left,
        lambda,
        allocations,
    }
}

/// The `lambda >= 1` at which `sum(min(want, lambda x base))` over
/// `(base, want)` fills `left`; 1 when their bases alone do, and the
/// largest `want / base` when every want fits.
fn common_lambda(left: f64, asking: impl Iterator<Item = (f64, f64)>) -> f64 {
    let ratio = |(base, want): &(f64, f64)| want / base;
    let mut by_ratio: Vec<(f64, f64)> = asking.filter(|(base, _)| *base > 0.0).collect();
    by_ratio.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
    let mut weight: f64 = by_ratio.iter().map(|(base, _)| base).sum();
    if weight <= 0.0 || left <= weight {
        return 1.0;
    }
    let mut remaining = left;
    for entry in &by_ratio {
        // Wants less than the level the others reach: it takes its want.
        if ratio(entry).max(1.0) * weight <= remaining {
            remaining -= entry.1;
            weight -= entry.0;
            if weight <= 0.0 {
                return ratio(entry).max(1.0);
            }
        } else {
            break;
        }
    }
    (remaining / weight).max(1.0)
}

/// A saturated entity wants its ceiling; one that is not, its use plus
/// headroom, eased down to from above and never crept up to from below.
fn want(c: &Claimant) -> Want {
    if c.saturated {
        return Want {
            level: c.ceiling(),
            why: Why::Ceiling,
        };
    }
    let level = (c.used * (1.0 + HEADROOM)).clamp(c.base, c.ceiling());
    if c.current * (1.0 - BAND) >= level {
        // A step too small to stamp goes the whole way. "Too small" as the
        // stamp judges it, on factors in parts per million: a step a hair
        // over the band in floats can round under it there, and would then
        // never be stamped, holding the entity above its level for good.
        let eased = c.current - DECAY * (c.current - level);
        let stampable =
            Factor::from_f64(c.current / c.base).differs(Factor::from_f64(eased / c.base), BAND);
        let eased = if stampable { eased } else { level };
        // Never above the ceiling: one lowered under an allocation (a level's
        // `max_scale` or burst) takes it there at once, not by halves.
        return Want {
            level: eased.max(level).min(c.ceiling()),
            why: Why::Easing,
        };
    }
    // Never above what it holds: an entity that is not asking for more
    // does not creep up on its own headroom.
    Want {
        level: c.current.min(level).max(c.base),
        why: Why::Use,
    }
}

fn allocate(c: &Claimant, want: Want, lambda: f64) -> Allocation {
    let (allocation, why) = match lambda * c.base {
        _ if want.level <= c.base => (c.base, want.why),
        _ if lambda <= 1.0 => (c.base, Why::BaseWins),
        share if share >= want.level => (want.level, want.why),
        share => (share, Why::Share),
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
    /// Use by everyone at base asking for nothing more.
    pub others: f64,
    /// What was left for the entities raised or asking.
    pub left: f64,
    pub lambda: f64,
    /// Entities the cap left out of the minute: unlisted ones held.
    pub overflow: i64,
    pub entities: Vec<EntityShare>,
    /// Entities left out of the record (the target item's), beyond the
    /// `KEPT_ON_RECORD` with the largest allocations.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

/// Entities a share keeps on record: at about 200 bytes each, the target
/// item stays far below DynamoDB's 400 KB whatever the namespace's size.
pub const KEPT_ON_RECORD: usize = 200;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl ShareTick {
    /// The share as the target records it (JSON): the entities with the
    /// largest allocations, at most `KEPT_ON_RECORD`, and how many more.
    pub fn on_record(&self) -> Option<String> {
        let mut kept = self.clone();
        if kept.entities.len() > KEPT_ON_RECORD {
            let by_allocation = |a: &EntityShare, b: &EntityShare| {
                b.allocation
                    .total_cmp(&a.allocation)
                    .then_with(|| a.entity.cmp(&b.entity))
            };
            kept.entities.sort_by(by_allocation);
            kept.omitted += kept.entities.len() - KEPT_ON_RECORD;
            kept.entities.truncate(KEPT_ON_RECORD);
        }
        serde_json::to_string(&kept).ok()
    }
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

pub mod plan;

#[cfg(test)]
mod tests;
