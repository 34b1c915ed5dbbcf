//! The controller's records: per (resource, limit) the target factor and
//! where its stamping pass is (`{ns}/ADAPTIVE#`, `#TARGET#{resource}#{limit}`),
//! and per namespace the tick record (`#TICK`).
//!
//! A target's `generation` rises with every change of its factor; writes of
//! a target are conditional on the generation read, so two controllers never
//! interleave. The pass over buckets records the generation it finished
//! (`stamped`) and, when cut short, where to go on (`cursor`).

use super::law::Factor;
use crate::keys::{self, Index};
use crate::store::{Condition, Query, Store, StoreError, Update, UpdateBuilder};
use crate::value::{Attr, Item};

pub const RESOURCE: &str = "resource";
pub const LIMIT: &str = "limit";
pub const FACTOR_PPM: &str = "factor_ppm";
pub const PREVIOUS_PPM: &str = "previous_ppm";
pub const GENERATION: &str = "generation";
pub const SET_AT: &str = "set_at";
pub const MINUTE: &str = "minute";
pub const STAMPED: &str = "stamped";
pub const CURSOR: &str = "cursor";
pub const STATE: &str = "state";
/// The declaration's fingerprint for this target: a new one re-stamps.
pub const DECLARED: &str = "declared";
pub const TICKED_AT: &str = "ticked_at";
pub const CANARIES_AT: &str = "canaries_at";

/// One (resource, limit)'s target.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub resource: String,
    pub limit: String,
    pub factor: Factor,
    /// The factor before the last change, and when the change was made:
    /// what was in force over a minute that straddles it.
    pub previous: Factor,
    pub set_at_ms: i64,
    pub generation: i64,
    /// The last complete minute the controller evaluated (its start).
    pub minute_ms: i64,
    /// The generation whose stamping pass finished.
    pub stamped: i64,
    /// Where an unfinished pass goes on: the index's start key after the
    /// last page it finished.
    pub cursor: Option<Item>,
    /// The controller's estimator, opaque to everything else.
    pub state: Option<String>,
    /// What the declaration said about this target when it was last stamped.
    pub declared: Option<String>,
}

impl Target {
    /// A target never written: at base, nothing evaluated or stamped.
    pub fn base(resource: &str, limit: &str) -> Target {
        Target {
            resource: resource.to_owned(),
            limit: limit.to_owned(),
            factor: Factor::ONE,
            previous: Factor::ONE,
            set_at_ms: 0,
            generation: 0,
            minute_ms: 0,
            stamped: 0,
            cursor: None,
            state: None,
            declared: None,
        }
    }

    /// Every target of a namespace, in one consistent query.
    pub fn query(namespace: &str) -> Query {
        Query {
            index: &Index::TABLE,
            pk: keys::pk_adaptive(namespace),
            sk_prefix: keys::SK_ADAPTIVE_TARGET.to_owned(),
            consistent: true,
        }
    }

    /// Every target of a namespace.
    pub async fn read_all<S: Store>(store: &S, namespace: &str) -> Result<Vec<Target>, StoreError> {
        let items = store.query(&Target::query(namespace)).await?;
        Ok(items.iter().filter_map(Target::from_item).collect())
    }

