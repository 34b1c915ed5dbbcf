//! From a batch of stream records to the writes it calls for: one snapshot
//! update per (entity, resource, window) item, and one audit event per
//! soft-limit transition. Pure: no I/O, no clock.

use std::collections::BTreeMap;
use zae_table::bucket::WCU_LIMIT;
use zae_table::keys::{self, SK_STATE};
use zae_table::milli::{whole_token_delta, whole_tokens};
use zae_table::stream::{AttrError, EventName, RecordError};
use zae_table::{BucketImage, BucketKey, SequenceNumber, StreamRecord, Window};

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

/// All contributions of a batch to one snapshot item, per source bucket shard,
/// in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotUpdate {
    pub key: SnapshotKey,
    pub sources: BTreeMap<u32, Vec<Contribution>>,
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
    pub fn totals_after(&self, watermarks: &BTreeMap<u32, Option<SequenceNumber>>) -> Option<Totals> {
        let mut totals = Totals::default();
        let mut any = false;
        for (shard, contributions) in &self.sources {
            let mark = watermarks.get(shard).and_then(|m| m.as_ref());
            for c in contributions.iter().filter(|c| mark.is_none_or(|m| c.sequence > *m)) {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionKind {
    Overdrawn,
    Recovered,
}

impl TransitionKind {
    pub fn action(self) -> &'static str {
        match self {
            TransitionKind::Overdrawn => "limit_overdrawn",
            TransitionKind::Recovered => "limit_recovered",
        }
    }
    pub fn metric(self) -> &'static str {
        match self {
            TransitionKind::Overdrawn => "SoftLimitOverdrawn",
            TransitionKind::Recovered => "SoftLimitRecovered",
        }
    }
}

/// A soft limit crossing zero on one bucket shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub kind: TransitionKind,
    pub bucket: BucketKey,
    pub limit: String,
    pub sequence: SequenceNumber,
    pub at_ms: i64,
    /// Whole tokens, floored.
    pub balance: i64,
    pub capacity: Option<i64>,
    pub shard_count: Option<i64>,
}

