//! A stamping pass: a lap of one (resource, limit)'s buckets, found through
//! the resource's index (GSI2, whole items), page by page from the target's
//! cursor, each stamped (`zae_table::adaptive::stamp`) with what the level deciding its
//! limits asks for, in the client's resolution order: the target's factor
//! when that level scales it, base otherwise (a level that stopped being
//! adaptive or is in shadow, a target being retired, a reset). Shared by the
//! controller, the provisioner's apply and `zae-limits adaptive reset`.
//!
//! - Writes in flight are bounded ([`IN_FLIGHT`] of the controller's own,
//!   one at a time of checked ones), and none starts once the
//!   caller's time is up: the lap goes on from the page it was in at the
//!   next call.
//! - Each write is a compare-and-set on the amount read, re-read and retried
//!   when it loses; a bucket that keeps losing is owed, and the lap is not
//!   done until it is stamped.
//! - Each write carries the target's generation and is refused over a newer
//!   stamp. The target's generation is read again before every page, and a
//!   pass whose target moved stops: the newer generation's pass owns the
//!   buckets. [`Writes::Checked`] makes each write a transaction with a check
//!   of the target's generation, for writers that are not the controller.

use crate::law::Factor;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use std::collections::BTreeMap;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::declaration::Declaration;
use zae_table::adaptive::stamp::{Stamp, Wanted, stamp};
use zae_table::adaptive::target::{self, OWED_KEPT, Target, generation_is};
use zae_table::bucket::shard::MAX_SHARD_COUNT;
use zae_table::bucket::{SHARD_COUNT, field, limit_attr};
use zae_table::keys::{self, BucketKey, Index, SK_STATE};
use zae_table::level::Level;
use zae_table::resolve::{Configured, LevelSource, Resolver, Through, first_with_limits};
use zae_table::store::{Query, Returns, Store, StoreError, TxWrite};
use zae_table::{Attr, Item};

/// Compare-and-set attempts per bucket before it is owed to the next call.
const ATTEMPTS: usize = 3;
/// Tries of one stamp refused as retryable (a transaction conflict,
/// throttling), each after the store's backoff, before it is owed.
const RETRIES: u32 = 6;
/// Bucket writes in flight at once, as the provisioner's fan-outs.
pub const IN_FLIGHT: usize = 16;

/// How a pass writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// The controller's own: each stamp pinned to its generation.
    Pinned,
    /// Anyone else's: each stamp also checks, in one transaction, that the
    /// target is still at the generation the writer read.
    Checked,
}

impl Writes {
    /// Stamps in flight at once. Checked stamps one at a time: each is a
    /// transaction on the target item, and DynamoDB cancels a transaction
    /// that meets another in flight on one of its items
    /// (`TransactionConflict`), so more at once would only conflict.
    fn in_flight(self) -> usize {
        match self {
            Writes::Pinned => IN_FLIGHT,
            Writes::Checked => 1,
        }
    }
}

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    pub stamped: usize,
    /// Buckets whose writes kept losing: owed, the lap is not done.
    pub lost: usize,
    /// The lap is done: every bucket carries the target's generation.
    pub finished: bool,
    /// The target moved on: a newer generation's pass owns the buckets.
    pub superseded: bool,
}

/// Stamps `target`'s buckets from its cursor on, under `declaration`
/// (`None`: every bucket to base), until the lap is done, the target moves
/// on, or `out_of_time`; `target`'s cursor, lap and owed buckets say where
/// the next call goes on.
pub async fn run<S: Store>(
    store: &S,
    namespace: &str,
    declaration: Option<&Declaration>,
    target: &mut Target,
    writes: Writes,
    out_of_time: impl Fn() -> bool,
) -> Result<Pass, StoreError> {
    let configured = Configured::read(store, namespace, &target.resource).await?;
    let resolver = Resolver::new(store, namespace);
    // Under `share: demand`, a raised entity's buckets carry its allocation.
    let allocations = match declaration {
        Some(d) if d.shares_by_demand(&target.resource) => {
            Allocated::read(store, namespace, &target.resource, &target.limit)
                .await?
                .into_iter()
                .map(|a| (a.entity, a.factor))
                .collect()
        }
        _ => BTreeMap::new(),
    };
    let lap = Lap {
        store,
        namespace,
        declaration,
        allocations,
        writes,
        levels: Through {
            source: &resolver,
            configured: &configured,
        },
        out_of_time: &out_of_time,
    };
    lap.run(target).await
}

