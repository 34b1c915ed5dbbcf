//! From a batch of stream records to the writes it calls for: one snapshot
//! update per (entity, resource, window) item ([`snapshot`]), and one audit
//! event per soft-limit transition ([`overdraw`]). Pure: no I/O, no clock.

pub mod overdraw;
pub mod refill;
pub mod shard;
pub mod snapshot;
pub mod utilization;

pub use overdraw::{Transition, TransitionKind};
pub use snapshot::{Contribution, SnapshotKey, SnapshotUpdate, Sources, Totals};

use overdraw::transitions;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use zae_table::adaptive;
use zae_table::archive;
use zae_table::bucket::{CASCADE, PARENT_ID, REFILLED_AT};
use zae_table::keys::{self, SK_STATE};
use zae_table::milli::whole_token_delta;
use zae_table::names::WCU_LIMIT;
use zae_table::snapshot::collides;
use zae_table::stream::{AttrError, EventName, RecordError};
use zae_table::{BucketImage, BucketKey, SequenceNumber, StreamRecord, Window};

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
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
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
    /// (bucket partition key, limit) whose counter is left out of the
    /// snapshots because the limit's name is a snapshot attribute.
    pub counters_left_out: BTreeSet<(String, String)>,
    /// The buckets the batch touched, for the refill pass.
    pub buckets: Vec<Activity>,
    /// Shard counts raised on a shard 0, in record order.
    pub raises: Vec<shard::Raise>,
    /// Audit items removed from the table (expired or deleted), for the archive.
    pub removed_audit: Vec<(SequenceNumber, archive::Archived)>,
    /// Removals with an `#AUDIT#` sort key that are not the table's own
    /// audit items (`ArchiveSkipped`): their keys and why.
    pub archive_skipped: Vec<ArchiveSkip>,
    /// Admitted consumption per bucket, limit and minute, for the adaptive sensor.
    pub sensed: Vec<utilization::Sensed>,
    /// The adaptive controller's canaries that came through.
    pub canaries: Vec<utilization::Canary>,
}

/// An audit removal left out of the archive, logged with its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSkip {
    pub sequence: SequenceNumber,
    pub key: String,
    pub reason: String,
    /// The audit events it held.
    pub events: usize,
}

/// One bucket the batch touched: where its latest image is, and the net
/// consumption per limit (millitokens) over the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    pub pk: String,
    pub shard: u32,
    pub last_record: usize,
    pub consumed: BTreeMap<String, i64>,
}

/// What a single bucket record yields.
struct RecordYield {
    at_ms: i64,
    /// Net consumption per limit, `wcu` included, millitokens.
    consumed: Vec<(String, i64)>,
    /// The shard count this record raised, as (from, to).
    raised: Option<(i64, i64)>,
    /// The parent the bucket's requests are also debited to (its cascade stamp).
    cascades_to: Option<String>,
    /// What the new image says of each limit that admitted a request, for
    /// the demand-aware share.
    readings: Vec<(String, adaptive::demand::Reading)>,
    contribution: Option<Contribution>,
    transitions: Vec<Transition>,
    /// Limits whose counter moved but has no place in the snapshot.
    left_out: Vec<String>,
}

/// The snapshot items of a batch, grouped without building their key strings:
/// by (entity-resource item, window, window start), each item's strings being
/// made once at the end.
#[derive(Default)]
struct Grouping {
    /// (namespace, entity, resource), by first appearance.
    items: Vec<BucketKey>,
    /// Parsed bucket keys by partition key, with the index of their item.
    buckets: HashMap<String, (usize, BucketKey)>,
    /// Per group: the window key, made when the group is first seen, and the sources.
    updates: BTreeMap<(usize, Window, i64), (String, Sources)>,
    /// Index into the plan's buckets, by partition key.
    activity: HashMap<String, usize>,
}

/// Records a bucket record's consumption and position.
fn activity(
    buckets: &mut Vec<Activity>,
    seen: &mut HashMap<String, usize>,
    (pk, shard): (&str, u32),
    index: usize,
    consumed: &[(String, i64)],
) {
    let at = *seen.entry(pk.to_owned()).or_insert_with(|| {
        buckets.push(Activity {
            pk: pk.to_owned(),
            shard,
            last_record: index,
            consumed: BTreeMap::new(),
        });
        buckets.len() - 1
    });
    let bucket = &mut buckets[at];
    bucket.last_record = index;
    for (limit, delta) in consumed {
        let sum = bucket.consumed.entry(limit.clone()).or_default();
        *sum = sum.saturating_add(*delta);
    }
}

