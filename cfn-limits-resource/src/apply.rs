//! Plan and apply: one pipeline for CloudFormation, the direct invoke and
//! the `zae-limits` CLI.
//!
//! A plan diffs the manifest against the namespace's managed set and drops
//! every level whose live config item already equals what would be written.
//! An apply then gates versions, records the fan-outs it will owe as pending
//! items, writes config items (with registries and audit events), runs the
//! fan-outs from live config, and writes the `#PROVISIONER` record.

use crate::audit::{self, AuditContext};
use crate::config::{AUDIT_RETENTION, LevelConfig, build_item, config_key, item_to_write};
use crate::fanout::{self, Directive, FanOuts, now_ms};
use crate::gate::{self, GateError};
use crate::manifest::{Level, LevelDecl, Manifest};
use crate::pending::{self, FanOut, Holder, Kind, Pending};
use crate::state::{self, SK_PROVISIONER, State};
use crate::store::{Attr, Condition, Item, Store, StoreError, TxWrite, Update, same_item};
use futures::stream::{self, StreamExt, TryStreamExt};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use zae_table::keys;

/// Reads and writes in flight at once.
const CONCURRENCY: usize = 16;
const REGISTRY_RESOURCES: &str = "#RESOURCES";
const REGISTRY_ENTITY_CONFIGS: &str = "#ENTITY_CONFIG_RESOURCES";
/// From this many owed fan-outs on, buckets are found by one namespace-wide
/// sweep instead of two queries per fan-out.
const SWEEP_THRESHOLD: usize = 64;
/// Rounds of "fan out, re-read config" before a moving level is left pending.
const FAN_OUT_ROUNDS: usize = 3;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error("{context}: {source}")]
    Store {
        context: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "out of time after {done} of {total} config writes; nothing further was written. \
         The fan-outs owed so far are recorded as pending and the next apply finishes them"
    )]
    OutOfTime { done: usize, total: usize },
}

fn store_err(context: impl Into<String>) -> impl FnOnce(StoreError) -> ApplyError {
    let context = context.into();
    move |source| ApplyError::Store { context, source }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Delete,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }
}

/// One level the plan will write.
#[derive(Debug, Clone)]
pub struct Change {
    pub action: Action,
    pub level: Level,
    /// The item the write puts (absent for a delete).
    pub item: Option<Item>,
    /// The live item read for the plan; `None` when absent.
    pub live: Option<Item>,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub unchanged: usize,
    pub full: bool,
    pub resumed: bool,
    pub pending: Vec<Pending>,
    pub state: State,
}

/// The response both protocols return, in the 0.17.0 field names.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    pub status: &'static str,
    pub changes: Vec<ChangeLine>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted: Option<usize>,
    pub unchanged: usize,
    pub full: bool,
    pub resumed: bool,
    pub pending: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChangeLine {
    pub action: &'static str,
    pub level: &'static str,
    pub target: Option<String>,
}

impl Plan {
    pub fn lines(&self) -> Vec<ChangeLine> {
        self.changes
            .iter()
            .map(|c| ChangeLine {
                action: c.action.name(),
                level: c.level.kind(),
                target: c.level.target(),
            })
            .collect()
    }

    pub fn report(&self) -> Report {
        Report {
            status: "planned",
            changes: self.lines(),
            unchanged: self.unchanged,
            full: self.full,
            resumed: self.resumed,
            pending: self.pending.len(),
            ..Report::default()
        }
    }
}

/// Who asks, and for how long they can wait.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The audit events' principal: a stack id, an invoker, a CLI user.
    pub principal: String,
    /// `<StackId>|<LogicalResourceId>` when a custom resource applies.
    pub owner: Option<String>,
    /// Stop starting new work at this instant (the deadline guard).
    pub stop_at: Option<Instant>,
    /// How long pending items stay leased to this apply.
    pub lease_ms: i64,
}

