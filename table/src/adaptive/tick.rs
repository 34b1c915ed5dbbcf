//! The controller's record of the table (`_/ADAPTIVE#`, `#TICK`): when it
//! last ticked, the canary ticks it wrote (instant and count, the last
//! few), and its stream's open shards as last counted. With the sensed
//! sets of those canaries it says how far the stream has been read on every
//! shard, and whether the controller is blind.

use super::canary;
use crate::keys::{self, Index, RESERVED_NAMESPACE};
use crate::store::{Query, Store, StoreError, Update, UpdateBuilder};
use crate::value::{Attr, Item};
use std::collections::BTreeMap;

pub const TICKED_AT: &str = "ticked_at";
pub const CANARIES: &str = "canaries";
pub const SHARDS: &str = "shards";
const AT: &str = "at";
const COUNT: &str = "n";

/// Canary ticks remembered, oldest first.
pub const CANARIES_KEPT: usize = 5;
/// Canaries are written at most this often, however often the controller
/// is called: blindness is a matter of time, not of calls.
pub const CANARY_SPACING_MS: i64 = 30_000;
/// Blind: nothing written this long ago or earlier has come through (two
/// one-minute ticks).
pub const BLIND_AFTER_MS: i64 = 120_000;

/// One tick's canaries: when, and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub at_ms: i64,
    pub count: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tick {
    pub ticked_at_ms: i64,
    pub canaries: Vec<Written>,
    /// The stream's open shards when last counted.
    pub shards: Option<i64>,
}

impl Tick {
    /// The table's tick record; a default one when there is none.
    pub async fn read<S: Store>(store: &S, consistent: bool) -> Result<Tick, StoreError> {
        let pk = keys::pk_adaptive(RESERVED_NAMESPACE);
        let item = store.get(&pk, keys::SK_ADAPTIVE_TICK, consistent).await?;
        Ok(Tick::from_item(item.as_ref()))
    }

    pub fn from_item(item: Option<&Item>) -> Tick {
        let Some(item) = item else {
            return Tick::default();
        };
        let canaries = match item.get(CANARIES) {
            Some(Attr::L(list)) => list.iter().filter_map(written).collect(),
            _ => Vec::new(),
        };
        Tick {
            ticked_at_ms: item.get(TICKED_AT).and_then(Attr::as_int).unwrap_or(0),
            canaries,
            shards: item.get(SHARDS).and_then(Attr::as_int),
        }
    }

    pub fn write(&self) -> Update {
        let mut update = UpdateBuilder::new();
        let canaries = self
            .canaries
            .iter()
            .map(|w| {
                Attr::M(BTreeMap::from([
                    (AT.to_owned(), Attr::n(w.at_ms)),
                    (COUNT.to_owned(), Attr::n(w.count)),
                ]))
            })
            .collect();
        update
            .set(TICKED_AT, Attr::n(self.ticked_at_ms))
            .set(CANARIES, Attr::L(canaries));
        if let Some(shards) = self.shards {
            update.set(SHARDS, Attr::n(shards));
        }
        update.build(
            &keys::pk_adaptive(RESERVED_NAMESPACE),
            keys::SK_ADAPTIVE_TICK,
            None,
        )
    }

    /// Records a tick at `now_ms` and nothing else: a tick with nothing
    /// adaptive to control, which writes no canaries. One write, no read, so
    /// that the record says when the controller last ran on every table.
    pub fn touch(now_ms: i64) -> Update {
        let mut update = UpdateBuilder::new();
        update.set(TICKED_AT, Attr::n(now_ms));
        update.build(
            &keys::pk_adaptive(RESERVED_NAMESPACE),
            keys::SK_ADAPTIVE_TICK,
            None,
        )
    }

    /// Whether canaries are due at `now_ms`.
    pub fn canaries_due(&self, now_ms: i64) -> bool {
        self.canaries
            .last()
            .is_none_or(|last| now_ms.saturating_sub(last.at_ms) >= CANARY_SPACING_MS)
    }

    /// Records a tick at `now_ms`, and its canaries if it wrote them all.
    pub fn ticked(&mut self, now_ms: i64, canaries: Option<Written>) {
        self.ticked_at_ms = now_ms;
        if let Some(written) = canaries {
            self.canaries.push(written);
            let excess = self.canaries.len().saturating_sub(CANARIES_KEPT);
            self.canaries.drain(..excess);
        }
    }

