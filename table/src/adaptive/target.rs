//! The controller's record of one (resource, limit): the target factor,
//! where its stamping pass is, and the last moves (`{ns}/ADAPTIVE#`,
//! `#TARGET#{resource}#{limit}`).
//!
//! A target's `generation` rises with every change of its factor or of what
//! the declaration says of it; writes of a target are conditional on the
//! generation read, so two writers never interleave, and every bucket stamp
//! carries the generation it came from. The pass over buckets is a lap of
//! the resource's index: it records the generation whose lap finished
//! (`stamped`), where the running lap goes on (`cursor`), where it began
//! (`lap_start`: a move during a lap goes on from where the lap is and comes
//! round to it, so that every bucket gets the newest factor within one lap
//! of the last move), whether it has come round past the index's end
//! (`wrapped`), and the buckets whose stamps kept losing (`owed`).

use super::allocation::Allocated;
use super::factor::Factor;
use super::generation;
use crate::keys::{self, Index};
use crate::store::{Condition, Query, Store, StoreError, Update, UpdateBuilder};
use crate::value::{Attr, Item};

pub const RESOURCE: &str = "resource";
pub const LIMIT: &str = "limit";
pub const FACTOR_PPM: &str = "factor_ppm";
pub const PREVIOUS_PPM: &str = "previous_ppm";
pub const GENERATION: &str = "generation";
pub const SET_AT: &str = "set_at";
/// When a controller last ticked the target (its clock).
pub const TICKED_AT: &str = "ticked_at";
pub const MINUTE: &str = "minute";
pub const STAMPED: &str = "stamped";
pub const CURSOR: &str = "cursor";
pub const STATE: &str = "state";
pub const LAP_START: &str = "lap_start";
pub const WRAPPED: &str = "wrapped";
pub const OWED: &str = "owed";
pub const OWED_OVERFLOW: &str = "owed_overflow";
pub const HISTORY: &str = "history";
/// The declaration's fingerprint for this target: a new one re-stamps.
pub const DECLARED: &str = "declared";
/// Under `share: demand`, what the last tick's share was (JSON): the
/// capacity to share, what others used, what was left, `lambda`.
pub const SHARED: &str = "shared";
/// Buckets owed a stamp that are remembered by key; past this, the lap
/// starts over once it is through.
pub const OWED_KEPT: usize = 256;
/// Moves kept in a target's history.
pub const HISTORY_KEPT: usize = 100;

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
    /// When a controller last ticked it (`None`: written by an earlier
    /// build). A target that stops being ticked (its namespace left the
    /// registry, or its ticks keep failing) is stopped for the repair.
    pub ticked_at_ms: Option<i64>,
    /// The generation whose stamping pass finished.
    pub stamped: i64,
    /// Where the running lap goes on: the index's start key after the last
    /// page it finished (`None`: the index's beginning).
    pub cursor: Option<Item>,
    /// Where the running lap began (`None`: the index's beginning).
    pub lap_start: Option<Item>,
    /// The running lap went past the index's end and started over from its
    /// beginning, towards `lap_start`.
    pub wrapped: bool,
    /// Buckets (partition keys) the lap could not stamp, at most `OWED_KEPT`.
    pub owed: Vec<String>,
    /// More could not be stamped than are kept: the lap starts over.
    pub owed_overflow: bool,
    /// The last moves, oldest first.
    pub history: Vec<Move>,
    /// The controller's estimator, opaque to everything else.
    pub state: Option<String>,
    /// What the declaration said about this target when it was last stamped.
    pub declared: Option<String>,
    /// Under `share: demand`, the last tick's share (JSON), for `explain`.
    pub shared: Option<String>,
}

/// One move of a target's factor.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Move {
    pub at_ms: i64,
    pub from: Factor,
    pub to: Factor,
    /// Why (the estimator's reason, or `reset`, `declared`).
    pub reason: String,
    /// The complete minute behind it (its start), 0 for none.
    pub minute_ms: i64,
}

