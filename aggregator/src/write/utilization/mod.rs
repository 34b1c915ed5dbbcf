//! The adaptive sensor's writes. A batch's admitted consumption is added to
//! the per-minute usage items (`zae_table::adaptive::usage`) of the resources
//! whose namespace declares an estimated capacity for the limit, every
//! request counted once along cascades; then the canaries that came through
//! raise their sensed marks, after the usage that preceded them is written.
//!
//! Cascades: the 0.17.0 client debits a request to its entity's bucket and,
//! when that bucket cascades, to its parent's, one level only, and there
//! only for the limits the parent has. A bucket's use of a limit therefore
//! holds its own requests plus copies from the children that cascade into
//! it, and summing buckets counts each cascaded request twice. Counting a
//! bucket's use of a limit with weight 1 when the run of cascading buckets
//! above it that have the limit (its parent, the parent's parent, ...) has
//! even length and 0 when odd counts each request once: for
//! `org <- team <- key`, all cascading and all with the limit, key's use
//! (length 2) and org's (0) are counted and team's (1) is not, and team's
//! own requests are in org's copy; a parent without the limit ends the run,
//! so a child's use of a limit its parent does not track counts itself.
//! Where a stamp cannot be read the bucket is counted: over, never under.

use super::{Aggregator, BatchOutcome};
use crate::plan::BatchPlan;
use crate::plan::utilization::Sensed;
use futures::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::demand::{Listing, Seen};
use zae_table::adaptive::{Declaration, canary, usage};
use zae_table::bucket::{CASCADE, PARENT_ID, field, limit_attr};
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::store::{Returns, Store, StoreError};
use zae_table::{Attr, SequenceNumber};

/// How long a namespace's declaration is used before it is read again.
pub const DECLARATION_TTL: Duration = Duration::from_secs(60);
/// Cascade runs are followed this far at most (the client refuses cycles;
/// a damaged table might hold one).
const CHAIN_LIMIT: usize = 8;

/// Namespaces' declarations as last read, and when; bounded, since a
/// client may write buckets under any namespace prefix.
pub type Declarations = crate::write::cache::Bounded<
    String,
    (Instant, Option<Arc<Declaration>>),
    { repair::NAMESPACES_KEPT },
>;
pub type DeclarationCache = std::sync::Mutex<Declarations>;

/// Entities this instance left out past the cap, and minutes it found full
/// (keyed with an empty entity): an entity left out is one call per later
/// batch of its minute instead of three, and counted once per instance, not
/// per batch.
/// Bounded: a client can make any number of entities.
pub type OverflowCache =
    std::sync::Mutex<crate::write::cache::Bounded<EntityKey, (), OVERFLOW_KEPT>>;
pub const OVERFLOW_KEPT: usize = 8_192;

/// How an entity's part of a batch was listed.
enum Listed {
    Yes,
    /// Left out past the cap, and counted in the minute's overflow.
    LeftOut,
    /// Left out, counted already by an earlier batch of this instance.
    LeftOutAgain,
}

/// What a cascade's parent bucket says: where it cascades to, and which of
/// the batch's limits it has.
struct ParentStamp {
    cascades_to: Option<String>,
    limits: Vec<String>,
}

/// One usage item's share of a batch.
struct MinuteUsage {
    used: BTreeMap<String, i64>,
    /// Of it, what the minute's tail used.
    tail: BTreeMap<String, i64>,
    earliest: SequenceNumber,
}

/// (namespace, resource, minute, entity): one entity's demand in a minute.
type EntityKey = (String, String, i64, String);

/// One entity's part of a batch on a `share: demand` resource.
struct EntityUsage {
    seen: Seen,
    /// Short on some shard: worth listing.
    short: bool,
    /// The limits whose stamp record says the bucket carries a raise. A
    /// client can write that record on its own bucket: it counts only with
    /// an allocation the controller wrote behind it (`allocated`).
    raised: BTreeSet<String>,
    /// Raised by an allocation of the controller's: listed outside the cap.
    allocated: bool,
    earliest: SequenceNumber,
}