impl Caller {
    pub fn local(principal: &str) -> Caller {
        Caller {
            principal: principal.to_owned(),
            owner: None,
            stop_at: None,
            lease_ms: 900_000 + 60_000,
        }
    }
    fn out_of_time(&self) -> bool {
        self.stop_at.is_some_and(|stop| Instant::now() >= stop)
    }
}

pub struct Provisioner<'a, S> {
    pub store: &'a S,
    pub namespace: &'a str,
}

impl<'a, S: Store> Provisioner<'a, S> {
    pub async fn read_state(&self) -> Result<State, ApplyError> {
        let pk = keys::pk_system(self.namespace);
        let item = self
            .store
            .get(&pk, SK_PROVISIONER, true)
            .await
            .map_err(store_err("reading the #PROVISIONER record"))?;
        Ok(State::decode(item.as_ref()))
    }

    /// The levels that would change, each with its live item.
    pub async fn plan(&self, manifest: &Manifest, full: bool) -> Result<Plan, ApplyError> {
        let state = self.read_state().await?;
        let pending = pending::read(self.store, self.namespace)
            .await
            .map_err(store_err("reading pending fan-outs"))?;
        let now = now_ms();
        let resumed = full && pending.iter().any(|p| p.interrupted_full(now));
        let managed: BTreeSet<Level> = state.managed.levels().into_iter().collect();
        let declared = manifest.declared();
        let declared_levels: BTreeSet<Level> = declared.iter().map(|(l, _)| l.clone()).collect();

        let mut wanted: Vec<(Action, Level, Option<Item>)> = declared
            .iter()
            .map(|(level, decl)| {
                let action = if managed.contains(level) {
                    Action::Update
                } else {
                    Action::Create
                };
                let item = build_item(self.namespace, level, &LevelConfig::from_decl(decl));
                (action, level.clone(), Some(item))
            })
            .collect();
        wanted.extend(
            managed
                .iter()
                .filter(|level| !declared_levels.contains(*level))
                .map(|level| (Action::Delete, level.clone(), None)),
        );
        // System, then resources, then entities; within each, writes before deletes.
        wanted.sort_by_key(|(action, level, _)| {
            let rank = match level {
                Level::System => 0,
                Level::Resource(_) => 1,
                Level::Entity { .. } => 2,
            };
            (rank, *action == Action::Delete, level.clone())
        });

        // Futures built up front: a closure in the stream would not be
        // general enough over lifetimes for the spawned Lambda task.
        let mut reads = Vec::with_capacity(wanted.len());
        for (_, level, _) in &wanted {
            reads.push(self.read_config(level));
        }
        let reads: Vec<Option<Item>> = stream::iter(reads)
            .buffered(CONCURRENCY)
            .try_collect()
            .await?;

        let mut changes = Vec::new();
        let mut unchanged = 0;
        for ((action, level, item), live) in wanted.into_iter().zip(reads) {
            let unchanged_level = match (&item, &live) {
                (Some(item), Some(live)) => same_item(&item_to_write(item, Some(live)), live),
                (None, None) => false,
                _ => false,
            };
            if unchanged_level && !(full && !resumed) {
                unchanged += 1;
                continue;
            }
            changes.push(Change {
                action,
                level,
                item,
                live,
            });
        }
        Ok(Plan {
            changes,
            unchanged,
            full,
            resumed,
            pending,
            state,
        })
    }