struct Lap<'a, S, L, F> {
    store: &'a S,
    namespace: &'a str,
    declaration: Option<&'a Declaration>,
    allocations: BTreeMap<String, Factor>,
    writes: Writes,
    levels: Through<'a, L>,
    out_of_time: &'a F,
}

/// One bucket's outcome.
enum Done {
    Stamped,
    Nothing,
    Lost(String),
    Superseded,
}

impl<S: Store, L: LevelSource + Sync, F: Fn() -> bool> Lap<'_, S, L, F> {
    async fn run(&self, target: &mut Target) -> Result<Pass, StoreError> {
        let mut pass = Pass::default();
        if !self.settle_owed(target, &mut pass).await? || pass.superseded {
            return Ok(pass);
        }
        // Wrapped with no lap start: the lap is over, only owed buckets were left.
        let over = target.wrapped && target.lap_start.is_none();
        if !over && !self.pages(target, &mut pass).await? {
            return Ok(pass);
        }
        // The lap is through; owed buckets get one more try at once.
        target.cursor = None;
        target.lap_start = None;
        target.wrapped = true;
        if !self.settle_owed(target, &mut pass).await? || pass.superseded {
            return Ok(pass);
        }
        if target.owed_overflow {
            // More lost than remembered: a new lap finds them.
            target.owed_overflow = false;
            target.wrapped = false;
        } else if target.owed.is_empty() {
            target.lap_done();
            pass.finished = true;
        }
        Ok(pass)
    }

    /// The lap's pages from the cursor on: `true` once it has come round,
    /// `false` when it stopped (time, or the target moved on).
    async fn pages(&self, target: &mut Target, pass: &mut Pass) -> Result<bool, StoreError> {
        let query = Query {
            index: &Index::GSI2,
            pk: keys::pk_resource(self.namespace, &target.resource),
            sk_prefix: keys::BUCKET_PREFIX.to_owned(),
            consistent: false,
        };
        let lap_end = target.lap_start.as_ref().and_then(index_sort_key);
        loop {
            if (self.out_of_time)() {
                return Ok(false);
            }
            if self.moved(target).await? {
                pass.superseded = true;
                return Ok(false);
            }
            let page = self
                .store
                .query_page(&query, target.cursor.as_ref())
                .await?;
            // Come round, the lap ends with the bucket it began after.
            let within = |b: &Item| {
                !target.wrapped
                    || lap_end
                        .as_ref()
                        .is_none_or(|end| index_sort_key(b).is_some_and(|k| k <= *end))
            };
            let end_here = page.items.iter().any(|b| !within(b));
            let items: Vec<&Item> = page.items.iter().filter(|b| within(b)).collect();
            if !self.stamp_page(target, &items, pass).await? || pass.superseded {
                return Ok(false);
            }
            match page.next {
                Some(next) if !end_here => target.cursor = Some(next),
                _ if !end_here && target.lap_start.is_some() && !target.wrapped => {
                    target.wrapped = true;
                    target.cursor = None;
                }
                _ => return Ok(true),
            }
        }
    }

    /// Stamps one page's buckets, at most `Writes::in_flight` at a time; `false`
    /// when time ran out before every one was started (the page is redone).
    async fn stamp_page(
        &self,
        target: &mut Target,
        items: &[&Item],
        pass: &mut Pass,
    ) -> Result<bool, StoreError> {
        let snapshot = target.clone();
        let mut in_flight = FuturesUnordered::new();
        let mut started = 0;
        let mut outcomes = Vec::new();
        loop {
            let most = self.writes.in_flight();
            while in_flight.len() < most && started < items.len() && !(self.out_of_time)() {
                in_flight.push(self.stamp_bucket(&snapshot, items[started]));
                started += 1;
            }
            match in_flight.next().await {
                Some(outcome) => outcomes.push(outcome?),
                None => break,
            }
        }
        for outcome in outcomes {
            self.count(target, outcome, pass);
        }
        Ok(started == items.len())
    }

    fn count(&self, target: &mut Target, outcome: Done, pass: &mut Pass) {
        match outcome {
            Done::Stamped => pass.stamped += 1,
            Done::Nothing => {}
            Done::Superseded => pass.superseded = true,
            Done::Lost(pk) => {
                pass.lost += 1;
                if target.owed.len() < OWED_KEPT {
                    if !target.owed.contains(&pk) {
                        target.owed.push(pk);
                    }
                } else {
                    target.owed_overflow = true;
                }
            }
        }
    }

    /// Tries the owed buckets again from a fresh read; `false` when time ran
    /// out first.
    async fn settle_owed(&self, target: &mut Target, pass: &mut Pass) -> Result<bool, StoreError> {
        let owed = std::mem::take(&mut target.owed);
        for (i, pk) in owed.iter().enumerate() {
            if (self.out_of_time)() {
                target.owed.extend(owed[i..].iter().cloned());
                return Ok(false);
            }
            let outcome = match self.store.get(pk, SK_STATE, true).await? {
                Some(bucket) => self.stamp_bucket(target, &bucket).await?,
                None => Done::Nothing,
            };
            self.count(target, outcome, pass);
        }
        Ok(true)
    }

    /// Whether the target moved on since `target` was read.
    async fn moved(&self, target: &Target) -> Result<bool, StoreError> {
        let (pk, sk) = Target::key(self.namespace, &target.resource, &target.limit);
        let attributes = [target::GENERATION.to_owned()];
        let now = self
            .store
            .get_attributes(&pk, &sk, true, &attributes)
            .await?;
        let generation = now.as_ref().and_then(|t| t.get(target::GENERATION));
        // Gone: retired meanwhile, and its retire pass owned the buckets.
        Ok(generation.and_then(Attr::as_int) != Some(target.generation))
    }

    async fn stamp_bucket(&self, target: &Target, bucket: &Item) -> Result<Done, StoreError> {
        let limit = target.limit.as_str();
        let Some(key) = keys::pk_of(bucket).and_then(|pk| BucketKey::parse(pk).ok()) else {
            return Ok(Done::Nothing);
        };
        if !bucket.contains_key(&limit_attr(limit, field::CAPACITY)) {
            return Ok(Done::Nothing);
        }
        let walk = Level::resolution(&key.entity, &key.resource, true);
        let Some((level, config)) = first_with_limits(&self.levels, walk).await? else {
            return Ok(Done::Nothing);
        };
        let Some(base) = config.limits.iter().find(|l| l.name == limit) else {
            return Ok(Done::Nothing);
        };
        let (factor, max_scale) = match self.declaration.and_then(|d| d.scaling(&level, limit)) {
            Some(opt_in) => {
                let allocated = self.allocations.get(&key.entity).copied();
                (allocated.unwrap_or(target.factor), opt_in.max_scale)
            }
            None => (Factor::ONE, None),
        };
        let wanted = Wanted {
            base,
            factor,
            max_scale,
            generation: target.generation,
        };
        write_stamp(
            self.store,
            self.namespace,
            target,
            &key.pk(),
            bucket,
            wanted,
            self.writes,
        )
        .await
    }
}

