//! Canaries: the controller's proof that the stream is read, on every shard.
//!
//! The stream belongs to the table, so canaries are the table's: each tick
//! that is due writes [`count_for`] canary items
//! (`_/ADAPTIVE#CANARY#{at}#{k}`, `#STATE`, so the aggregator's filter
//! passes them) under partition keys new at every tick, and the aggregator,
//! on reading canary `k` of tick `at`, adds `k` to that tick's sensed set
//! (`_/ADAPTIVE#`, `#SENSED#{at}`; set union, so redelivery and order change
//! nothing). A canary proves only its own shard's progress: it is read
//! after everything written before it to that shard. Which shard a key lands
//! on is the table's hashing, unknown in advance, so a tick's canaries are
//! as many as reach every one of its stream's open shards with probability
//! 99.9% (keys hashed uniformly); a tick is **through** once all of its
//! canaries have been sensed.

use crate::keys::{self, Index, SK_STATE};
use crate::store::{Update, UpdateBuilder};
use crate::value::{Attr, Item};

/// The instant (epoch ms) of the tick that wrote the canary, and its index.
pub const WRITTEN_AT: &str = "written_at";
pub const INDEX: &str = "index";
pub const TTL: &str = "ttl";
/// The indices of a tick's canaries that have been sensed (a string set).
pub const SEEN: &str = "seen";
/// Canaries and sensed sets outlive a stopped controller by a day.
const TTL_S: i64 = 86_400;
/// The chance that a tick's canaries miss one of its shards.
pub const MISS: f64 = 0.001;
/// The fewest canaries a tick writes: a shard count read before a split is
/// not yet the count, and four cost nothing.
const FLOOR: u32 = 4;
/// The most: enough for about 450 shards.
const CEILING: u32 = 5_000;

/// Canaries per tick for a stream of `shards` open shards: the fewest `n`
/// with `shards x (1 - 1/shards)^n <= MISS`, the union bound on any shard
/// getting none (reaching 64 shards takes 703).
pub fn count_for(shards: usize) -> u32 {
    if shards <= 1 {
        return FLOOR;
    }
    let s = shards as f64;
    let n = ((s / MISS).ln() / -(1.0 - 1.0 / s).ln()).ceil();
    (n as u32).clamp(FLOOR, CEILING)
}

/// Canary `index` of the tick at `at_ms`.
pub fn item(at_ms: i64, index: u32) -> Item {
    [
        (Index::TABLE.pk, Attr::s(keys::pk_canary(at_ms, index))),
        (Index::TABLE.sk, Attr::s(SK_STATE)),
        (WRITTEN_AT, Attr::n(at_ms)),
        (INDEX, Attr::n(index)),
        (TTL, Attr::n(at_ms / 1000 + TTL_S)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Adds the canaries `indices` of the tick at `at_ms` to its sensed set.
pub fn sense(at_ms: i64, indices: &[u32]) -> Update {
    let mut update = UpdateBuilder::new();
    update
        .add(
            SEEN,
            Attr::Ss(indices.iter().map(|i| i.to_string()).collect()),
        )
        .set_if_absent(WRITTEN_AT, Attr::n(at_ms))
        .set_if_absent(TTL, Attr::n(at_ms / 1000 + TTL_S));
    update.build(
        &keys::pk_adaptive(keys::RESERVED_NAMESPACE),
        &keys::sk_adaptive_sensed(at_ms),
        None,
    )
}

/// A sensed set read back: its tick and how many canaries came through.
pub fn sensed(item: &Item) -> Option<(i64, usize)> {
    let at = item.get(WRITTEN_AT)?.as_int()?;
    let seen = match item.get(SEEN) {
        Some(Attr::Ss(set)) => set.len(),
        _ => 0,
    };
    Some((at, seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_reaches_every_shard_with_the_stated_chance() {
        assert_eq!(count_for(0), FLOOR);
        assert_eq!(count_for(1), FLOOR);
        assert_eq!(count_for(64), 703);
        for shards in [2usize, 3, 4, 16, 64, 256] {
            let n = count_for(shards);
            let s = shards as f64;
            let miss = s * (1.0 - 1.0 / s).powi(n as i32);
            assert!(miss <= MISS, "{shards} shards, {n} canaries: {miss}");
            if n > FLOOR {
                let fewer = s * (1.0 - 1.0 / s).powi(n as i32 - 1);
                assert!(fewer > MISS, "{shards}: {n} is not the fewest");
            }
        }
        assert_eq!(count_for(1_000_000), CEILING);
    }

    #[test]
    fn canaries_of_a_tick_have_keys_of_their_own_and_sensing_is_a_set_union() {
        let a = item(120_000, 3);
        assert_eq!(a["PK"], Attr::s("_/ADAPTIVE#CANARY#120000#3"));
        assert_eq!(
            keys::parse_canary("_/ADAPTIVE#CANARY#120000#3"),
            Some((120_000, 3))
        );
        let update = sense(120_000, &[3, 4]);
        assert_eq!(update.pk, "_/ADAPTIVE#");
        assert_eq!(update.sk, "#SENSED#0000000120000");
        assert!(update.expression.contains("ADD") && update.condition.is_none());
    }
}