    /// Applies a manifest and reports what it did. Errors before the first
    /// config write leave the table as it was; errors after it are listed
    /// in the report instead, and their fan-outs stay pending.
    pub async fn apply(
        &self,
        manifest: &Manifest,
        full: bool,
        caller: &Caller,
    ) -> Result<Report, ApplyError> {
        let plan = self.plan(manifest, full).await?;
        let declared = manifest.declared();
        let decls: Vec<&LevelDecl> = declared.iter().map(|(_, d)| *d).collect();
        gate::check(self.store, &decls).await?;

        let now = now_ms();
        let holder = Holder {
            store: self.store,
            namespace: self.namespace.to_owned(),
            token: uuid::Uuid::new_v4().simple().to_string(),
            lease_ms: now + caller.lease_ms,
            full,
        };
        let mut held: BTreeSet<FanOut> = BTreeSet::new();
        for pending in plan.pending.iter().filter(|p| p.claimable(now)) {
            let claimed = holder
                .claim(pending, now)
                .await
                .map_err(store_err(format!("claiming pending {}", pending.fan_out.sk())))?;
            if claimed {
                held.insert(pending.fan_out.clone());
            }
        }
        let mut owed: BTreeSet<FanOut> = held.clone();
        owed.extend(plan.state.cascade_pending.iter().map(|level| FanOut {
            kind: Kind::Cascade,
            level: level.clone(),
        }));
        let change_only = !full || plan.resumed;
        for change in &plan.changes {
            let kinds = if change_only {
                predicted(change)
            } else {
                every_kind(&change.level)
            };
            owed.extend(kinds.into_iter().map(|kind| FanOut {
                kind,
                level: change.level.clone(),
            }));
        }
        // Recorded before the first config write: a run that dies after it
        // leaves the work owed, not lost.
        record_ahead(&holder, &owed, &mut held).await?;

        let retention = self.retention_days().await;
        let mut report = Report {
            status: "applied",
            changes: plan.lines(),
            created: Some(0),
            updated: Some(0),
            deleted: Some(0),
            unchanged: plan.unchanged,
            full,
            resumed: plan.resumed,
            pending: 0,
            errors: Some(Vec::new()),
        };
        let mut errors = Vec::new();
        let decl_of: BTreeMap<&Level, &LevelDecl> = declared.iter().map(|(l, d)| (l, *d)).collect();
        let outcomes: Vec<(usize, Result<Option<Item>, StoreError>)> = {
            let mut done = 0usize;
            let mut outcomes = Vec::with_capacity(plan.changes.len());
            let mut pending_writes = Vec::with_capacity(plan.changes.len());
            for (i, change) in plan.changes.iter().enumerate() {
                let decl = decl_of.get(&change.level).copied();
                pending_writes.push(self.write_indexed(i, change, decl, &caller.principal, retention));
            }
            let mut writes = stream::iter(pending_writes).buffered(CONCURRENCY);
            while let Some(outcome) = writes.next().await {
                outcomes.push(outcome);
                done += 1;
                if caller.out_of_time() && done < plan.changes.len() {
                    drop(writes);
                    for fan_out in &held {
                        let _ = holder.expire(fan_out, now_ms()).await;
                    }
                    return Err(ApplyError::OutOfTime {
                        done,
                        total: plan.changes.len(),
                    });
                }
            }
            outcomes
        };
        let mut previous: BTreeMap<Level, LevelConfig> = BTreeMap::new();
        let mut soft_changed: BTreeMap<Level, BTreeSet<String>> = BTreeMap::new();
        for (i, outcome) in outcomes {
            let change = &plan.changes[i];
            match outcome {
                Ok(old) => {
                    let counter = match change.action {
                        Action::Create => &mut report.created,
                        Action::Update => &mut report.updated,
                        Action::Delete => &mut report.deleted,
                    };
                    *counter = counter.map(|n| n + 1);
                    let before = old.as_ref().or(change.live.as_ref()).map(LevelConfig::decode);
                    let after = change.item.as_ref().map(LevelConfig::decode);
                    // The write's own old image may show a change the plan's read did not.
                    for kind in kinds_between(&change.level, before.as_ref(), after.as_ref()) {
                        owed.insert(FanOut {
                            kind,
                            level: change.level.clone(),
                        });
                    }
                    soft_changed.insert(
                        change.level.clone(),
                        soft_difference(before.as_ref(), after.as_ref()),
                    );
                    if let Some(before) = change.live.as_ref().map(LevelConfig::decode) {
                        previous.insert(change.level.clone(), before);
                    }
                }
                Err(err) => errors.push(format!(
                    "{} {} {}: {err}",
                    change.action.name(),
                    change.level.kind(),
                    change.level.target().unwrap_or_else(|| "None".into())
                )),
            }
        }
        // What only the writes' old images showed.
        record_ahead(&holder, &owed, &mut held).await?;

        let fan_outs = FanOuts {
            store: self.store,
            namespace: self.namespace,
            known: None,
        };
        // The repair pass: an explicit `disabled` is stamped again on every
        // apply, for buckets created while an earlier fan-out ran.
        for (level, decl) in &declared {
            let Some(disabled) = decl.disabled else { continue };
            let already = owed.contains(&FanOut {
                kind: Kind::Disabled,
                level: level.clone(),
            });
            if already || matches!(level, Level::System) || caller.out_of_time() {
                continue;
            }
            let directive = Directive {
                reassert: Some(disabled),
                ..Directive::default()
            };
            if let Err(err) = fan_outs.run(Kind::Disabled, level, &directive).await {
                errors.push(format!(
                    "disable fan-out {} {}: {err} (retried on the next apply)",
                    level.kind(),
                    level.target().unwrap_or_default()
                ));
            }
        }

        let mut order: Vec<FanOut> = owed.iter().cloned().collect();
        order.sort_by_key(|f| (f.run_order(), f.level.clone()));
        // Many fan-outs share one namespace-wide discovery, swept before and
        // after them all (the second sweep catches buckets created meanwhile).
        let swept = if order.len() >= SWEEP_THRESHOLD {
            match fanout::sweep(self.store, self.namespace).await {
                Ok(buckets) => Some(buckets),
                Err(err) => {
                    tracing::warn!(error = %err, "bucket sweep failed; discovering per level");
                    None
                }
            }
        } else {
            None
        };
        let sweeping = FanOuts {
            known: swept.as_deref(),
            ..fan_outs
        };
        let mut finished = Vec::new();
        for fan_out in order {
            if caller.out_of_time() {
                errors.push(format!(
                    "{} fan-out {} {}: not started before the deadline (retried on the next apply)",
                    fan_out.kind.name(),
                    fan_out.level.kind(),
                    fan_out.level.target().unwrap_or_default()
                ));
                continue;
            }
            let directive = Directive {
                reassert: None,
                soft_changed: soft_changed.get(&fan_out.level).cloned().unwrap_or_default(),
                previous: previous.get(&fan_out.level).cloned(),
            };
            match self.settle(&sweeping, &fan_out, &directive).await {
                Ok(true) => finished.push((fan_out, directive)),
                Ok(false) => tracing::warn!(
                    pending = %fan_out.sk(),
                    "config kept changing during the fan-out; left pending for the next apply"
                ),
                Err(err) => errors.push(fan_out_error(&fan_out, &err)),
            }
        }
        if let Some(first) = &swept {
            let seen: BTreeSet<String> = first.iter().map(|(key, _)| key.pk()).collect();
            let fresh: Vec<_> = match fanout::sweep(self.store, self.namespace).await {
                Ok(all) => all.into_iter().filter(|(key, _)| !seen.contains(&key.pk())).collect(),
                Err(err) => {
                    errors.push(format!("bucket sweep: {err} (fan-outs retried on the next apply)"));
                    finished.clear();
                    Vec::new()
                }
            };
            if !fresh.is_empty() {
                let late = FanOuts {
                    known: Some(&fresh),
                    ..fan_outs
                };
                let mut kept = Vec::new();
                for (fan_out, directive) in finished {
                    match late.run(fan_out.kind, &fan_out.level, &directive).await {
                        Ok(_) => kept.push((fan_out, directive)),
                        Err(err) => errors.push(fan_out_error(&fan_out, &err)),
                    }
                }
                finished = kept;
            }
        }
        let mut released = BTreeSet::new();
        for (fan_out, _) in finished {
            if let Err(err) = holder.release(&fan_out).await {
                tracing::warn!(pending = %fan_out.sk(), error = %err, "releasing a finished fan-out failed");
            }
            released.insert(fan_out);
        }
        let later = now_ms();
        for fan_out in held.difference(&released) {
            if let Err(err) = holder.expire(fan_out, later).await {
                tracing::warn!(pending = %fan_out.sk(), error = %err, "expiring a pending share failed");
            }
        }

        let state = State {
            managed: manifest.managed_set(),
            owner: caller.owner.clone().or(plan.state.owner.clone()),
            cascade_pending: Vec::new(),
            applied_hash: Some(manifest.applied_hash()),
        };
        // A no-change apply costs reads only: the record is rewritten only
        // when what it says changes (`last_applied` is the last apply that did).
        if state != plan.state {
            let record = state.encode(
                self.namespace,
                &state::iso_now(),
                state.applied_hash.as_deref().unwrap_or_default(),
            );
            self.store
                .put(&record, None)
                .await
                .map_err(store_err("writing the #PROVISIONER record"))?;
        }
        report.pending = pending::read(self.store, self.namespace)
            .await
            .map_err(store_err("counting pending fan-outs"))?
            .len();
        report.errors = Some(errors);
        Ok(report)
    }

