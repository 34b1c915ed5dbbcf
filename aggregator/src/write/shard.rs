//! Shard writes after the refill pass: a proactive doubling of a hot shard 0,
//! and the propagation of a raised shard count (§6, §7 of the reference).
//! Both are backstops the client performs itself: a lost race or a failure
//! is counted and logged, never a batch failure.

use super::Aggregator;
use crate::plan::shard::{CloneLimit, Holding, Raise, grant_count, plan_clone, proactive};
use std::collections::BTreeMap;
use std::time::Instant;
use zae_table::bucket::BucketState;
use zae_table::bucket::shard::{MAX_SHARD_COUNT, clone_item, debit, double, raise_count, repair};
use zae_table::entity::owner_check;
use zae_table::keys::{BucketKey, SK_STATE};
use zae_table::store::{Condition, ITEM_ABSENT, Returns, Store, StoreError, TxWrite};
use zae_table::{Attr, Item};

/// An existing shard, as read.
type Shard<'i> = (u32, BucketState<'i>);

/// Shard 0 as the clones copy it, the limits they start from, and the
/// shard count in force when they land (shard 0's own, if a later doubling
/// is already there: a late raise never clones under its stale count).
struct Source<'a> {
    raise: &'a Raise,
    item: &'a Item,
    state: &'a BucketState<'a>,
    limits: &'a [CloneLimit],
    count: i64,
}

/// What propagating one raised count did. `failed`: it stopped on an error
/// (a sibling that could not be read or parsed, a write refused); `retry`:
/// that error was transient, so the batch is redelivered from the raise.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Propagated {
    pub raised: usize,
    pub cloned: usize,
    pub failed: bool,
    pub retry: bool,
}

impl<S: Store> Aggregator<S> {
    /// Doubles shard 0 when its `wcu`, projected to now, is below a fifth.
    pub(super) async fn double_if_hot(
        &self,
        pk: &str,
        state: &BucketState<'_>,
        wcu_consumed: i64,
        now: i64,
        deadline: Option<Instant>,
    ) -> bool {
        let Some((read, to)) = proactive(state, wcu_consumed, now) else {
            return false;
        };
        let update = double(pk, read, to);
        match super::retry::within(deadline, self.store.update(&update, Returns::Nothing)).await {
            Ok(_) => {
                tracing::info!(pk, shard_count = to, "proactive shard doubling");
                if to == MAX_SHARD_COUNT {
                    tracing::warn!(pk, "shard count at its ceiling of {MAX_SHARD_COUNT}");
                }
                true
            }
            Err(StoreError::ConditionFailed { .. }) => false,
            Err(e) => {
                tracing::warn!(error = %e, pk, "proactive doubling failed");
                false
            }
        }
    }

    async fn read_bucket(&self, key: &BucketKey) -> Result<Option<Item>, StoreError> {
        self.store.get(&key.pk(), SK_STATE, true).await
    }

    pub async fn propagate(
        &self,
        raise: &Raise,
        now: i64,
        deadline: Option<Instant>,
    ) -> Propagated {
        let mut done = Propagated::default();
        // The planner reads only counts within 1..=MAX_SHARD_COUNT; kept
        // here too, since every count below is divided by or cloned up to.
        if raise.from < 1 || raise.to > MAX_SHARD_COUNT {
            tracing::warn!(pk = %raise.key.pk(), from = raise.from, to = raise.to, max = MAX_SHARD_COUNT, "shard count outside the client's range: not propagated");
            return done;
        }
        // Stopped whole at the deadline: every write below is conditional,
        // so the redelivery's propagation takes up where this one stopped.
        let work = self.propagate_into(raise, now, deadline, &mut done);
        if let Err(e) = super::retry::within(deadline, work).await {
            tracing::error!(error = %e, pk = %raise.key.pk(), to = raise.to, "shard-count propagation stopped");
            done.failed = true;
            done.retry = e.is_retryable();
        }
        done
    }

