//! The plan: the manifest diffed against the namespace's managed set, every
//! level whose live config item already equals what would be written
//! dropped, and the report both protocols return.

use super::adaptive::AdaptiveChange;
pub use super::change::{Action, ChangeLine};
use super::{ApplyError, Provisioner, store_err};
use crate::manifest::{Level, Manifest};
use futures::stream::{self, StreamExt, TryStreamExt};
use std::collections::BTreeSet;
use zae_table::Item;
use zae_table::config::{build_item, item_to_write};
use zae_table::keys::config_key;
use zae_table::provisioner::{Pending, Rollback, State};
use zae_table::store::Store;
use zae_table::value::same_item;

/// Reads in flight at once.
const CONCURRENCY: usize = 16;

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
    /// The adaptive declaration's change, written after the config levels.
    pub adaptive: Option<AdaptiveChange>,
    /// What the plan says beside its changes (adaptive limits that stay at base).
    pub notes: Vec<String>,
    pub unchanged: usize,
    pub full: bool,
    pub resumed: bool,
    pub pending: Vec<Pending>,
    pub state: State,
    /// Set on the rollback of a failed claim: the record it puts back.
    pub restore: Option<Rollback>,
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
    /// How many of `errors` are config writes that failed (the rest are
    /// fan-outs, retried by the next apply). Not part of the protocol.
    #[serde(skip)]
    pub config_errors: usize,
    /// Fan-outs stopped at the deadline with their place recorded (counted
    /// in `pending`). Not part of the protocol.
    #[serde(skip)]
    pub stopped: usize,
    /// The namespace id the apply worked on. Not part of the protocol.
    #[serde(skip)]
    pub namespace: String,
    /// What the plan says beside its changes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
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
            .chain(self.adaptive.as_ref().map(AdaptiveChange::line))
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
            notes: self.notes.clone(),
            ..Report::default()
        }
    }
}

/// Every level the manifest declares or the namespace manages, with the
/// item a write would put: system, then resources, then entities; within
/// each, writes before deletes.
fn wanted(
    namespace: &str,
    manifest: &Manifest,
    state: &State,
) -> Vec<(Action, Level, Option<Item>)> {
    let managed: BTreeSet<Level> = state.managed.levels().into_iter().collect();
    let declared = manifest.declared();
    let declared_levels: BTreeSet<&Level> = declared.iter().map(|(l, _)| l).collect();
    let mut wanted: Vec<(Action, Level, Option<Item>)> = declared
        .iter()
        .map(|(level, decl)| {
            let action = if managed.contains(level) {
                Action::Update
            } else {
                Action::Create
            };
            (
                action,
                level.clone(),
                Some(build_item(namespace, level, &decl.config())),
            )
        })
        .collect();
    wanted.extend(
        managed
            .iter()
            .filter(|level| !declared_levels.contains(level))
            .map(|level| (Action::Delete, level.clone(), None)),
    );
    wanted.sort_by_key(|(action, level, _)| {
        let rank = match level {
            Level::System => 0,
            Level::Resource(_) => 1,
            Level::Entity { .. } => 2,
        };
        (rank, *action == Action::Delete, level.clone())
    });
    wanted
}

impl<S: Store> Provisioner<'_, S> {
    /// The namespace's `#PROVISIONER` record.
    pub async fn read_state(&self) -> Result<State, ApplyError> {
        let pk = zae_table::keys::pk_system(self.namespace);
        let item = self
            .store
            .get(&pk, zae_table::keys::SK_PROVISIONER, true)
            .await
            .map_err(store_err("reading the #PROVISIONER record"))?;
        Ok(State::decode(item.as_ref()))
    }

    /// The levels that would change, each with its live item.
    pub async fn plan(&self, manifest: &Manifest, full: bool) -> Result<Plan, ApplyError> {
        let state = self.read_state().await?;
        self.plan_from(state, manifest, full).await
    }

    /// [`Provisioner::plan`] from a state record the caller has already read.
    pub async fn plan_from(
        &self,
        state: State,
        manifest: &Manifest,
        full: bool,
    ) -> Result<Plan, ApplyError> {
        let pending = super::pending::read(self.store, self.namespace)
            .await
            .map_err(store_err("reading pending fan-outs"))?;
        let now = super::now_ms();
        let resumed = full && pending.iter().any(|p| p.interrupted_full(now));
        let wanted = wanted(self.namespace, manifest, &state);

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
            let same = match (&item, &live) {
                (Some(item), Some(live)) => same_item(&item_to_write(item, Some(live)), live),
                _ => false,
            };
            // A full apply rewrites every level, unless it resumes an interrupted one.
            let rewrite = full && !resumed;
            if same && !rewrite {
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
        let adaptive = self
            .plan_adaptive(manifest.declaration(), full && !resumed)
            .await?;
        Ok(Plan {
            changes,
            adaptive,
            notes: manifest.adaptive_notes(),
            unchanged,
            full,
            resumed,
            pending,
            state,
            restore: None,
        })
    }

    pub(super) async fn read_config(&self, level: &Level) -> Result<Option<Item>, ApplyError> {
        let (pk, sk) = config_key(self.namespace, level);
        self.store
            .get(&pk, &sk, true)
            .await
            .map_err(store_err(format!(
                "reading the {} config",
                level.describe()
            )))
    }
}