impl Grouping {
    fn bucket(&mut self, pk: &str) -> Result<(usize, &BucketKey), keys::KeyError> {
        if !self.buckets.contains_key(pk) {
            let key = BucketKey::parse(pk)?;
            // Beyond the client's caps, a derived key may pass DynamoDB's
            // limits: skipped and counted, never written from.
            key.check_client_caps()?;
            let item = match self.items.iter().position(|i| {
                (&i.namespace, &i.entity, &i.resource)
                    == (&key.namespace, &key.entity, &key.resource)
            }) {
                Some(item) => item,
                None => {
                    self.items.push(key.clone());
                    self.items.len() - 1
                }
            };
            self.buckets.insert(pk.to_owned(), (item, key));
        }
        let (item, key) = &self.buckets[pk];
        Ok((*item, key))
    }

    /// Adds a contribution to every window of a record, or to none if one of
    /// its windows has no key.
    fn add(
        &mut self,
        item: usize,
        shard: u32,
        at_ms: i64,
        windows: &[Window],
        c: Contribution,
    ) -> Result<(), SkipReason> {
        let mut groups = Vec::with_capacity(windows.len());
        for window in windows {
            let start = window.start(at_ms)?;
            if let Entry::Vacant(e) = self.updates.entry((item, *window, start)) {
                let key = window.key(start)?;
                e.insert((key, BTreeMap::new()));
            }
            groups.push((item, *window, start));
        }
        let c = Arc::new(c);
        for group in groups {
            let (_, sources) = self.updates.get_mut(&group).expect("inserted above");
            sources.entry(shard).or_default().push(Arc::clone(&c));
        }
        Ok(())
    }

    fn into_updates(self) -> Vec<SnapshotUpdate> {
        let items = self.items;
        self.updates
            .into_iter()
            .map(|((item, window, _), (window_key, sources))| {
                let item = &items[item];
                SnapshotUpdate {
                    key: SnapshotKey {
                        namespace: item.namespace.clone(),
                        entity: item.entity.clone(),
                        resource: item.resource.clone(),
                        window,
                        window_key,
                    },
                    sources,
                }
            })
            .collect()
    }
}

/// Plans a batch. `records` is the raw JSON of each record, in stream order.
pub fn plan_batch<S: AsRef<str>>(records: &[S], windows: &[Window]) -> BatchPlan {
    let mut planner = Planner {
        windows,
        plan: BatchPlan::default(),
        grouping: Grouping::default(),
        sensor: utilization::Sensor::default(),
    };
    for (index, text) in records.iter().enumerate() {
        planner.record(index, text.as_ref());
    }
    let Planner {
        mut plan,
        grouping,
        sensor,
        ..
    } = planner;
    plan.snapshots = grouping.into_updates();
    plan.sensed = sensor.into_sensed();
    plan
}

/// A batch's plan as its records are read one by one.
struct Planner<'w> {
    windows: &'w [Window],
    plan: BatchPlan,
    grouping: Grouping,
    sensor: utilization::Sensor,
}

/// What a parsed record is, by its event and key.
enum RecordKind<'r> {
    AuditRemoval,
    Canary((i64, u32)),
    Bucket(&'r str),
    /// Other items, removals, and earlier controllers' canaries: not errors.
    Ignored,
}

fn kind<'r>(record: &'r StreamRecord<'_>) -> RecordKind<'r> {
    if archive::is_audit_removal(record) {
        return RecordKind::AuditRemoval;
    }
    let is_bucket_change = matches!(record.event_name, EventName::Insert | EventName::Modify)
        && record.sort_key() == Some(SK_STATE);
    let pk = record.partition_key().filter(|_| is_bucket_change);
    if let Some(canary) = pk.and_then(keys::parse_canary) {
        return RecordKind::Canary(canary);
    }
    // A canary of an earlier controller's, per namespace: nothing waits for it.
    if record.partition_key().is_some_and(keys::is_legacy_canary) {
        return RecordKind::Ignored;
    }
    pk.map_or(RecordKind::Ignored, RecordKind::Bucket)
}