/// Stamps every shard of one entity's bucket of `target`'s resource with
/// `wanted` (an allocation under `share: demand`), each stamp checked in one
/// transaction against the target's generation; stops when the target moved
/// on. A shard the client has not created yet is stamped by the aggregator's
/// repair when it appears.
pub async fn stamp_entity<S: Store>(
    store: &S,
    namespace: &str,
    target: &Target,
    entity: &str,
    wanted: Wanted<'_>,
) -> Result<Pass, StoreError> {
    let mut key = BucketKey {
        namespace: namespace.to_owned(),
        entity: entity.to_owned(),
        resource: target.resource.clone(),
        shard: 0,
    };
    let mut pass = Pass::default();
    let Some(first) = store.get(&key.pk(), SK_STATE, true).await? else {
        pass.finished = true;
        return Ok(pass);
    };
    let shards = first
        .get(SHARD_COUNT)
        .and_then(Attr::as_int)
        .unwrap_or(1)
        .clamp(1, MAX_SHARD_COUNT);
    for shard in 0..shards {
        key.shard = u32::try_from(shard).unwrap_or(0);
        let pk = key.pk();
        let bucket = match shard {
            0 => Some(first.clone()),
            _ => store.get(&pk, SK_STATE, true).await?,
        };
        let Some(bucket) = bucket else { continue };
        match write_stamp(
            store,
            namespace,
            target,
            &pk,
            &bucket,
            wanted,
            Writes::Checked,
        )
        .await?
        {
            Done::Stamped => pass.stamped += 1,
            Done::Nothing => {}
            Done::Lost(_) => pass.lost += 1,
            Done::Superseded => {
                pass.superseded = true;
                return Ok(pass);
            }
        }
    }
    pass.finished = pass.lost == 0;
    Ok(pass)
}