    async fn propagate_into(
        &self,
        raise: &Raise,
        now: i64,
        deadline: Option<Instant>,
        done: &mut Propagated,
    ) -> Result<(), StoreError> {
        let Some(item) = self.read_bucket(&raise.key).await? else {
            return Ok(());
        };
        let state = BucketState::from_item(&item).map_err(|e| fatal(raise, e))?;
        let count = raise.to.max(stored_count(&item));
        if count > MAX_SHARD_COUNT {
            return Err(fatal(
                raise,
                format!("shard 0 holds shard_count {count}, above the ceiling"),
            ));
        }
        let limits = clone_limits_or_log(&state, count, raise, now);
        let quotas = limits
            .as_ref()
            .is_some_and(|l| l.iter().any(|l| l.quota.is_some()));
        // Every sibling read and parsed, or nothing more is written: a raise
        // never goes ahead with a partial freeze list, and no grant is
        // planned while a sibling that may hold the slot's allowance is unseen.
        let siblings = self.siblings(raise, quotas, &item, deadline).await?;
        let states = siblings
            .iter()
            .map(|(shard, item)| match BucketState::from_item(item) {
                Ok(state) => Ok((*shard, state)),
                Err(e) => Err(fatal(raise, format!("shard {shard} unreadable: {e}"))),
            })
            .collect::<Result<Vec<Shard<'_>>, StoreError>>()?;
        let known = limits.as_deref().map(|l| (l, states.as_slice()));
        self.raise_siblings(raise, known, done).await?;
        let Some(limits) = &limits else {
            return Ok(());
        };
        let highest = siblings
            .iter()
            .map(|(_, i)| stored_count(i))
            .max()
            .unwrap_or(0);
        if quotas && highest > raise.to {
            return Ok(());
        }
        let source = Source {
            raise,
            item: &item,
            state: &state,
            limits,
            count,
        };
        let mut holdings = holdings(limits, &states, now);
        let mut created = Vec::new();
        for t in raise.from..raise.to {
            let shard = u32::try_from(t).map_err(|e| fatal(raise, e))?;
            if super::retry::past(deadline) {
                break;
            }
            if self
                .create_clone(&source, &mut holdings, shard, now)
                .await?
            {
                created.push(shard);
                done.cloned += 1;
            }
        }
        if !created.is_empty() {
            self.repair_clones(&source, highest, &created).await;
        }
        Ok(())
    }

    /// Every existing shard, read consistently when there are quotas (without
    /// them nothing depends on what the shards hold); shard 0 is `source`.
    async fn siblings(
        &self,
        raise: &Raise,
        quotas: bool,
        source: &Item,
        deadline: Option<Instant>,
    ) -> Result<Vec<(u32, Item)>, StoreError> {
        let mut out = vec![(0, source.clone())];
        if !quotas {
            return Ok(out);
        }
        for shard in 1..raise.from {
            let shard = u32::try_from(shard).map_err(|e| fatal(raise, e))?;
            if super::retry::past(deadline) {
                return Err(out_of_time(raise));
            }
            if let Some(item) = self.read_bucket(&raise.key.shard(shard)).await? {
                out.push((shard, item));
            }
        }
        Ok(out)
    }