impl Planner<'_> {
    /// Plans one record, or counts it skipped or ignored.
    fn record(&mut self, index: usize, text: &str) {
        let record = match StreamRecord::parse(text) {
            Ok(r) => r,
            Err(e) => {
                self.plan.skipped.push(Skipped {
                    index,
                    sequence: None,
                    partition_key: None,
                    reason: e.into(),
                });
                return;
            }
        };
        let planned = match kind(&record) {
            RecordKind::AuditRemoval => self.audit_removal(&record, text),
            RecordKind::Canary(canary) => read_canary(&record, canary).map(|c| {
                self.plan.canaries.push(c);
            }),
            RecordKind::Bucket(pk) => self.bucket_record(index, &record, pk),
            RecordKind::Ignored => {
                self.plan.ignored += 1;
                Ok(())
            }
        };
        if let Err(reason) = planned {
            self.plan.skipped.push(Skipped {
                index,
                sequence: Some(record.sequence_number.clone()),
                partition_key: record.partition_key().map(str::to_owned),
                reason,
            });
        }
    }

    /// A removed audit item: an archive line, or an archive skip when its
    /// key is not the table's own audit key.
    fn audit_removal(&mut self, record: &StreamRecord<'_>, text: &str) -> Result<(), SkipReason> {
        let archived = serde_json::from_str(text)
            .map_err(RecordError::from)
            .map_err(SkipReason::from)
            .and_then(|raw| archive::archived(record, &raw).map_err(SkipReason::from));
        match archived {
            Ok(a) => self
                .plan
                .removed_audit
                .push((record.sequence_number.clone(), a)),
            Err(SkipReason::Archive(e @ archive::ArchiveError::NotAuditKey(..))) => {
                self.plan.archive_skipped.push(ArchiveSkip {
                    sequence: record.sequence_number.clone(),
                    key: record.partition_key().unwrap_or_default().to_owned(),
                    reason: e.to_string(),
                    events: 1,
                })
            }
            Err(reason) => return Err(reason),
        }
        Ok(())
    }

    /// An INSERT or MODIFY of the bucket `pk`: its snapshot contribution,
    /// then what the sensor, the shard propagation and the refill pass take
    /// from it. Nothing is planned from a record skipped.
    fn bucket_record(
        &mut self,
        index: usize,
        record: &StreamRecord<'_>,
        pk: &str,
    ) -> Result<(), SkipReason> {
        let (item, bucket) = self.grouping.bucket(pk)?;
        let shard = bucket.shard;
        let y = read_bucket_record(record, bucket)?;
        if let Some(contribution) = y.contribution {
            self.grouping
                .add(item, shard, y.at_ms, self.windows, contribution)?;
        }
        let plan = &mut self.plan;
        plan.bucket_records += 1;
        let key = &self.grouping.buckets[pk].1;
        self.sensor.record(
            key,
            y.cascades_to.as_deref(),
            y.at_ms,
            (&y.consumed, &y.readings),
            &record.sequence_number,
        );
        if let Some((from, to)) = y.raised.filter(|_| shard == 0) {
            plan.raises.push(shard::Raise {
                key: key.clone(),
                from,
                to,
                sequence: record.sequence_number.clone(),
            });
        }
        activity(
            &mut plan.buckets,
            &mut self.grouping.activity,
            (pk, shard),
            index,
            &y.consumed,
        );
        plan.transitions.extend(y.transitions);
        plan.counters_left_out
            .extend(y.left_out.into_iter().map(|limit| (pk.to_owned(), limit)));
        Ok(())
    }
}

/// Reads a canary record: its tick and index are in its key, and its tick
/// again in its image.
fn read_canary(
    record: &StreamRecord<'_>,
    (tick_ms, index): (i64, u32),
) -> Result<utilization::Canary, SkipReason> {
    let image = record.new_image().ok_or(SkipReason::NoNewImage("canary"))?;
    let written_at_ms = image
        .int(adaptive::canary::WRITTEN_AT)?
        .ok_or_else(|| AttrError::Missing(adaptive::canary::WRITTEN_AT.into()))?;
    if written_at_ms != tick_ms {
        return Err(AttrError::WrongType(
            adaptive::canary::WRITTEN_AT.into(),
            "the tick of its key",
        )
        .into());
    }
    Ok(utilization::Canary {
        tick_ms,
        index,
        sequence: record.sequence_number.clone(),
    })
}