/// Stamps one bucket (read as `bucket`), re-reading and retrying when it
/// loses a race, and after the store's backoff when it is refused as
/// retryable; owed when neither settles.
async fn write_stamp<S: Store>(
    store: &S,
    namespace: &str,
    target: &Target,
    pk: &str,
    bucket: &Item,
    wanted: Wanted<'_>,
    writes: Writes,
) -> Result<Done, StoreError> {
    let mut current = bucket.clone();
    let (mut races, mut retries) = (0, 0);
    while races < ATTEMPTS && retries < RETRIES {
        let Stamp::Write { update, .. } = stamp(&current, wanted) else {
            return Ok(Done::Nothing);
        };
        match write_once(store, namespace, target, update, writes).await {
            Ok(()) => return Ok(Done::Stamped),
            // The target moved on: the check is the transaction's first write.
            Err(StoreError::ConditionFailed { .. }) if writes == Writes::Checked => {
                return Ok(Done::Superseded);
            }
            Err(StoreError::ConditionFailed { .. }) | Err(StoreError::Cancelled { .. }) => {
                // Written since it was read: read it again.
                races += 1;
                match store.get(pk, SK_STATE, true).await? {
                    Some(item) => current = item,
                    None => return Ok(Done::Nothing),
                }
            }
            Err(e) if e.is_retryable() => {
                retries += 1;
                store.backoff(retries).await;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Done::Lost(pk.to_owned()))
}

/// One stamp's write: pinned alone, or checked with the target in one
/// transaction.
async fn write_once<S: Store>(
    store: &S,
    namespace: &str,
    target: &Target,
    update: zae_table::store::Update,
    writes: Writes,
) -> Result<(), StoreError> {
    match writes {
        Writes::Pinned => store.update(&update, Returns::Nothing).await.map(|_| ()),
        Writes::Checked => {
            let (tpk, tsk) = Target::key(namespace, &target.resource, &target.limit);
            let check = TxWrite::Check {
                pk: tpk,
                sk: tsk,
                condition: generation_is(target.generation),
            };
            store.transact(&[check, TxWrite::Update(update)]).await
        }
    }
}

/// A bucket's GSI2 sort key: where it stands in the lap.
fn index_sort_key(item: &Item) -> Option<String> {
    item.get(Index::GSI2.sk)
        .and_then(Attr::as_s)
        .map(str::to_owned)
}