/// What a batch senses: usage per resource and minute, and per entity on
/// the resources shared by demand.
#[derive(Default)]
struct Sensing {
    minutes: BTreeMap<(String, String, i64), MinuteUsage>,
    entities: BTreeMap<EntityKey, EntityUsage>,
}

impl Sensing {
    /// Adds a counted bucket's use to its entity's demand: non-cascading
    /// buckets only (a cascading child's requests are in its parent's use,
    /// which is shared like any other entity's).
    fn entity(&mut self, s: &Sensed) {
        if s.cascades_to.is_some() {
            return;
        }
        let key = (
            s.bucket.namespace.clone(),
            s.bucket.resource.clone(),
            s.minute_ms,
            s.bucket.entity.clone(),
        );
        let e = self.entities.entry(key).or_insert_with(|| EntityUsage {
            seen: Seen::default(),
            short: false,
            raised: BTreeSet::new(),
            allocated: false,
            earliest: s.earliest.clone(),
        });
        let used = e.seen.used.entry(s.limit.clone()).or_default();
        *used = used.saturating_add(s.amount);
        if s.short {
            let shard = i64::from(s.bucket.shard);
            e.seen
                .short
                .entry(s.limit.clone())
                .or_default()
                .insert(shard);
        }
        e.seen.shards = e.seen.shards.max(s.shards);
        e.short |= s.short;
        if s.raised {
            e.raised.insert(s.limit.clone());
        }
        e.earliest = e.earliest.clone().min(s.earliest.clone());
    }
}

impl<S: Store> Aggregator<S> {
    pub(super) async fn sense(
        &self,
        plan: &BatchPlan,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        let Sensing {
            minutes,
            mut entities,
        } = self.minutes(&plan.sensed, deadline, outcome).await;
        self.allocated(&mut entities, deadline, outcome).await;
        self.list_demand(entities, deadline, outcome).await;
        self.write_usage(minutes, deadline, outcome).await;
        self.sense_canaries(plan, deadline, outcome).await;
    }

    /// Lists the entities found short, or raised by an allocation, on their
    /// minutes' demand items.
    async fn list_demand(
        &self,
        entities: BTreeMap<EntityKey, EntityUsage>,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        // Heaviest first: past the cap, the batch's lightest are left out.
        let mut listed: Vec<_> = (entities.into_iter())
            .filter(|(_, e)| e.short || e.allocated)
            .collect();
        listed.sort_by_key(|(_, e)| std::cmp::Reverse(e.seen.used.values().sum::<i64>()));
        // A newcomer's listing is a transaction on its minute's header: two
        // in flight at once conflict (DynamoDB refuses the second), so this
        // instance starts them one at a time.
        let admitting = futures::lock::Mutex::new(());
        let admitting = &admitting;
        let mut demand = futures::stream::iter(listed)
            .map(|(key, e)| async move {
                let listed = self.list(&key, &e.seen, e.allocated, admitting, deadline);
                (listed.await, e.earliest, key)
            })
            .buffer_unordered(self.settings.concurrency.max(1));
        while let Some((result, earliest, (_, resource, minute_ms, entity))) = demand.next().await {
            match result {
                Ok(Listed::Yes) => outcome.stats.demand_listed += 1,
                Ok(Listed::LeftOut) => outcome.stats.demand_overflow += 1,
                Ok(Listed::LeftOutAgain) => {}
                Err(e) => match super::Refusal::of("demand listing", &earliest, &e) {
                    Some(refusal) => outcome.refuse(&refusal.losing(super::Lost {
                        resource,
                        minute_ms,
                        entity: Some(entity),
                    })),
                    None => outcome.fail(&e, earliest),
                },
            }
        }
    }

    /// Adds the batch's use to each (resource, minute)'s usage item.
    async fn write_usage(
        &self,
        minutes: BTreeMap<(String, String, i64), MinuteUsage>,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        let mut writes = futures::stream::iter(minutes)
            .map(|((namespace, resource, minute_ms), m)| async move {
                let update =
                    usage::add_with_tail(&namespace, &resource, minute_ms, &m.used, &m.tail);
                let result = self
                    .retrying(deadline, || self.store.update(&update, Returns::Nothing))
                    .await;
                let lost = super::Lost {
                    resource,
                    minute_ms,
                    entity: None,
                };
                (result, m.earliest, lost)
            })
            .buffer_unordered(self.settings.concurrency.max(1));
        while let Some((result, earliest, lost)) = writes.next().await {
            match result {
                Ok(_) => outcome.stats.usage_writes += 1,
                Err(e) => match super::Refusal::of("adaptive usage", &earliest, &e) {
                    Some(refusal) => outcome.refuse(&refusal.losing(lost)),
                    None => outcome.fail(&e, earliest),
                },
            }
        }
    }