    async fn read_config(&self, level: &Level) -> Result<Option<Item>, ApplyError> {
        let (pk, sk) = config_key(self.namespace, level);
        self.store
            .get(&pk, &sk, true)
            .await
            .map_err(store_err(format!("reading the {} config", describe(level))))
    }

    async fn write_indexed(
        &self,
        i: usize,
        change: &Change,
        decl: Option<&LevelDecl>,
        principal: &str,
        retention_days: i64,
    ) -> (usize, Result<Option<Item>, StoreError>) {
        let context = AuditContext {
            namespace: self.namespace,
            principal,
            retention_days,
            at_ms: now_ms(),
        };
        (i, self.write_change(change, decl, &context).await)
    }

    /// Runs a fan-out from live config until the level holds still across it.
    async fn settle(
        &self,
        fan_outs: &FanOuts<'_, S>,
        fan_out: &FanOut,
        directive: &Directive,
    ) -> Result<bool, StoreError> {
        let (pk, sk) = config_key(self.namespace, &fan_out.level);
        let mut before = self.store.get(&pk, &sk, true).await?;
        for _ in 0..FAN_OUT_ROUNDS {
            let tally = fan_outs
                .run_on(fan_out.kind, &fan_out.level, before.as_ref(), directive)
                .await?;
            tracing::info!(
                fan_out = %fan_out.sk(),
                stamped = tally.stamped,
                skipped = tally.skipped,
                "fan-out ran"
            );
            let after = self.store.get(&pk, &sk, true).await?;
            let still = match (&before, &after) {
                (Some(a), Some(b)) => same_item(a, b),
                (None, None) => true,
                _ => false,
            };
            if still {
                return Ok(true);
            }
            before = after;
        }
        Ok(false)
    }

