//! The config-write phase: each changed level's config item, its registry
//! update and its audit event, as the client's own setters write them; and
//! what each write owes the buckets, from the config before and after it.

use super::audit::{self, AuditContext};
use super::plan::{Action, Change, Plan};
use super::{ApplyError, Caller, Provisioner, Run, now_ms};
use crate::manifest::{Level, LevelDecl};
use futures::stream::{self, StreamExt};
use std::collections::{BTreeMap, BTreeSet};
use zae_table::Item;
use zae_table::config::{LevelConfig, audit_retention_days, item_to_write};
use zae_table::keys::{self, config_key};
use zae_table::provisioner::{FanOut, Kind};
use zae_table::registry;
use zae_table::store::{Condition, ITEM_ABSENT, ITEM_EXISTS, Returns, Store, StoreError, TxWrite};

/// Writes in flight at once.
const CONCURRENCY: usize = 16;
/// Tries of a transaction that concurrent ones keep cancelling.
const TRANSACT_ATTEMPTS: u32 = 5;

/// What the config writes did, for the report and the fan-outs.
#[derive(Debug, Default)]
pub struct Written {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub errors: Vec<String>,
    /// Per level: the config the plan read before this apply wrote it.
    pub previous: BTreeMap<Level, LevelConfig>,
    /// Per level: names whose soft-ness the write changed.
    pub soft_changed: BTreeMap<Level, BTreeSet<String>>,
}

impl Written {
    /// One more write of this kind.
    pub fn count(&mut self, action: Action) {
        match action {
            Action::Create => self.created += 1,
            Action::Update => self.updated += 1,
            Action::Delete => self.deleted += 1,
        }
    }
}