    /// Adds the canaries read to their ticks' sensed sets.
    async fn sense_canaries(
        &self,
        plan: &BatchPlan,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        // A canary behind a record that is to be redelivered waits for the
        // redelivery: sensing it now could complete a minute whose usage is
        // not all written.
        let mut ticks: BTreeMap<i64, (Vec<u32>, SequenceNumber)> = BTreeMap::new();
        for c in &plan.canaries {
            if outcome
                .first_failure
                .as_ref()
                .is_some_and(|f| c.sequence > *f)
            {
                continue;
            }
            let entry = ticks
                .entry(c.tick_ms)
                .or_insert_with(|| (Vec::new(), c.sequence.clone()));
            entry.0.push(c.index);
            entry.1 = entry.1.clone().min(c.sequence.clone());
        }
        for (tick_ms, (indices, earliest)) in ticks {
            let update = canary::sense(tick_ms, &indices);
            match self
                .retrying(deadline, || self.store.update(&update, Returns::Nothing))
                .await
            {
                Ok(_) => outcome.stats.canaries_sensed += indices.len(),
                Err(e) => outcome.fail(&e, earliest),
            }
        }
    }

    /// Marks the entities whose raise the controller allocated: a stamp
    /// record on a bucket is the client's to write, an allocation is not
    /// (`{ns}/ADAPTIVE#` is outside the acquire policy). The allocations are
    /// the repair's, up to a minute old, read again once per namespace and
    /// batch when they lack a raise an image shows (one just made). An
    /// entity whose allocations cannot be read is not listed, and its
    /// records are redelivered.
    async fn allocated(
        &self,
        entities: &mut BTreeMap<EntityKey, EntityUsage>,
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) {
        let mut read_again: BTreeSet<String> = BTreeSet::new();
        for ((namespace, resource, _, entity), e) in entities.iter_mut() {
            if e.raised.is_empty() {
                continue;
            }
            let holds = |all: &[Allocated]| {
                all.iter().any(|a| {
                    a.entity == *entity && a.resource == *resource && e.raised.contains(&a.limit)
                })
            };
            let mut read = self
                .retrying(deadline, || self.allocations(namespace))
                .await;
            if read.as_ref().is_ok_and(|all| !holds(all)) && read_again.insert(namespace.clone()) {
                self.forget_allocations(namespace);
                read = self
                    .retrying(deadline, || self.allocations(namespace))
                    .await;
            }
            match read {
                Ok(all) => e.allocated = holds(&all),
                Err(err) => {
                    e.short = false;
                    outcome.fail(&err, e.earliest.clone());
                }
            }
        }
    }