    async fn retention_days(&self) -> i64 {
        let pk = keys::pk_system(self.namespace);
        match self.store.get(&pk, keys::SK_CONFIG, false).await {
            Ok(Some(item)) => item
                .get(AUDIT_RETENTION)
                .and_then(Attr::as_int)
                .filter(|days| *days > 0)
                .unwrap_or(zae_table::audit::DEFAULT_RETENTION_DAYS),
            _ => zae_table::audit::DEFAULT_RETENTION_DAYS,
        }
    }

    /// One config write with its registry update and audit event; returns
    /// the replaced item.
    async fn write_change(
        &self,
        change: &Change,
        decl: Option<&LevelDecl>,
        context: &AuditContext<'_>,
    ) -> Result<Option<Item>, StoreError> {
        let ns = self.namespace;
        let registry = keys::pk_system(ns);
        let old = match (&change.item, &change.level) {
            (Some(built), Level::Entity { resource, .. }) => {
                let item = item_to_write(built, change.live.as_ref());
                let created = if change.live.is_none() {
                    // Created and counted together, as the client's set_limits does.
                    let counted = self
                        .store
                        .transact(&[
                            TxWrite::Put {
                                item: item.clone(),
                                condition: Some(Condition::plain("attribute_not_exists(PK)")),
                            },
                            TxWrite::Update(entity_registry(ns, resource, 1, true)),
                        ])
                        .await;
                    match counted {
                        Ok(()) => true,
                        Err(StoreError::ConditionFailed { .. }) => false,
                        Err(err) => return Err(err),
                    }
                } else {
                    false
                };
                if created {
                    None
                } else {
                    self.store.put(&item, None).await?
                }
            }
            (Some(built), level) => {
                let item = item_to_write(built, change.live.as_ref());
                let old = self.store.put(&item, None).await?;
                if let Level::Resource(resource) = level {
                    let update = Update {
                        pk: registry.clone(),
                        sk: REGISTRY_RESOURCES.into(),
                        expression: "SET GSI4PK = if_not_exists(GSI4PK, :gsi4pk), GSI4SK = if_not_exists(GSI4SK, :gsi4sk) ADD resources :resource".into(),
                        condition: None,
                        names: BTreeMap::new(),
                        values: BTreeMap::from([
                            (":resource".to_owned(), Attr::Ss(BTreeSet::from([resource.clone()]))),
                            (":gsi4pk".to_owned(), Attr::s(ns)),
                            (":gsi4sk".to_owned(), Attr::s(&registry)),
                        ]),
                    };
                    self.store.update(&update, crate::store::Returns::Nothing).await?;
                }
                old
            }
            (None, Level::Entity { resource, .. }) => {
                let (pk, sk) = config_key(ns, &change.level);
                let deleted = self
                    .store
                    .transact(&[
                        TxWrite::Delete {
                            pk: pk.clone(),
                            sk: sk.clone(),
                            condition: Some(Condition::plain("attribute_exists(PK)")),
                        },
                        TxWrite::Update(entity_registry(ns, resource, -1, false)),
                    ])
                    .await;
                match deleted {
                    Ok(()) => {
                        let cleanup = Update {
                            pk: registry.clone(),
                            sk: REGISTRY_ENTITY_CONFIGS.into(),
                            expression: "REMOVE #resource".into(),
                            condition: Some("#resource <= :zero".into()),
                            names: BTreeMap::from([("#resource".to_owned(), resource.clone())]),
                            values: BTreeMap::from([(":zero".to_owned(), Attr::n(0))]),
                        };
                        match self.store.update(&cleanup, crate::store::Returns::Nothing).await {
                            Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                            Err(err) => return Err(err),
                        }
                    }
                    // Already gone: the client logs no event for that either.
                    Err(StoreError::ConditionFailed { .. }) => return Ok(None),
                    Err(err) => return Err(err),
                }
                change.live.clone()
            }
            (None, level) => {
                let (pk, sk) = config_key(ns, level);
                let old = self.store.delete(&pk, &sk, None).await?;
                if let Level::Resource(resource) = level {
                    let update = Update {
                        pk: registry.clone(),
                        sk: REGISTRY_RESOURCES.into(),
                        expression: "DELETE resources :resource".into(),
                        condition: None,
                        names: BTreeMap::new(),
                        values: BTreeMap::from([(
                            ":resource".to_owned(),
                            Attr::Ss(BTreeSet::from([resource.clone()])),
                        )]),
                    };
                    self.store.update(&update, crate::store::Returns::Nothing).await?;
                }
                old
            }
        };
        let event = match decl {
            Some(decl) => audit::Change::Set(decl),
            None => {
                let gone = old.as_ref().or(change.live.as_ref()).map(LevelConfig::decode);
                audit::Change::Deleted {
                    limit_names: gone
                        .as_ref()
                        .map(|c| c.limits.iter().map(|l| l.name.clone()).collect())
                        .unwrap_or_default(),
                    on_unavailable: gone.and_then(|c| c.on_unavailable),
                }
            }
        };
        self.store
            .put(&audit::audit_item(context, &change.level, &event), None)
            .await?;
        Ok(old)
    }
}