impl<S: Store> Provisioner<'_, S> {
    /// The config-write phase. Every owed fan-out the writes' old images
    /// reveal is added to `run.owed`. Stops starting writes at the caller's
    /// deadline: the fan-outs owed so far stay pending, and the apply fails.
    pub(super) async fn write_config(
        &self,
        plan: &Plan,
        declared: &[(Level, &LevelDecl)],
        caller: &Caller,
        run: &mut Run<'_, S>,
    ) -> Result<Written, ApplyError> {
        let retention = self.retention_days().await;
        let decl_of: BTreeMap<&Level, &LevelDecl> = declared.iter().map(|(l, d)| (l, *d)).collect();
        let total = plan.changes.len();
        let mut writes = Vec::with_capacity(total);
        for change in &plan.changes {
            let decl = decl_of.get(&change.level).copied();
            writes.push(self.write_audited(change, decl, &caller.principal, retention));
        }
        let mut writes = stream::iter(writes).buffered(CONCURRENCY);
        let mut written = Written::default();
        let mut done = 0usize;
        while let Some(outcome) = writes.next().await {
            written.record(&plan.changes[done], outcome, &mut run.owed);
            done += 1;
            if caller.out_of_time() && done < total {
                drop(writes);
                run.expire_all().await;
                return Err(ApplyError::OutOfTime { done, total });
            }
        }
        Ok(written)
    }

    /// The namespace's audit retention; the client's default when it cannot be read.
    async fn retention_days(&self) -> i64 {
        let pk = keys::pk_system(self.namespace);
        let config = self.store.get(&pk, keys::SK_CONFIG, false).await;
        audit_retention_days(config.ok().flatten().as_ref())
    }

    async fn write_audited(
        &self,
        change: &Change,
        decl: Option<&LevelDecl>,
        principal: &str,
        retention_days: i64,
    ) -> Result<Option<Item>, StoreError> {
        let context = AuditContext {
            namespace: self.namespace,
            principal,
            retention_days,
            at_ms: now_ms(),
        };
        let Some(old) = self.write_change(change).await? else {
            // An entity level already gone: the client logs no event for that either.
            return Ok(None);
        };
        self.audit(change, decl, old, &context).await
    }

    async fn audit(
        &self,
        change: &Change,
        decl: Option<&LevelDecl>,
        old: Option<Item>,
        context: &AuditContext<'_>,
    ) -> Result<Option<Item>, StoreError> {
        let event = match decl {
            Some(decl) => audit::Change::Set(decl),
            None => {
                let gone = old
                    .as_ref()
                    .or(change.live.as_ref())
                    .map(LevelConfig::decode);
                audit::Change::Deleted {
                    limit_names: gone
                        .as_ref()
                        .map(|c| c.limits.iter().map(|l| l.name.clone()).collect())
                        .unwrap_or_default(),
                    on_unavailable: gone.and_then(|c| c.on_unavailable),
                }
            }
        };
        let item = audit::audit_item(context, &change.level, &event);
        self.store.put(&item, None).await?;
        Ok(old)
    }

    /// One config write with its registry update. `Ok(Some(old))` carries
    /// the replaced item (`Some(None)`: there was none); `Ok(None)` is an
    /// entity level whose delete found it already gone.
    async fn write_change(&self, change: &Change) -> Result<Option<Option<Item>>, StoreError> {
        let ns = self.namespace;
        match (&change.item, &change.level) {
            (Some(built), Level::Entity { resource, .. }) => {
                let item = item_to_write(built, change.live.as_ref());
                if change.live.is_none() && self.create_counted(&item, resource).await? {
                    return Ok(Some(None));
                }
                Ok(Some(self.store.put(&item, None).await?))
            }
            (Some(built), level) => {
                let item = item_to_write(built, change.live.as_ref());
                let old = self.store.put(&item, None).await?;
                if let Level::Resource(resource) = level {
                    let update = registry::add_resource(ns, resource);
                    self.store.update(&update, Returns::Nothing).await?;
                }
                Ok(Some(old))
            }
            (None, Level::Entity { resource, .. }) => {
                let deleted = self.delete_counted(&change.level, resource).await?;
                Ok(deleted.then(|| change.live.clone()))
            }
            (None, level) => {
                let (pk, sk) = config_key(ns, level);
                let old = self.store.delete(&pk, &sk, None).await?;
                if let Level::Resource(resource) = level {
                    let update = registry::remove_resource(ns, resource);
                    self.store.update(&update, Returns::Nothing).await?;
                }
                Ok(Some(old))
            }
        }
    }

    /// A transaction, tried again with backoff while it is cancelled by a
    /// concurrent one (two applies updating the same registry counter).
    async fn transact_retrying(&self, writes: &[TxWrite]) -> Result<(), StoreError> {
        let mut delay = std::time::Duration::from_millis(50);
        let mut attempt = 1;
        loop {
            match self.store.transact(writes).await {
                Err(err) if err.is_retryable() && attempt < TRANSACT_ATTEMPTS => {
                    tracing::debug!(error = %err, attempt, "transaction cancelled; retrying");
                    tokio::time::sleep(delay.mul_f64(0.5 + fastrand::f64() / 2.0)).await;
                    delay *= 2;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Creates an entity config and counts it in one transaction, as the
    /// client's `set_limits` does; `false` when it already existed.
    async fn create_counted(&self, item: &Item, resource: &str) -> Result<bool, StoreError> {
        let writes = [
            TxWrite::Put {
                item: item.clone(),
                condition: Some(Condition::plain(ITEM_ABSENT)),
            },
            TxWrite::Update(registry::count_entity_config(self.namespace, resource, 1)),
        ];
        match self.transact_retrying(&writes).await {
            Ok(()) => Ok(true),
            Err(StoreError::ConditionFailed { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Deletes an entity config and uncounts it in one transaction, then
    /// drops the resource's count once it is zero; `false` when it was gone.
    async fn delete_counted(&self, level: &Level, resource: &str) -> Result<bool, StoreError> {
        let (pk, sk) = config_key(self.namespace, level);
        let writes = [
            TxWrite::Delete {
                pk,
                sk,
                condition: Some(Condition::plain(ITEM_EXISTS)),
            },
            TxWrite::Update(registry::count_entity_config(self.namespace, resource, -1)),
        ];
        match self.transact_retrying(&writes).await {
            Ok(()) => {}
            Err(StoreError::ConditionFailed { .. }) => return Ok(false),
            Err(err) => return Err(err),
        }
        let cleanup = registry::drop_empty_entity_count(self.namespace, resource);
        match self.store.update(&cleanup, Returns::Nothing).await {
            Ok(_) | Err(StoreError::ConditionFailed { .. }) => Ok(true),
            Err(err) => Err(err),
        }
    }
}

impl Written {
    /// Counts one finished write, and adds what it owes to `owed`.
    fn record(
        &mut self,
        change: &Change,
        outcome: Result<Option<Item>, StoreError>,
        owed: &mut BTreeSet<FanOut>,
    ) {
        let old = match outcome {
            Ok(old) => old,
            Err(err) => {
                self.errors.push(format!(
                    "{} {} {}: {err}",
                    change.action.name(),
                    change.level.kind(),
                    change.level.target().unwrap_or_else(|| "None".into())
                ));
                return;
            }
        };
        self.count(change.action);
        let before = old
            .as_ref()
            .or(change.live.as_ref())
            .map(LevelConfig::decode);
        let after = change.item.as_ref().map(LevelConfig::decode);
        // The write's own old image may show a change the plan's read did not.
        for kind in kinds_between(&change.level, before.as_ref(), after.as_ref()) {
            owed.insert(FanOut {
                kind,
                level: change.level.clone(),
            });
        }
        self.soft_changed.insert(
            change.level.clone(),
            soft_difference(before.as_ref(), after.as_ref()),
        );
        if let Some(before) = change.live.as_ref().map(LevelConfig::decode) {
            self.previous.insert(change.level.clone(), before);
        }
    }
}

/// Every fan-out a level can owe.
pub fn every_kind(level: &Level) -> Vec<Kind> {
    match level {
        Level::System => vec![Kind::Soft],
        Level::Resource(_) => vec![Kind::Disabled, Kind::Cascade, Kind::Soft],
        Level::Entity { .. } => vec![Kind::Disabled, Kind::Cascade, Kind::Sync],
    }
}

/// The fan-outs a change will owe, from its live item and the item it writes.
pub fn predicted(change: &Change) -> Vec<Kind> {
    let before = change.live.as_ref().map(LevelConfig::decode);
    let after = change.item.as_ref().map(LevelConfig::decode);
    kinds_between(&change.level, before.as_ref(), after.as_ref())
}

fn soft_difference(before: Option<&LevelConfig>, after: Option<&LevelConfig>) -> BTreeSet<String> {
    let names = |c: Option<&LevelConfig>| -> BTreeSet<String> {
        c.map(|c| c.soft_names().into_iter().collect())
            .unwrap_or_default()
    };
    names(before)
        .symmetric_difference(&names(after))
        .cloned()
        .collect()
}

/// What moving a level from `before` to `after` owes its buckets.
pub fn kinds_between(
    level: &Level,
    before: Option<&LevelConfig>,
    after: Option<&LevelConfig>,
) -> Vec<Kind> {
    let mut kinds = Vec::new();
    let disabled = |c: Option<&LevelConfig>| c.and_then(|c| c.disabled);
    let cascade = |c: Option<&LevelConfig>| c.and_then(|c| c.cascade);
    let is_target = !matches!(level, Level::System);
    if is_target && disabled(before) != disabled(after) {
        kinds.push(Kind::Disabled);
    }
    if is_target && cascade(before) != cascade(after) {
        kinds.push(Kind::Cascade);
    }
    if !matches!(level, Level::Entity { .. }) && !soft_difference(before, after).is_empty() {
        kinds.push(Kind::Soft);
    }
    if matches!(level, Level::Entity { .. }) {
        let limits = |c: Option<&LevelConfig>| {
            c.map(|c| (c.limits.clone(), c.sched_tz.clone()))
                .unwrap_or_default()
        };
        if limits(before) != limits(after) {
            kinds.push(Kind::Sync);
        }
    }
    kinds
}