    /// The batch's use per usage item: only what a declaration senses,
    /// weighted along cascades. A namespace whose declaration cannot be read
    /// fails its records, to be redelivered.
    async fn minutes(
        &self,
        sensed: &[Sensed],
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) -> Sensing {
        let mut declarations: HashMap<&str, Option<Arc<Declaration>>> = HashMap::new();
        let mut stamps = HashMap::new();
        let mut limits: Vec<String> = sensed.iter().map(|s| s.limit.clone()).collect();
        limits.sort();
        limits.dedup();
        let mut sensing = Sensing::default();
        // Per namespace whose declaration failed: the error, and the earliest
        // record it left unsensed (runs are by bucket, not in stream order).
        let mut unread: HashMap<&str, (StoreError, SequenceNumber)> = HashMap::new();
        for s in sensed {
            let ns = s.bucket.namespace.as_str();
            if !declarations.contains_key(ns) {
                match self.declaration(ns, deadline).await {
                    Ok(d) => declarations.insert(ns, d),
                    Err(e) => {
                        unread.insert(ns, (e, s.earliest.clone()));
                        declarations.insert(ns, None)
                    }
                };
            }
            if let Some((_, earliest)) = unread.get_mut(ns) {
                *earliest = earliest.clone().min(s.earliest.clone());
                continue;
            }
            let senses = declarations[ns]
                .as_ref()
                .is_some_and(|d| d.capacity(&s.bucket.resource, &s.limit).is_some());
            if !senses
                || !self
                    .counted(s, &mut stamps, &limits, deadline, outcome)
                    .await
            {
                continue;
            }
            if declarations[ns]
                .as_ref()
                .is_some_and(|d| d.shares_by_demand(&s.bucket.resource))
            {
                sensing.entity(s);
            }
            let key = (ns.to_owned(), s.bucket.resource.clone(), s.minute_ms);
            let m = sensing.minutes.entry(key).or_insert_with(|| MinuteUsage {
                used: BTreeMap::new(),
                tail: BTreeMap::new(),
                earliest: s.earliest.clone(),
            });
            let used = m.used.entry(s.limit.clone()).or_default();
            *used = used.saturating_add(s.amount);
            if s.tail > 0 {
                let tail = m.tail.entry(s.limit.clone()).or_default();
                *tail = tail.saturating_add(s.tail);
            }
            m.earliest = m.earliest.clone().min(s.earliest.clone());
        }
        for (_, (e, earliest)) in unread {
            outcome.fail(&e, earliest);
        }
        sensing
    }