    /// The sensed sets of the remembered canary ticks, in one consistent
    /// query: `(tick, canaries sensed)`.
    pub async fn sensed<S: Store>(store: &S) -> Result<Vec<(i64, usize)>, StoreError> {
        let query = Query {
            index: &Index::TABLE,
            pk: keys::pk_adaptive(RESERVED_NAMESPACE),
            sk_prefix: format!("{}#", keys::SK_ADAPTIVE_SENSED),
            consistent: true,
        };
        Ok(store
            .query(&query)
            .await?
            .iter()
            .filter_map(canary::sensed)
            .collect())
    }

    /// The sensed sets of the ticks this record remembers, read one by one:
    /// what [`Tick::through`] needs. The table keeps a day of sensed sets
    /// (their TTL), so a query of them all, at every poll of a tick's wait,
    /// read about 1,440 items each time.
    pub async fn sensed_of<S: Store>(&self, store: &S) -> Result<Vec<(i64, usize)>, StoreError> {
        let pk = keys::pk_adaptive(RESERVED_NAMESPACE);
        let mut sensed = Vec::with_capacity(self.canaries.len());
        for written in &self.canaries {
            let sk = keys::sk_adaptive_sensed(written.at_ms);
            if let Some(item) = store.get(&pk, &sk, true).await? {
                sensed.extend(canary::sensed(&item));
            }
        }
        Ok(sensed)
    }

    /// The latest tick whose canaries have all come through: every shard has
    /// been read up to it.
    pub fn through(&self, sensed: &[(i64, usize)]) -> Option<i64> {
        self.canaries
            .iter()
            .filter(|w| {
                sensed
                    .iter()
                    .any(|(at, seen)| *at == w.at_ms && *seen >= w.count as usize)
            })
            .map(|w| w.at_ms)
            .max()
    }

    /// Blind: canaries were written two ticks ago or earlier, and neither
    /// they nor any written since have all come through.
    pub fn blind(&self, now_ms: i64, through: Option<i64>) -> bool {
        let due = self
            .canaries
            .iter()
            .rev()
            .find(|w| w.at_ms <= now_ms.saturating_sub(BLIND_AFTER_MS));
        due.is_some_and(|due| through.is_none_or(|t| t < due.at_ms))
    }
}

fn written(attr: &Attr) -> Option<Written> {
    let Attr::M(map) = attr else { return None };
    Some(Written {
        at_ms: map.get(AT)?.as_int()?,
        count: u32::try_from(map.get(COUNT)?.as_int()?).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrote(at_ms: i64) -> Option<Written> {
        Some(Written { at_ms, count: 4 })
    }

    #[test]
    fn blind_once_a_tick_two_ticks_old_is_not_all_through() {
        let mut tick = Tick::default();
        tick.ticked(1_000, wrote(1_000));
        assert!(!tick.blind(60_000, None), "one tick is not yet two");
        assert!(!tick.canaries_due(20_000) && tick.canaries_due(31_000));
        tick.ticked(61_000, wrote(61_000));
        assert!(tick.blind(121_000, None));
        // Three of four canaries of the first tick: not through.
        assert_eq!(tick.through(&[(1_000, 3)]), None);
        assert!(tick.blind(121_000, tick.through(&[(1_000, 3)])));
        let through = tick.through(&[(1_000, 4), (61_000, 2)]);
        assert_eq!(through, Some(1_000));
        assert!(!tick.blind(121_000, through));
        // Called again and again within a minute: still the same question.
        for now in [121_500, 122_000, 150_000] {
            let due = tick.canaries_due(now);
            tick.ticked(now, if due { wrote(now) } else { None });
        }
        let ats: Vec<i64> = tick.canaries.iter().map(|w| w.at_ms).collect();
        assert_eq!(ats, vec![1_000, 61_000, 121_500]);
        assert!(!tick.blind(150_000, Some(1_000)));
        assert!(tick.blind(181_000, Some(1_000)));
        // A later tick all through covers an earlier one that is not.
        assert_eq!(tick.through(&[(1_000, 1), (121_500, 4)]), Some(121_500));
    }

    #[test]
    fn the_record_round_trips() {
        let mut tick = Tick {
            shards: Some(3),
            ..Tick::default()
        };
        tick.ticked(
            5_000,
            Some(Written {
                at_ms: 5_000,
                count: 29,
            }),
        );
        let update = tick.write();
        assert_eq!(update.pk, "_/ADAPTIVE#");
        let item: Item = update
            .names
            .values()
            .filter_map(|name| Some((name.clone(), update.assigned(name)?.clone())))
            .collect();
        assert_eq!(Tick::from_item(Some(&item)), tick);
    }
}
