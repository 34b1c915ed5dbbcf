//! What a batch adds to each usage-snapshot item: per record and source
//! bucket shard, so that a write can apply exactly the records its item
//! does not hold yet.

use std::collections::BTreeMap;
use std::sync::Arc;
use zae_table::{SequenceNumber, Window, keys};

/// Which snapshot item a contribution lands in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotKey {
    pub namespace: String,
    pub entity: String,
    pub resource: String,
    pub window: Window,
    pub window_key: String,
}

impl SnapshotKey {
    pub fn pk(&self) -> String {
        keys::pk_entity(&self.namespace, &self.entity)
    }
    pub fn sk(&self) -> String {
        keys::sk_usage(&self.resource, self.window, &self.window_key)
    }
}

/// What one record adds to one snapshot item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contribution {
    pub sequence: SequenceNumber,
    /// Whole tokens per limit, for each limit whose counter moved.
    pub counters: BTreeMap<String, i128>,
    /// Records (x limits) that left a soft limit in debt, per limit.
    pub overdrawn: BTreeMap<String, i128>,
    /// The reference's `total_events`: one per limit whose counter moved.
    pub events: i128,
}

/// Contributions per source bucket shard, in stream order; each is shared
/// with the same record's other windows.
pub type Sources = BTreeMap<u32, Vec<Arc<Contribution>>>;

/// All contributions of a batch to one snapshot item, per source bucket shard,
/// in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotUpdate {
    pub key: SnapshotKey,
    pub sources: Sources,
}

/// Sums of the contributions a write still has to apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub counters: BTreeMap<String, i128>,
    pub overdrawn: BTreeMap<String, i128>,
    pub events: i128,
}

impl SnapshotUpdate {
    /// The earliest record that feeds this item: what Lambda must redeliver
    /// from if the write fails.
    pub fn earliest(&self) -> &SequenceNumber {
        self.sources
            .values()
            .filter_map(|c| c.first())
            .map(|c| &c.sequence)
            .min()
            .expect("an update always has a contribution")
    }

    /// The last record per source shard: the watermark a write leaves behind.
    pub fn latest_per_source(&self) -> BTreeMap<u32, &SequenceNumber> {
        self.sources
            .iter()
            .filter_map(|(shard, c)| c.last().map(|c| (*shard, &c.sequence)))
            .collect()
    }

    /// The first record per source shard: an item whose watermark is below it
    /// holds none of this batch.
    pub fn first_per_source(&self) -> BTreeMap<u32, &SequenceNumber> {
        self.sources
            .iter()
            .filter_map(|(shard, c)| c.first().map(|c| (*shard, &c.sequence)))
            .collect()
    }

    /// Sums the contributions newer than each source's watermark (all of them
    /// where a source has none). `None` when nothing is left to apply.
    pub fn totals_after(
        &self,
        watermarks: &BTreeMap<u32, Option<SequenceNumber>>,
    ) -> Option<Totals> {
        let mut totals = Totals::default();
        let mut any = false;
        for (shard, contributions) in &self.sources {
            let mark = watermarks.get(shard).and_then(|m| m.as_ref());
            for c in contributions
                .iter()
                .filter(|c| mark.is_none_or(|m| c.sequence > *m))
            {
                any = true;
                totals.events += c.events;
                for (limit, n) in &c.counters {
                    *totals.counters.entry(limit.clone()).or_default() += n;
                }
                for (limit, n) in &c.overdrawn {
                    *totals.overdrawn.entry(limit.clone()).or_default() += n;
                }
            }
        }
        any.then_some(totals)
    }
}