/// Reads an INSERT or MODIFY of the bucket item `bucket`.
fn read_bucket_record(
    record: &StreamRecord<'_>,
    bucket: &BucketKey,
) -> Result<RecordYield, SkipReason> {
    let kind = if record.event_name == EventName::Insert {
        "INSERT"
    } else {
        "MODIFY"
    };
    let new_image = record.new_image().ok_or(SkipReason::NoNewImage(kind))?;
    let old_image = match (record.event_name, record.old_image()) {
        (EventName::Modify, None) => return Err(SkipReason::NoOldImage),
        (_, old) => old,
    };
    let new = BucketImage::read(new_image)?;
    let old = old_image
        .map(BucketImage::read)
        .transpose()?
        .unwrap_or_default();
    let at_ms = match record.created_ms {
        Some(ms) => ms,
        None => new_image.int(REFILLED_AT)?.ok_or(SkipReason::NoTime)?,
    };
    let counted = count(&record.sequence_number, &old, &new);
    let transitions = transitions(bucket, &record.sequence_number, at_ms, &old, &new);
    let readings = counted
        .consumed
        .iter()
        .filter(|(limit, delta)| *delta > 0 && limit != WCU_LIMIT)
        .filter_map(|(limit, delta)| {
            let reading = adaptive::demand::read(&new, limit, at_ms, *delta)?;
            Some((limit.clone(), reading))
        })
        .collect();
    let raised = match (record.event_name, old.shard_count, new.shard_count) {
        (EventName::Modify, Some(from), Some(to)) if to > from => Some((from, to)),
        _ => None,
    };
    Ok(RecordYield {
        at_ms,
        consumed: counted.consumed,
        raised,
        cascades_to: cascade_parent(new_image),
        readings,
        contribution: counted.contribution,
        transitions,
        left_out: counted.left_out,
    })
}

/// What a bucket record's counters say, from the old image to the new one.
struct Counted {
    /// Net consumption per limit, `wcu` included, millitokens.
    consumed: Vec<(String, i64)>,
    /// The snapshot counters and overdraws, when any counter moved.
    contribution: Option<Contribution>,
    /// Limits whose counter moved but has no place in the snapshot.
    left_out: Vec<String>,
}

/// Each limit's consumption and snapshot contribution between two images.
fn count(sequence: &SequenceNumber, old: &BucketImage<'_>, new: &BucketImage<'_>) -> Counted {
    let mut contribution = Contribution {
        sequence: sequence.clone(),
        counters: BTreeMap::new(),
        overdrawn: BTreeMap::new(),
        events: 0,
    };
    let mut left_out = Vec::new();
    let mut consumed = Vec::new();
    for (&limit, now) in &new.limits {
        let before = old.limit(limit).copied().unwrap_or_default();
        if let Some(new_tc) = now.consumed {
            let delta = i128::from(new_tc) - i128::from(before.consumed.unwrap_or(0));
            consumed.push((limit.to_owned(), i64::try_from(delta).unwrap_or(i64::MAX)));
        }
        if limit == WCU_LIMIT {
            continue;
        }
        if let Some(new_tc) = now.consumed {
            // A counter absent before starts at zero: the INSERT that creates a
            // bucket, or a limit seeded onto an existing one, carries its first debit.
            let old_tc = before.consumed.unwrap_or(0);
            if new_tc != old_tc {
                contribution.events += 1;
                // The overdraw counter (`{limit}#od`) and the transitions still apply.
                if collides(limit) {
                    left_out.push(limit.to_owned());
                } else {
                    *contribution.counters.entry(limit.to_owned()).or_default() +=
                        i128::from(whole_token_delta(old_tc, new_tc));
                }
                if now.soft && new_tc > old_tc && now.balance.is_some_and(|b| b < 0) {
                    *contribution.overdrawn.entry(limit.to_owned()).or_default() += 1;
                }
            }
        }
    }
    Counted {
        consumed,
        contribution: (contribution.events > 0).then_some(contribution),
        left_out,
    }
}

/// The parent a bucket's requests are also debited to, by its cascade stamp.
/// An unreadable stamp is no cascade: the sensor then counts the bucket's
/// use once more (over, never under), and the snapshots are untouched.
fn cascade_parent(new_image: &zae_table::Image<'_>) -> Option<String> {
    match new_image.boolean(CASCADE) {
        Ok(Some(true)) => new_image
            .string(PARENT_ID)
            .ok()
            .flatten()
            .map(str::to_owned),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