/// Writes a pending share for every owed fan-out not held yet.
async fn record_ahead<S: Store>(
    holder: &Holder<'_, S>,
    owed: &BTreeSet<FanOut>,
    held: &mut BTreeSet<FanOut>,
) -> Result<(), ApplyError> {
    let missing: Vec<FanOut> = owed.difference(held).cloned().collect();
    for fan_out in missing {
        holder
            .write_ahead(&fan_out)
            .await
            .map_err(store_err(format!("recording pending {}", fan_out.sk())))?;
        held.insert(fan_out);
    }
    Ok(())
}

fn fan_out_error(fan_out: &FanOut, err: &StoreError) -> String {
    format!(
        "{} fan-out {} {}: {err} (retried on the next apply)",
        fan_out.kind.name(),
        fan_out.level.kind(),
        fan_out.level.target().unwrap_or_default()
    )
}

fn entity_registry(namespace: &str, resource: &str, delta: i64, with_keys: bool) -> Update {
    let registry = keys::pk_system(namespace);
    let mut values = BTreeMap::from([(":delta".to_owned(), Attr::n(delta))]);
    let expression = if with_keys {
        values.insert(":gsi4pk".into(), Attr::s(namespace));
        values.insert(":gsi4sk".into(), Attr::s(&registry));
        "SET GSI4PK = if_not_exists(GSI4PK, :gsi4pk), GSI4SK = if_not_exists(GSI4SK, :gsi4sk) ADD #resource :delta"
    } else {
        "ADD #resource :delta"
    };
    Update {
        pk: registry,
        sk: REGISTRY_ENTITY_CONFIGS.into(),
        expression: expression.into(),
        condition: None,
        names: BTreeMap::from([("#resource".to_owned(), resource.to_owned())]),
        values,
    }
}