impl Move {
    fn attr(&self) -> Attr {
        Attr::M(
            [
                ("at", Attr::n(self.at_ms)),
                ("from", Attr::n(self.from.ppm())),
                ("to", Attr::n(self.to.ppm())),
                ("reason", Attr::s(&self.reason)),
                ("minute", Attr::n(self.minute_ms)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        )
    }

    fn from_attr(attr: &Attr) -> Option<Move> {
        let Attr::M(map) = attr else { return None };
        let int = |k: &str| map.get(k).and_then(Attr::as_int);
        Some(Move {
            at_ms: int("at")?,
            from: Factor::from_ppm(int("from")?),
            to: Factor::from_ppm(int("to")?),
            reason: map.get("reason")?.as_s()?.to_owned(),
            minute_ms: int("minute").unwrap_or(0),
        })
    }
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
            ticked_at_ms: None,
            stamped: 0,
            cursor: None,
            lap_start: None,
            wrapped: false,
            owed: Vec::new(),
            owed_overflow: false,
            history: Vec::new(),
            state: None,
            declared: None,
            shared: None,
        }
    }

    /// Moves the factor to `to` under the new `generation` (from
    /// [`Target::fresh`]), with why; a lap under way goes on from where it
    /// is, round to there.
    pub fn moved(&mut self, to: Factor, at_ms: i64, reason: &str, minute_ms: i64, generation: i64) {
        self.history.push(Move {
            at_ms,
            from: self.factor,
            to,
            reason: reason.to_owned(),
            minute_ms,
        });
        let excess = self.history.len().saturating_sub(HISTORY_KEPT);
        self.history.drain(..excess);
        self.previous = self.factor;
        self.factor = to;
        self.set_at_ms = at_ms;
        self.restamp(generation);
    }

    /// The new `generation` (from [`Target::fresh`]), whose buckets all need
    /// stamping again: the running lap, if any, goes on from where it is
    /// and comes round to there.
    pub fn restamp(&mut self, generation: i64) {
        let running = self.stamped < self.generation;
        self.generation = generation;
        if running {
            self.lap_start = self.cursor.clone();
        } else {
            self.cursor = None;
            self.lap_start = None;
        }
        self.wrapped = false;
    }

    /// A new generation for this target from its namespace's counter:
    /// above its own and every one taken before, whatever any clock says.
    pub async fn fresh<S: Store>(
        &self,
        store: &S,
        namespace: &str,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        self.fresh_above(store, namespace, 0, now_ms).await
    }

    /// [`Target::fresh`], and at least `above` (one above the generations
    /// of records the caller read, such as the allocations).
    pub async fn fresh_above<S: Store>(
        &self,
        store: &S,
        namespace: &str,
        above: i64,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let floor = self.generation.saturating_add(1).max(above);
        generation::take(store, namespace, 1, floor, now_ms).await
    }

    /// `restamp` under a new generation above every one the target's demand
    /// share raised an entity under (an earlier build's, off a clock,
    /// included): the lap then reaches their buckets too.
    pub async fn restamp_above_raises<S: Store>(
        &mut self,
        store: &S,
        namespace: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let above = Allocated::above_all(store, namespace, &self.resource, &self.limit).await?;
        let generation = self.fresh_above(store, namespace, above, now_ms).await?;
        self.restamp(generation);
        Ok(())
    }

