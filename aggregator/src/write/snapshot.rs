//! The snapshot write: one UpdateItem per snapshot item and batch, guarded
//! by the item's per-shard watermarks so that a record is counted once
//! however often it is delivered; on a conflict, the watermarks are read and
//! only the records newer than them are written again.

use super::{Aggregator, Done};
use crate::plan::{SnapshotUpdate, Totals};
use std::collections::BTreeMap;
use std::time::Instant;
use zae_table::keys::{self, Index};
use zae_table::snapshot::{
    ENTITY_ID, RESOURCE, TOTAL_EVENTS, TTL, WINDOW, WINDOW_START, overdrawn_attr, watermark_attr,
};
use zae_table::store::{Returns, Store, StoreError, Update};
use zae_table::{Attr, SequenceNumber};

/// At most this many read-and-rewrite rounds when a snapshot's watermark
/// keeps changing under the writer.
const CONFLICT_ROUNDS: usize = 5;

/// What the write must find before it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// First try: each source's watermark is absent or older than the first
    /// record of this batch, i.e. the item holds none of it.
    Fresh,
    /// After a conflict: each source's watermark is exactly what was read.
    Exactly(BTreeMap<u32, Option<SequenceNumber>>),
}

/// An update expression under construction: aliases, values and clauses.
#[derive(Default)]
struct Expression {
    names: BTreeMap<String, String>,
    values: BTreeMap<String, Attr>,
    set: Vec<String>,
    add: Vec<String>,
    conditions: Vec<String>,
}

impl Expression {
    fn bind(&mut self, alias: &str, attr: &str, value: Attr) {
        self.names.insert(format!("#{alias}"), attr.to_owned());
        self.values.insert(format!(":{alias}"), value);
    }

    /// The attributes the 0.17.0 reader and its indexes expect: keys always,
    /// the rest when the item is new.
    fn item_attributes(&mut self, update: &SnapshotUpdate, ttl_epoch_s: i64) {
        let key = &update.key;
        for (alias, attr, value) in [
            ("eid", ENTITY_ID, Attr::s(&key.entity)),
            (
                "g2pk",
                Index::GSI2.pk,
                Attr::s(keys::pk_resource(&key.namespace, &key.resource)),
            ),
            (
                "g2sk",
                Index::GSI2.sk,
                Attr::s(keys::gsi2_sk_usage(&key.window_key, &key.entity)),
            ),
        ] {
            self.bind(alias, attr, value);
            self.set.push(format!("#{alias} = :{alias}"));
        }
        for (alias, attr, value) in [
            ("res", RESOURCE, Attr::s(&key.resource)),
            ("win", WINDOW, Attr::s(key.window.name())),
            ("wst", WINDOW_START, Attr::s(&key.window_key)),
            ("g4pk", Index::GSI4.pk, Attr::s(&key.namespace)),
            ("g4sk", Index::GSI4.sk, Attr::s(key.pk())),
            ("ttl", TTL, Attr::n(ttl_epoch_s)),
        ] {
            self.bind(alias, attr, value);
            self.set
                .push(format!("#{alias} = if_not_exists(#{alias}, :{alias})"));
        }
    }

    /// Each contributing source shard's watermark moves to its last record,
    /// guarded. A source whose records the item already holds is left alone:
    /// its watermark may be ahead of this batch (another reader got further),
    /// and moving it back would let that reader's records count twice.
    fn watermarks(&mut self, update: &SnapshotUpdate, guard: &Guard) {
        let firsts = update.first_per_source();
        let latest = update
            .latest_per_source()
            .into_iter()
            .filter(|(shard, last)| match guard {
                Guard::Fresh => true,
                Guard::Exactly(read) => read
                    .get(shard)
                    .and_then(|m| m.as_ref())
                    .is_none_or(|mark| *last > mark),
            });
        for (i, (shard, last)) in latest.enumerate() {
            let alias = format!("#m{i}");
            self.names.insert(alias.clone(), watermark_attr(shard));
            self.values.insert(format!(":m{i}"), Attr::s(last.padded()));
            self.set.push(format!("{alias} = :m{i}"));
            let condition = match guard {
                Guard::Fresh => {
                    self.values
                        .insert(format!(":f{i}"), Attr::s(firsts[&shard].padded()));
                    format!("(attribute_not_exists({alias}) OR {alias} < :f{i})")
                }
                Guard::Exactly(read) => match read.get(&shard).and_then(|m| m.as_ref()) {
                    Some(mark) => {
                        self.values.insert(format!(":x{i}"), Attr::s(mark.padded()));
                        format!("{alias} = :x{i}")
                    }
                    None => format!("attribute_not_exists({alias})"),
                },
            };
            self.conditions.push(condition);
        }
    }

