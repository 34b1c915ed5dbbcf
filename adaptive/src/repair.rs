//! The stamp a bucket seen on the stream should carry, decided from what
//! the aggregator's repair read (targets, allocations, the governing level,
//! as cached): the target's factor or an allocation while the controller
//! ticks, base once it has been silent for [`STOPPED_AFTER_MS`], under a
//! generation no older than the stamps it may meet. The repair reads and
//! writes; a stamp's write is `zae_table::adaptive::stamp`'s.

use crate::law::Factor;
use zae_table::Item;
use zae_table::adaptive::AdaptiveLevel;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::stamp::{Record, Wanted};
use zae_table::adaptive::target::Target;
use zae_table::config::LimitConfig;

/// A controller silent this long is stopped: buckets seen go back to base.
pub const STOPPED_AFTER_MS: i64 = 5 * 60_000;

/// What the repair read for one limit of a bucket.
#[derive(Debug, Clone, Copy)]
pub struct Read<'a> {
    /// The governing level's base for the limit.
    pub base: &'a LimitConfig,
    /// The limit's target on the bucket's resource.
    pub target: Option<&'a Target>,
    /// The entity's allocation under `share: demand`.
    pub allocated: Option<&'a Allocated>,
    /// The governing level's opt-in, when it scales the limit.
    pub scaling: Option<&'a AdaptiveLevel>,
    /// The resource shares by demand.
    pub demand: bool,
}

/// Whether the controller stopped for the whole table (it last ticked at
/// `table_ticked_ms`) or for `target` (its namespace left the registry, its
/// ticks fail).
pub fn stopped(table_ticked_ms: i64, target: Option<&Target>, now_ms: i64) -> bool {
    now_ms.saturating_sub(table_ticked_ms) > STOPPED_AFTER_MS
        || target
            .and_then(|t| t.ticked_at_ms)
            .is_some_and(|at| now_ms.saturating_sub(at) > STOPPED_AFTER_MS)
}

/// The stamp `limit` of the bucket `image` should carry: a raised entity's
/// shards carry its allocation, under its own generation (base under it,
/// when the controller `stopped`).
pub fn wanted<'a>(image: &Item, limit: &str, read: Read<'a>, stopped: bool) -> Wanted<'a> {
    let scaling = read.scaling.filter(|_| !stopped);
    Wanted {
        base: read.base,
        factor: match (read.target, scaling) {
            (Some(t), Some(_)) => read.allocated.map_or(t.factor, |a| a.factor),
            _ => Factor::ONE,
        },
        max_scale: scaling.and_then(|o| o.max_scale),
        generation: generation(image, limit, read),
    }
}

/// The generation a repair stamps under: never below the target's (a lap
/// since the allocation restamped it under the target's newer one), an
/// allocation's own when the entity is raised. Under `share: demand`, a
/// stamp newer than both, with no allocation behind it (the transaction
/// checks there is none: a raise writes its allocation before its stamps),
/// is an orphan, a raise withdrawn on the shards its lap knew of (a shard
/// cloned from shard 0 after the lap read the count carries the old raise):
/// the repair takes it back to the target's factor.
fn generation(image: &Item, limit: &str, read: Read<'_>) -> i64 {
    let known = read
        .target
        .map_or(0, |t| t.generation)
        .max(read.allocated.map_or(0, |a| a.generation));
    match (read.allocated, read.demand) {
        (None, true) => known.max(Record::of(image, limit).map_or(0, |r| r.generation)),
        _ => known,
    }
}

#[cfg(test)]
mod tests;