    /// Adds an entity's part of the batch to the minute's demand: `false`
    /// when the cap left it out. An entity raised by an allocation is one
    /// write whether or not it is listed yet, outside the cap: the
    /// allocations are bounded by the listings they came from, and a raised
    /// entity must never be mistaken for an idle one (it would ease down)
    /// nor take a newly saturated one's place.
    async fn list(
        &self,
        (namespace, resource, minute_ms, entity): &EntityKey,
        seen: &Seen,
        raised: bool,
        admitting: &futures::lock::Mutex<()>,
        deadline: Option<Instant>,
    ) -> Result<Listed, StoreError> {
        let listing = Listing {
            namespace,
            resource,
            minute_ms: *minute_ms,
            entity,
        };
        if raised {
            let update = listing.raised(seen);
            self.retrying(deadline, || self.store.update(&update, Returns::Nothing))
                .await?;
            return Ok(Listed::Yes);
        }
        let (update, overflow) = (listing.listed(seen), listing.overflow());
        // Made only past the first update: most entities are listed already.
        let key = |entity: &str| {
            (
                namespace.clone(),
                resource.clone(),
                *minute_ms,
                entity.to_owned(),
            )
        };
        let known = |key: &EntityKey| self.overflowed.lock().is_ok_and(|c| c.get(key).is_some());
        let remember = |key: EntityKey| {
            if let Ok(mut c) = self.overflowed.lock() {
                c.insert(key, ());
            }
        };
        // Listed already, newly listed, or listed by a batch that raced this one.
        for _ in 0..2 {
            let listed = self
                .retrying(deadline, || self.store.update(&update, Returns::Nothing))
                .await;
            match listed {
                Ok(_) => return Ok(Listed::Yes),
                Err(StoreError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
            if known(&key(entity)) {
                return Ok(Listed::LeftOutAgain);
            }
            // A minute's count never falls: once at the cap, it stays there.
            let admit = listing.admit(seen);
            let full = known(&key(""))
                || match self
                    .retrying(deadline, || async {
                        let _alone = admitting.lock().await;
                        self.store.transact(&admit).await
                    })
                    .await
                {
                    Ok(()) => return Ok(Listed::Yes),
                    // The header's count is at the cap.
                    Err(StoreError::ConditionFailed { .. }) => true,
                    Err(StoreError::Cancelled { .. }) => false,
                    Err(e) => return Err(e),
                };
            if full {
                self.retrying(deadline, || self.store.update(&overflow, Returns::Nothing))
                    .await?;
                remember(key(""));
                remember(key(entity));
                return Ok(Listed::LeftOut);
            }
        }
        Err(StoreError::Retryable {
            operation: "listing an entity's demand",
            key: format!("{namespace}/{resource}/{minute_ms}/{entity}"),
            message: "its item kept changing".to_owned(),
        })
    }

    /// Whether a bucket's use of its limit is counted: the run of cascading
    /// buckets above it that have the limit has even length (see the
    /// module's note).
    async fn counted(
        &self,
        s: &Sensed,
        stamps: &mut HashMap<String, Option<ParentStamp>>,
        limits: &[String],
        deadline: Option<Instant>,
        outcome: &mut BatchOutcome,
    ) -> bool {
        let mut length = 0;
        let mut next = s.cascades_to.clone();
        while let Some(parent) = next.take() {
            if length == CHAIN_LIMIT {
                break;
            }
            let key = BucketKey {
                entity: parent,
                shard: 0,
                ..s.bucket.clone()
            };
            let pk = key.pk();
            if !stamps.contains_key(&pk) && key.check_client_caps().is_err() {
                // Past the client's cap (a hand-written item): no parent,
                // and no read whose key DynamoDB may refuse.
                tracing::warn!(
                    parent_id = %zae_table::shown::shown(&key.entity, zae_table::shown::KEY_SHOWN_BYTES),
                    "cascade parent id past the client's cap: read as no parent"
                );
                outcome.stats.parents_beyond_caps += 1;
                stamps.insert(pk, None);
                break;
            }
            if !stamps.contains_key(&pk) {
                match self.parent_stamp(&pk, limits, deadline).await {
                    Ok(stamp) => stamps.insert(pk.clone(), stamp),
                    Err(e) => {
                        tracing::warn!(error = %e, "cascade stamp unreadable: the bucket's use is counted");
                        outcome.stats.cascade_lookups_failed += 1;
                        return true;
                    }
                };
            }
            match &stamps[&pk] {
                // The parent has no bucket for the resource, or no such
                // limit on it: no copy landed there.
                None => break,
                Some(above) if !above.limits.contains(&s.limit) => break,
                Some(above) => {
                    length += 1;
                    next = above.cascades_to.clone();
                }
            }
        }
        length % 2 == 0
    }

    /// A parent bucket's cascade stamp and which of `limits` it has; `None`
    /// without the bucket.
    async fn parent_stamp(
        &self,
        pk: &str,
        limits: &[String],
        deadline: Option<Instant>,
    ) -> Result<Option<ParentStamp>, StoreError> {
        let mut attributes = vec![CASCADE.to_owned(), PARENT_ID.to_owned()];
        attributes.extend(limits.iter().map(|l| limit_attr(l, field::CAPACITY)));
        let item = self
            .retrying(deadline, || {
                self.store.get_attributes(pk, SK_STATE, false, &attributes)
            })
            .await?;
        Ok(item.map(|item| ParentStamp {
            cascades_to: match item.get(CASCADE) {
                Some(Attr::Bool(true)) => {
                    item.get(PARENT_ID).and_then(Attr::as_s).map(str::to_owned)
                }
                _ => None,
            },
            limits: limits
                .iter()
                .filter(|l| item.contains_key(&limit_attr(l, field::CAPACITY)))
                .cloned()
                .collect(),
        }))
    }

    /// A namespace's declaration, read at most once per `DECLARATION_TTL`.
    async fn declaration(
        &self,
        namespace: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Arc<Declaration>>, StoreError> {
        if let Some((read_at, d)) = lock(&self.declarations).get(namespace)
            && read_at.elapsed() < DECLARATION_TTL
        {
            return Ok(d);
        }
        let read = self
            .retrying(deadline, || {
                Declaration::read(&self.store, namespace, false)
            })
            .await?;
        let declaration = match read.transpose() {
            Ok(d) => d.map(Arc::new),
            Err(e) => {
                // Unreadable: sensing nothing for it is what an absent one does.
                tracing::error!(namespace, error = %e, "adaptive declaration unreadable");
                None
            }
        };
        lock(&self.declarations)
            .insert(namespace.to_owned(), (Instant::now(), declaration.clone()));
        Ok(declaration)
    }
}

/// A cache's lock; a panic elsewhere poisons nothing worth keeping apart.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub mod repair;

pub use repair::RepairCache;

#[cfg(test)]
mod tests;
