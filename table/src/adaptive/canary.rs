//! Canaries: the controller's proof that the stream is being read. Each
//! tick it writes `CANARIES` items (`{ns}/ADAPTIVE#CANARY#{k}`, `#STATE`, so
//! the aggregator's filter passes them) stamped with the tick's instant; the
//! aggregator, on reading one, raises `c_{k}` on `#SENSED` to that instant.
//! Several canaries, because a stream has a shard per table partition and
//! each canary lands in the shard of its own key: a minute counts as complete
//! only when every canary written after it has come through.

use crate::keys::{self, Index, SK_STATE};
use crate::store::{Update, UpdateBuilder};
use crate::value::{Attr, Item};

/// Canaries per namespace and tick.
pub const CANARIES: u32 = 4;
/// The instant (epoch ms) the canary was written at.
pub const WRITTEN_AT: &str = "written_at";
pub const TTL: &str = "ttl";
/// Canaries and sensed marks outlive a stopped controller by a day.
const TTL_S: i64 = 86_400;

/// The canary `index` of a tick at `now_ms`.
pub fn item(namespace: &str, index: u32, now_ms: i64) -> Item {
    [
        (Index::TABLE.pk, Attr::s(keys::pk_canary(namespace, index))),
        (Index::TABLE.sk, Attr::s(SK_STATE)),
        (WRITTEN_AT, Attr::n(now_ms)),
        (TTL, Attr::n(now_ms / 1000 + TTL_S)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// `c_{index}` on `#SENSED`.
pub fn sensed_attr(index: u32) -> String {
    format!("c_{index}")
}

/// Raises the sensed mark of canary `index` to `written_at_ms`; a redelivered
/// or older canary fails the condition and changes nothing.
pub fn sense(namespace: &str, index: u32, written_at_ms: i64) -> Update {
    let mut update = UpdateBuilder::new();
    let mark = update.name(&sensed_attr(index));
    let at = update.value(Attr::n(written_at_ms));
    update
        .set(&sensed_attr(index), Attr::n(written_at_ms))
        .set(TTL, Attr::n(written_at_ms / 1000 + TTL_S));
    update.build(
        &keys::pk_adaptive(namespace),
        keys::SK_ADAPTIVE_SENSED,
        Some(format!("attribute_not_exists({mark}) OR {mark} < {at}")),
    )
}

/// The instant up to which every canary has been sensed: the earliest mark,
/// `None` until each has been seen once.
pub fn sensed_through(item: Option<&Item>) -> Option<i64> {
    let item = item?;
    (0..CANARIES)
        .map(|k| item.get(&sensed_attr(k)).and_then(Attr::as_int))
        .collect::<Option<Vec<i64>>>()?
        .into_iter()
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensed_through_waits_for_every_canary() {
        let mut item = Item::new();
        assert_eq!(sensed_through(Some(&item)), None);
        for k in 0..CANARIES - 1 {
            item.insert(sensed_attr(k), Attr::n(1_000 + i64::from(k)));
        }
        assert_eq!(sensed_through(Some(&item)), None);
        item.insert(sensed_attr(CANARIES - 1), Attr::n(900));
        assert_eq!(sensed_through(Some(&item)), Some(900));
        assert_eq!(sensed_through(None), None);
    }

    #[test]
    fn a_sense_only_moves_the_mark_forward() {
        let update = sense("ns", 2, 5_000);
        assert_eq!(update.pk, "ns/ADAPTIVE#");
        assert_eq!(update.sk, "#SENSED");
        let condition = update.condition.unwrap();
        assert!(condition.contains("attribute_not_exists") && condition.contains('<'));
    }
}