    /// The lap reached its end with nothing owed: every bucket carries this
    /// generation.
    pub fn lap_done(&mut self) {
        self.stamped = self.generation;
        self.cursor = None;
        self.lap_start = None;
        self.wrapped = false;
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
            ticked_at_ms: int(TICKED_AT),
            stamped: int(STAMPED).unwrap_or(0),
            cursor: key_at(item, CURSOR),
            lap_start: key_at(item, LAP_START),
            wrapped: matches!(item.get(WRAPPED), Some(Attr::Bool(true))),
            owed: match item.get(OWED) {
                Some(Attr::L(list)) => list
                    .iter()
                    .filter_map(|a| a.as_s().map(str::to_owned))
                    .collect(),
                _ => Vec::new(),
            },
            owed_overflow: matches!(item.get(OWED_OVERFLOW), Some(Attr::Bool(true))),
            history: match item.get(HISTORY) {
                Some(Attr::L(list)) => list.iter().filter_map(Move::from_attr).collect(),
                _ => Vec::new(),
            },
            state: text(STATE),
            declared: text(DECLARED),
            shared: text(SHARED),
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
        if let Some(at) = self.ticked_at_ms {
            update.set(TICKED_AT, Attr::n(at));
        }
        for (name, key) in [(CURSOR, &self.cursor), (LAP_START, &self.lap_start)] {
            match key {
                Some(key) => update.set(name, Attr::M(key.clone())),
                None => update.remove(name),
            };
        }
        update.set(WRAPPED, Attr::Bool(self.wrapped));
        update
            .set(OWED, Attr::L(self.owed.iter().map(Attr::s).collect()))
            .set(OWED_OVERFLOW, Attr::Bool(self.owed_overflow))
            .set(
                HISTORY,
                Attr::L(self.history.iter().map(Move::attr).collect()),
            );
        match &self.state {
            Some(state) => update.set(STATE, Attr::s(state)),
            None => update.remove(STATE),
        };
        for (name, text) in [(DECLARED, &self.declared), (SHARED, &self.shared)] {
            match text {
                Some(text) => update.set(name, Attr::s(text)),
                None => update.remove(name),
            };
        }
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

/// A start key stored on the target.
fn key_at(item: &Item, name: &str) -> Option<Item> {
    match item.get(name) {
        Some(Attr::M(key)) => Some(key.clone()),
        _ => None,
    }
}

/// The target is still at `generation`.
pub fn generation_is(generation: i64) -> Condition {
    Condition {
        expression: "#g = :g".to_owned(),
        names: [("#g".to_owned(), GENERATION.to_owned())].into(),
        values: [(":g".to_owned(), Attr::n(generation))].into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_round_trips_and_is_written_over_its_generation_only() {
        let mut t = Target::base("gpt-4", "tpm");
        t.generation = 2;
        t.moved(Factor::from_ppm(2_500_000), 9_000, "raise", 0, 3);
        t.cursor = Some(Item::from([("PK".to_owned(), Attr::s("x"))]));
        t.owed = vec!["ns/BUCKET#e#gpt-4#0".into()];
        t.owed_overflow = true;
        let update = t.write("ns", Some(2));
        assert_eq!(update.sk, "#TARGET#gpt-4#tpm");
        assert!(update.condition.as_deref().unwrap().contains('='));
        let item: Item = update
            .names
            .values()
            .filter_map(|name| Some((name.clone(), update.assigned(name)?.clone())))
            .collect();
        assert_eq!(Target::from_item(&item), Some(t));
        let first = Target::base("gpt-4", "tpm").write("ns", None);
        assert!(first.condition.unwrap().contains("attribute_not_exists"));
    }

    #[test]
    fn a_move_during_a_lap_goes_on_from_where_the_lap_is_and_the_history_keeps_a_hundred() {
        let mut t = Target::base("r", "l");
        let at = |k: &str| Some(Item::from([("GSI2SK".to_owned(), Attr::s(k))]));
        t.moved(Factor::from_ppm(2_000_000), 1, "raise", 0, 1);
        assert_eq!(
            (t.generation, t.cursor.clone(), t.lap_start.clone()),
            (1, None, None)
        );
        t.cursor = at("BUCKET#m#0");
        t.moved(Factor::ONE, 2, "surge", 0, 2);
        assert_eq!((t.generation, t.lap_start.clone()), (2, at("BUCKET#m#0")));
        assert_eq!(
            t.cursor,
            at("BUCKET#m#0"),
            "the lap goes on from where it was"
        );
        t.lap_done();
        t.moved(Factor::from_ppm(3_000_000), 3, "raise", 0, 3);
        assert_eq!((t.cursor.clone(), t.lap_start.clone()), (None, None));
        for k in 0..150 {
            t.moved(Factor::from_ppm(1_000_000 + k), 10 + k, "raise", 0, 4 + k);
        }
        assert_eq!(t.history.len(), HISTORY_KEPT);
        assert_eq!(t.history.last().unwrap().at_ms, 159);
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
}