    /// Path 1: the existing shards take the new count; each quota's grant
    /// count is frozen where unstamped, so the count cannot resize it.
    async fn raise_siblings(
        &self,
        raise: &Raise,
        known: Option<(&[CloneLimit], &[Shard<'_>])>,
        done: &mut Propagated,
    ) -> Result<(), StoreError> {
        for shard in 1..raise.from {
            let shard = u32::try_from(shard).map_err(|e| fatal(raise, e))?;
            let freeze = known.map_or_else(Vec::new, |(limits, states)| {
                freeze_for(limits, states, shard)
            });
            let freeze: Vec<(&str, i64)> = freeze.iter().map(|(q, g)| (q.as_str(), *g)).collect();
            let update = raise_count(&raise.key.shard(shard).pk(), raise.to, &freeze);
            match self.store.update(&update, Returns::Nothing).await {
                Ok(_) => done.raised += 1,
                Err(StoreError::ConditionFailed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Path 2, one shard: created with its quotas funded by their donors'
    /// debits and the owner unchanged, in one transaction, or not at all.
    async fn create_clone(
        &self,
        source: &Source<'_>,
        holdings: &mut BTreeMap<String, Vec<Holding>>,
        shard: u32,
        now: i64,
    ) -> Result<bool, StoreError> {
        let Some(plan) = plan_clone(source.limits, holdings, shard, now) else {
            return Ok(false);
        };
        let raise = source.raise;
        let key = raise.key.shard(shard);
        let item = clone_item(source.item, &key, source.count, &plan.tokens, &plan.quotas);
        let mut writes = vec![TxWrite::Put {
            item,
            condition: Some(Condition::plain(ITEM_ABSENT)),
        }];
        for (donor, debits) in &plan.debits {
            writes.push(TxWrite::Update(debit(
                &raise.key.shard(*donor).pk(),
                debits,
            )));
        }
        let (ns, entity) = (&raise.key.namespace, &raise.key.entity);
        let owner = (
            source.state.parent_generation,
            source.state.parent_incarnation,
        );
        writes.push(owner_check(ns, entity, owner.0, owner.1));
        match self.store.transact(&writes).await {
            Ok(()) => {}
            // The client created it, a donor moved, or the owner did.
            Err(StoreError::ConditionFailed { .. } | StoreError::Cancelled { .. }) => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        for (donor, debits) in plan.debits {
            for d in debits {
                if let Some(h) = holdings
                    .get_mut(&d.limit)
                    .and_then(|hs| hs.iter_mut().find(|h| h.shard == donor))
                {
                    h.tokens -= d.amount;
                }
            }
        }
        Ok(true)
    }

    /// A doubling that overtook the clones just made, with or without
    /// quotas: they take its count, keeping the grant count they were
    /// funded under, and give back what their shares held above the new one.
    async fn repair_clones(&self, source: &Source<'_>, highest: i64, created: &[u32]) {
        let raise = source.raise;
        let projection = [zae_table::bucket::SHARD_COUNT.to_owned()];
        let now_count = match self
            .store
            .get_attributes(&raise.key.pk(), SK_STATE, true, &projection)
            .await
        {
            Ok(item) => item.as_ref().map_or(0, stored_count),
            Err(e) => {
                tracing::warn!(error = %e, pk = %raise.key.pk(), "clone repair: shard 0 unreadable");
                return;
            }
        };
        let current = highest.max(now_count).min(MAX_SHARD_COUNT);
        if current <= source.count {
            return;
        }
        let quotas: Vec<String> = source
            .limits
            .iter()
            .filter(|l| l.quota.is_some())
            .map(|l| l.name.clone())
            .collect();
        let excess: Vec<(String, i64)> = source
            .limits
            .iter()
            .map(|l| (l.name.clone(), l.excess(source.count, current)))
            .collect();
        for shard in created {
            let pk = raise.key.shard(*shard).pk();
            let update = repair(&pk, current, source.count, &quotas, &excess);
            if let Err(e) = self.store.update(&update, Returns::Nothing).await
                && !matches!(e, StoreError::ConditionFailed { .. })
            {
                tracing::warn!(error = %e, shard, "clone repair failed");
            }
        }
    }
}

/// The deadline came before every sibling was read: retried with the batch.
fn out_of_time(raise: &Raise) -> StoreError {
    StoreError::Retryable {
        operation: "propagate",
        key: raise.key.pk(),
        message: "out of time before every sibling was read".into(),
    }
}

fn fatal(raise: &Raise, e: impl std::fmt::Display) -> StoreError {
    StoreError::Fatal {
        operation: "propagate",
        key: raise.key.pk(),
        message: e.to_string(),
    }
}

fn stored_count(item: &Item) -> i64 {
    item.get(zae_table::bucket::SHARD_COUNT)
        .and_then(Attr::as_int)
        .unwrap_or(1)
}

fn clone_limits_or_log(
    state: &BucketState<'_>,
    count: i64,
    raise: &Raise,
    now: i64,
) -> Option<Vec<CloneLimit>> {
    match crate::plan::shard::clone_limits(state, count, now) {
        Ok(limits) => Some(limits),
        Err(e) => {
            tracing::warn!(error = %e, pk = %raise.key.pk(), "undecodable stored schedule: not pre-creating shards");
            None
        }
    }
}

/// Each quota's holdings on the existing shards.
fn holdings(
    limits: &[CloneLimit],
    states: &[Shard<'_>],
    now: i64,
) -> BTreeMap<String, Vec<Holding>> {
    let mut out = BTreeMap::new();
    for limit in limits {
        let Some(rule) = &limit.quota else { continue };
        let held = states
            .iter()
            .filter(|(_, state)| state.limits.contains_key(limit.name.as_str()))
            .map(|(shard, state)| Holding::read(*shard, state, &limit.name, rule, now))
            .collect();
        out.insert(limit.name.clone(), held);
    }
    out
}

/// The grant count each quota on shard `shard` was sized at.
fn freeze_for(limits: &[CloneLimit], states: &[Shard<'_>], shard: u32) -> Vec<(String, i64)> {
    let Some((_, state)) = states.iter().find(|(s, _)| *s == shard) else {
        return Vec::new();
    };
    limits
        .iter()
        .filter_map(|l| {
            let rule = l.quota.as_ref()?;
            state
                .limits
                .contains_key(l.name.as_str())
                .then(|| (l.name.clone(), grant_count(state, &l.name, rule.capacity).0))
        })
        .collect()
}