fn describe(level: &Level) -> String {
    match level.target() {
        Some(target) => format!("{} {target}", level.kind()),
        None => "system".into(),
    }
}

/// Every fan-out a level can owe.
fn every_kind(level: &Level) -> Vec<Kind> {
    match level {
        Level::System => vec![Kind::Soft],
        Level::Resource(_) => vec![Kind::Disabled, Kind::Cascade, Kind::Soft],
        Level::Entity { .. } => vec![Kind::Disabled, Kind::Cascade, Kind::Sync],
    }
}

/// The fan-outs a change will owe, from its live item and the item it writes.
fn predicted(change: &Change) -> Vec<Kind> {
    let before = change.live.as_ref().map(LevelConfig::decode);
    let after = change.item.as_ref().map(LevelConfig::decode);
    kinds_between(&change.level, before.as_ref(), after.as_ref())
}

fn soft_difference(before: Option<&LevelConfig>, after: Option<&LevelConfig>) -> BTreeSet<String> {
    let names = |c: Option<&LevelConfig>| -> BTreeSet<String> {
        c.map(|c| c.soft_names().into_iter().collect()).unwrap_or_default()
    };
    names(before)
        .symmetric_difference(&names(after))
        .cloned()
        .collect()
}

/// What moving a level from `before` to `after` owes its buckets.
pub fn kinds_between(level: &Level, before: Option<&LevelConfig>, after: Option<&LevelConfig>) -> Vec<Kind> {
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