    /// Deletes the target if it is still the generation read; one that has
    /// moved since is left to whoever moved it.
    pub async fn remove<S: Store>(&self, store: &S, namespace: &str) -> Result<(), StoreError> {
        let (pk, sk) = Target::key(namespace, &self.resource, &self.limit);
        let condition = Condition {
            expression: "#g = :g".to_owned(),
            names: [("#g".to_owned(), GENERATION.to_owned())].into(),
            values: [(":g".to_owned(), Attr::n(self.generation))].into(),
        };
        match store.delete(&pk, &sk, Some(&condition)).await {
            Ok(_) | Err(StoreError::ConditionFailed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn key(namespace: &str, resource: &str, limit: &str) -> (String, String) {
        (
            keys::pk_adaptive(namespace),
            keys::sk_adaptive_target(resource, limit),
        )
    }

    /// Reads a target item; `None` when it is not one.
    pub fn from_item(item: &Item) -> Option<Target> {
        let text = |name: &str| item.get(name).and_then(Attr::as_s).map(str::to_owned);
        let int = |name: &str| item.get(name).and_then(Attr::as_int);
        Some(Target {
            resource: text(RESOURCE)?,
            limit: text(LIMIT)?,
            factor: Factor::from_ppm(int(FACTOR_PPM)?),
            previous: Factor::from_ppm(int(PREVIOUS_PPM).unwrap_or(0)),
            set_at_ms: int(SET_AT).unwrap_or(0),
            generation: int(GENERATION)?,
            minute_ms: int(MINUTE).unwrap_or(0),
            stamped: int(STAMPED).unwrap_or(0),
            cursor: match item.get(CURSOR) {
                Some(Attr::M(key)) => Some(key.clone()),
                _ => None,
            },
            state: text(STATE),
            declared: text(DECLARED),
        })
    }

    /// The whole target, written over the one whose generation was read
    /// (`None`: there was none).
    pub fn write(&self, namespace: &str, read_generation: Option<i64>) -> Update {
        let (pk, sk) = Target::key(namespace, &self.resource, &self.limit);
        let mut update = UpdateBuilder::new();
        update
            .set(RESOURCE, Attr::s(&self.resource))
            .set(LIMIT, Attr::s(&self.limit))
            .set(FACTOR_PPM, Attr::n(self.factor.ppm()))
            .set(PREVIOUS_PPM, Attr::n(self.previous.ppm()))
            .set(SET_AT, Attr::n(self.set_at_ms))
            .set(GENERATION, Attr::n(self.generation))
            .set(MINUTE, Attr::n(self.minute_ms))
            .set(STAMPED, Attr::n(self.stamped));
        match &self.cursor {
            Some(cursor) => update.set(CURSOR, Attr::M(cursor.clone())),
            None => update.remove(CURSOR),
        };
        match &self.state {
            Some(state) => update.set(STATE, Attr::s(state)),
            None => update.remove(STATE),
        };
        match &self.declared {
            Some(declared) => update.set(DECLARED, Attr::s(declared)),
            None => update.remove(DECLARED),
        };
        let generation = update.name(GENERATION);
        let condition = match read_generation {
            None => format!("attribute_not_exists({})", Index::TABLE.pk),
            Some(read) => {
                let read = update.value(Attr::n(read));
                format!("{generation} = {read}")
            }
        };
        update.build(&pk, &sk, Some(condition))
    }

    /// The factor in force over `[from, to)`, time-weighted, and whether it
    /// changed inside it.
    pub fn in_force(&self, from_ms: i64, to_ms: i64) -> (f64, bool) {
        if self.set_at_ms <= from_ms || self.set_at_ms >= to_ms {
            let f = if self.set_at_ms >= to_ms {
                self.previous
            } else {
                self.factor
            };
            return (f.as_f64(), false);
        }
        let span = (to_ms - from_ms) as f64;
        let before = (self.set_at_ms - from_ms) as f64 / span;
        let mixed = before * self.previous.as_f64() + (1.0 - before) * self.factor.as_f64();
        (mixed, true)
    }
}

/// The namespace's tick record: when the controller last ticked, and when
/// it wrote its recent canaries (oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tick {
    pub ticked_at_ms: i64,
    pub canaries_at: Vec<i64>,
}

/// Canary writes remembered, oldest first.
pub const CANARIES_KEPT: usize = 5;
/// Canaries are written at most this often, however often the controller
/// is called: blindness is a matter of time, not of calls.
pub const CANARY_SPACING_MS: i64 = 30_000;
/// Blind: nothing written this long ago or earlier has come through (two
/// one-minute ticks).
pub const BLIND_AFTER_MS: i64 = 120_000;

impl Tick {
    /// The namespace's tick record; a default one when there is none.
    pub async fn read<S: Store>(
        store: &S,
        namespace: &str,
        consistent: bool,
    ) -> Result<Tick, StoreError> {
        let pk = keys::pk_adaptive(namespace);
        let item = store.get(&pk, keys::SK_ADAPTIVE_TICK, consistent).await?;
        Ok(Tick::from_item(item.as_ref()))
    }

    pub fn from_item(item: Option<&Item>) -> Tick {
        let Some(item) = item else {
            return Tick::default();
        };
        let canaries_at = match item.get(CANARIES_AT) {
            Some(Attr::L(list)) => list.iter().filter_map(Attr::as_int).collect(),
            _ => Vec::new(),
        };
        Tick {
            ticked_at_ms: item.get(TICKED_AT).and_then(Attr::as_int).unwrap_or(0),
            canaries_at,
        }
    }

    pub fn write(&self, namespace: &str) -> Update {
        let mut update = UpdateBuilder::new();
        update.set(TICKED_AT, Attr::n(self.ticked_at_ms)).set(
            CANARIES_AT,
            Attr::L(self.canaries_at.iter().map(Attr::n).collect()),
        );
        update.build(&keys::pk_adaptive(namespace), keys::SK_ADAPTIVE_TICK, None)
    }

    /// Blind: a canary was written two ticks ago or earlier, and the latest
    /// such has not come through.
    pub fn blind(&self, now_ms: i64, sensed_through: Option<i64>) -> bool {
        let due = self
            .canaries_at
            .iter()
            .rev()
            .find(|at| **at <= now_ms.saturating_sub(BLIND_AFTER_MS));
        due.is_some_and(|due| sensed_through.is_none_or(|sensed| sensed < *due))
    }

    /// Whether canaries are due at `now_ms`.
    pub fn canaries_due(&self, now_ms: i64) -> bool {
        self.canaries_at
            .last()
            .is_none_or(|last| now_ms.saturating_sub(*last) >= CANARY_SPACING_MS)
    }

    /// Records a tick at `now_ms`, and its canaries if they were written.
    pub fn ticked(&mut self, now_ms: i64, canaries: bool) {
        self.ticked_at_ms = now_ms;
        if canaries {
            self.canaries_at.push(now_ms);
            let excess = self.canaries_at.len().saturating_sub(CANARIES_KEPT);
            self.canaries_at.drain(..excess);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_round_trips_and_is_written_over_its_generation_only() {
        let mut t = Target::base("gpt-4", "tpm");
        t.factor = Factor::from_ppm(2_500_000);
        t.generation = 3;
        t.cursor = Some(Item::new());
        let update = t.write("ns", Some(2));
        assert_eq!(update.sk, "#TARGET#gpt-4#tpm");
        assert!(update.condition.as_deref().unwrap().contains('='));
        let first = Target::base("gpt-4", "tpm").write("ns", None);
        assert!(first.condition.unwrap().contains("attribute_not_exists"));
    }

    #[test]
    fn the_factor_in_force_is_weighted_over_a_straddled_minute() {
        let mut t = Target::base("r", "l");
        t.previous = Factor::ONE;
        t.factor = Factor::from_ppm(3_000_000);
        t.set_at_ms = 60_000 + 15_000;
        assert_eq!(t.in_force(60_000, 120_000), (2.5, true));
        assert_eq!(t.in_force(120_000, 180_000), (3.0, false));
        assert_eq!(t.in_force(0, 60_000), (1.0, false));
    }

    #[test]
    fn blind_once_a_canary_two_ticks_old_is_unsensed() {
        let mut tick = Tick::default();
        tick.ticked(1_000, true);
        assert!(!tick.blind(60_000, None), "one tick is not yet two");
        assert!(!tick.canaries_due(20_000) && tick.canaries_due(31_000));
        tick.ticked(61_000, true);
        assert!(tick.blind(121_000, None));
        assert!(tick.blind(121_000, Some(999)));
        assert!(!tick.blind(121_000, Some(1_000)));
        // Called again and again within a minute: still the same question.
        for now in [121_500, 122_000, 150_000] {
            tick.ticked(now, tick.canaries_due(now));
        }
        assert_eq!(tick.canaries_at, vec![1_000, 61_000, 121_500]);
        assert!(!tick.blind(150_000, Some(1_000)));
        assert!(tick.blind(181_000, Some(1_000)));
    }
}