    fn counters(&mut self, totals: &Totals) {
        for (i, (limit, n)) in totals.counters.iter().enumerate() {
            self.bind(&format!("c{i}"), limit, Attr::n(n));
            self.add.push(format!("#c{i} :c{i}"));
        }
        for (i, (limit, n)) in totals.overdrawn.iter().enumerate() {
            self.bind(&format!("o{i}"), &overdrawn_attr(limit), Attr::n(n));
            self.add.push(format!("#o{i} :o{i}"));
        }
        self.bind("te", TOTAL_EVENTS, Attr::n(totals.events));
        self.add.push("#te :te".into());
    }
}

/// The UpdateItem that adds `totals` to the snapshot item of `update`.
pub fn snapshot_write(
    update: &SnapshotUpdate,
    totals: &Totals,
    guard: &Guard,
    ttl_epoch_s: i64,
) -> Update {
    let mut expression = Expression::default();
    expression.item_attributes(update, ttl_epoch_s);
    expression.watermarks(update, guard);
    expression.counters(totals);
    Update {
        pk: update.key.pk(),
        sk: update.key.sk(),
        expression: format!(
            "SET {} ADD {}",
            expression.set.join(", "),
            expression.add.join(", ")
        ),
        condition: Some(expression.conditions.join(" AND ")),
        names: expression.names,
        values: expression.values,
    }
}

impl<S: Store> Aggregator<S> {
    pub(super) async fn write_snapshot(
        &self,
        update: &SnapshotUpdate,
        ttl: i64,
        deadline: Option<Instant>,
    ) -> Result<Done, StoreError> {
        let mut guard = Guard::Fresh;
        for round in 0..CONFLICT_ROUNDS {
            // A round after a conflict starts only while there is time for it.
            if round > 0 && super::retry::past(deadline) {
                return Err(StoreError::Retryable {
                    operation: "UpdateItem",
                    key: format!("{} {}", update.key.pk(), update.key.sk()),
                    message: "watermarks changed under the writer and the deadline came".into(),
                });
            }
            let totals = match &guard {
                Guard::Fresh => update.totals_after(&BTreeMap::new()),
                Guard::Exactly(marks) => update.totals_after(marks),
            };
            let Some(totals) = totals else {
                return Ok(Done::SnapshotAlreadyApplied);
            };
            let write = snapshot_write(update, &totals, &guard, ttl);
            match self
                .retrying(deadline, || self.store.update(&write, Returns::Nothing))
                .await
            {
                Ok(_) => return Ok(Done::SnapshotWritten),
                Err(StoreError::ConditionFailed { .. }) => {
                    guard = Guard::Exactly(self.read_watermarks(update, deadline).await?);
                }
                // Redelivery cannot help a request DynamoDB refuses: the item is
                // skipped, so the shard moves on and every other item is written.
                Err(e @ StoreError::Rejected { .. }) => {
                    tracing::error!(error = %e, "snapshot write rejected; this item's usage is skipped");
                    return Ok(Done::SnapshotRejected);
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Fatal {
            operation: "UpdateItem",
            key: format!("{} {}", update.key.pk(), update.key.sk()),
            message: format!(
                "watermarks changed under {CONFLICT_ROUNDS} rounds of read and rewrite"
            ),
        })
    }

    /// A consistent read of the item's watermarks for this update's sources.
    async fn read_watermarks(
        &self,
        update: &SnapshotUpdate,
        deadline: Option<Instant>,
    ) -> Result<BTreeMap<u32, Option<SequenceNumber>>, StoreError> {
        let (pk, sk) = (update.key.pk(), update.key.sk());
        let attrs: Vec<String> = update.sources.keys().map(|s| watermark_attr(*s)).collect();
        let read = self
            .retrying(deadline, || {
                self.store.get_attributes(&pk, &sk, true, &attrs)
            })
            .await?
            .unwrap_or_default();
        update
            .sources
            .keys()
            .map(|shard| {
                let attr = watermark_attr(*shard);
                // A watermark is a string; anything else was never ours.
                match read.get(&attr).and_then(Attr::as_s) {
                    None => Ok((*shard, None)),
                    Some(text) => SequenceNumber::from_padded(text)
                        .map(|m| (*shard, Some(m)))
                        .ok_or_else(|| StoreError::Fatal {
                            operation: "GetItem",
                            key: format!("{pk} {sk}"),
                            message: format!(
                                "watermark `{attr}` holds `{text}`, not a padded sequence number"
                            ),
                        }),
                }
            })
            .collect()
    }
}