/// Why a record was passed over. Each one is logged once and counted.
#[derive(Debug, thiserror::Error)]
pub enum SkipReason {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Key(#[from] keys::KeyError),
    #[error(transparent)]
    Attribute(#[from] AttrError),
    #[error("{0} record has no NewImage")]
    NoNewImage(&'static str),
    #[error("MODIFY record has no OldImage")]
    NoOldImage,
    #[error("record has neither ApproximateCreationDateTime nor rf")]
    NoTime,
    #[error(transparent)]
    Window(#[from] zae_table::window::WindowError),
}

#[derive(Debug)]
pub struct Skipped {
    pub index: usize,
    pub sequence: Option<SequenceNumber>,
    pub partition_key: Option<String>,
    pub reason: SkipReason,
}

#[derive(Debug, Default)]
pub struct BatchPlan {
    pub snapshots: Vec<SnapshotUpdate>,
    pub transitions: Vec<Transition>,
    pub skipped: Vec<Skipped>,
    /// Records that are not bucket changes (other items, removals): not errors.
    pub ignored: usize,
    pub bucket_records: usize,
}

/// What a single bucket record yields.
struct RecordYield {
    bucket: BucketKey,
    at_ms: i64,
    sequence: SequenceNumber,
    contribution: Option<Contribution>,
    transitions: Vec<Transition>,
}

/// Plans a batch. `records` is the raw JSON of each record, in stream order.
pub fn plan_batch<S: AsRef<str>>(records: &[S], windows: &[Window]) -> BatchPlan {
    let mut plan = BatchPlan::default();
    let mut updates: BTreeMap<SnapshotKey, BTreeMap<u32, Vec<Contribution>>> = BTreeMap::new();
    for (index, text) in records.iter().enumerate() {
        let record = match StreamRecord::parse(text.as_ref()) {
            Ok(r) => r,
            Err(e) => {
                plan.skipped.push(Skipped { index, sequence: None, partition_key: None, reason: e.into() });
                continue;
            }
        };
        match read_bucket_record(&record) {
            Ok(None) => plan.ignored += 1,
            Ok(Some(y)) => {
                plan.bucket_records += 1;
                plan.transitions.extend(y.transitions);
                if let Some(c) = y.contribution {
                    let keys: Result<Vec<_>, _> = windows
                        .iter()
                        .map(|w| {
                            w.key(y.at_ms).map(|window_key| SnapshotKey {
                                namespace: y.bucket.namespace.clone(),
                                entity: y.bucket.entity.clone(),
                                resource: y.bucket.resource.clone(),
                                window: *w,
                                window_key,
                            })
                        })
                        .collect();
                    match keys {
                        Ok(keys) => {
                            for key in keys {
                                updates.entry(key).or_default().entry(y.bucket.shard).or_default().push(c.clone());
                            }
                        }
                        Err(e) => plan.skipped.push(Skipped {
                            index,
                            sequence: Some(y.sequence.clone()),
                            partition_key: Some(y.bucket.pk()),
                            reason: e.into(),
                        }),
                    }
                }
            }
            Err(reason) => plan.skipped.push(Skipped {
                index,
                sequence: Some(record.sequence_number.clone()),
                partition_key: record.partition_key().map(str::to_owned),
                reason,
            }),
        }
    }
    plan.snapshots = updates.into_iter().map(|(key, sources)| SnapshotUpdate { key, sources }).collect();
    plan
}

/// `Ok(None)` for records that are not INSERT or MODIFY of a bucket item.
fn read_bucket_record(record: &StreamRecord<'_>) -> Result<Option<RecordYield>, SkipReason> {
    let kind = match record.event_name {
        EventName::Insert => "INSERT",
        EventName::Modify => "MODIFY",
        EventName::Remove | EventName::Other => return Ok(None),
    };
    if record.sort_key() != Some(SK_STATE) {
        return Ok(None);
    }
    let Some(pk) = record.partition_key() else { return Ok(None) };
    let bucket = BucketKey::parse(pk)?;
    let new_image = record.new_image.as_ref().ok_or(SkipReason::NoNewImage(kind))?;
    let old_image = match (record.event_name, record.old_image.as_ref()) {
        (EventName::Modify, None) => return Err(SkipReason::NoOldImage),
        (_, old) => old,
    };
    let new = BucketImage::read(new_image)?;
    let old = old_image.map(BucketImage::read).transpose()?.unwrap_or_default();
    let at_ms = match record.created_ms {
        Some(ms) => ms,
        None => new_image.int("rf")?.ok_or(SkipReason::NoTime)?,
    };

    let mut contribution = Contribution {
        sequence: record.sequence_number.clone(),
        counters: BTreeMap::new(),
        overdrawn: BTreeMap::new(),
        events: 0,
    };
    let mut transitions = Vec::new();
    for (&limit, now) in &new.limits {
        if limit == WCU_LIMIT {
            continue;
        }
        let before = old.limit(limit).copied().unwrap_or_default();
        if let Some(new_tc) = now.consumed {
            // A counter absent before starts at zero: the INSERT that creates a
            // bucket, or a limit seeded onto an existing one, carries its first debit.
            let old_tc = before.consumed.unwrap_or(0);
            if new_tc != old_tc {
                contribution.events += 1;
                *contribution.counters.entry(limit.to_owned()).or_default() +=
                    i128::from(whole_token_delta(old_tc, new_tc));
                if now.soft && new_tc > old_tc && now.balance.is_some_and(|b| b < 0) {
                    *contribution.overdrawn.entry(limit.to_owned()).or_default() += 1;
                }
            }
        }
        let Some(new_balance) = now.balance else { continue };
        let was_in_debt = before.balance.is_some_and(|b| b < 0);
        let kind = match (was_in_debt, new_balance < 0) {
            (false, true) if now.soft => TransitionKind::Overdrawn,
            // A limit made hard while in debt still closes its overdraw.
            (true, false) if now.soft || before.soft => TransitionKind::Recovered,
            _ => continue,
        };
        transitions.push(Transition {
            kind,
            bucket: bucket.clone(),
            limit: limit.to_owned(),
            sequence: record.sequence_number.clone(),
            at_ms,
            balance: whole_tokens(new_balance),
            capacity: now.capacity.map(whole_tokens),
            shard_count: new.shard_count,
        });
    }
    let contribution = (contribution.events > 0).then_some(contribution);
    Ok(Some(RecordYield { bucket, at_ms, sequence: record.sequence_number.clone(), contribution, transitions }))
}

#[cfg(test)]
mod tests;
