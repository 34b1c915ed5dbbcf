//! The namespace's adaptive declaration (`zae_table::adaptive::Declaration`):
//! planned beside the config levels, written after them. One item per
//! namespace, replaced whole, deleted when the manifest declares nothing
//! adaptive.

use super::change::{Action, ChangeLine};
use super::{ApplyError, Caller, Provisioner, store_err};
use zae_adaptive::pass::{self, Writes};
use zae_table::adaptive::Declaration;
use zae_table::adaptive::allocation::Allocated;
use zae_table::adaptive::target::Target;
use zae_table::keys;
use zae_table::store::{Returns, Store, StoreError};

/// The declaration the apply will write, or delete.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveChange {
    pub action: Action,
    pub declaration: Declaration,
}

impl AdaptiveChange {
    /// What the declaration holds, for the plan's line.
    pub fn line(&self) -> ChangeLine {
        let d = &self.declaration;
        let mut parts: Vec<String> = d
            .capacity
            .iter()
            .flat_map(|(resource, limits)| {
                limits.iter().map(move |(limit, tpm)| {
                    let target = match d.target_utilization(resource, limit) {
                        t if t < 1.0 => format!(" at {}%", (t * 100.0 * 100.0).round() / 100.0),
                        _ => String::new(),
                    };
                    let share = if d.shares_by_demand(resource) {
                        ", shared by demand"
                    } else {
                        ""
                    };
                    format!("{resource} {limit} ~{tpm}/min{target}{share}")
                })
            })
            .collect();
        parts.extend(d.levels.iter().map(|l| {
            let scale = l
                .max_scale
                .map(|s| format!(" (max {}x)", s.as_f64()))
                .unwrap_or_default();
            let mode = if l.shadow {
                "adaptive in shadow"
            } else {
                "adaptive"
            };
            format!("{} {} {mode}{scale}", l.level.describe(), l.limit)
        }));
        ChangeLine {
            action: self.action.name(),
            level: "adaptive",
            target: (!parts.is_empty()).then(|| parts.join("; ")),
        }
    }
}

impl<S: Store> Provisioner<'_, S> {
    /// The change the manifest's declaration makes to the live one, if any;
    /// a full apply rewrites it all the same.
    pub(super) async fn plan_adaptive(
        &self,
        wanted: Declaration,
        full: bool,
    ) -> Result<Option<AdaptiveChange>, ApplyError> {
        let live = Declaration::read(self.store, self.namespace, true)
            .await
            .map_err(store_err("reading the adaptive declaration"))?;
        // An unreadable live item is rewritten.
        let live_decoded = live.map(Result::ok);
        let action = match (&live_decoded, wanted.is_empty()) {
            (None, true) => return Ok(None),
            (None, false) => Action::Create,
            (Some(_), true) => Action::Delete,
            (Some(Some(live)), false) if *live == wanted && !full => return Ok(None),
            (Some(_), false) => Action::Update,
        };
        Ok(Some(AdaptiveChange {
            action,
            declaration: wanted,
        }))
    }

    /// Writes (or deletes) the declaration.
    pub(super) async fn write_adaptive(&self, change: &AdaptiveChange) -> Result<(), StoreError> {
        match change.action {
            Action::Delete => {
                let pk = keys::pk_adaptive(self.namespace);
                self.store
                    .delete(&pk, keys::SK_ADAPTIVE_DECLARATION, None)
                    .await?;
            }
            Action::Create | Action::Update => {
                let item = change.declaration.to_item(self.namespace);
                self.store.put(&item, None).await?;
            }
        }
        Ok(())
    }
}

impl<S: Store> Provisioner<'_, S> {
    /// After the fan-outs: every adaptive target's buckets stamped again under
    /// the live declaration, so that a parameter sync that wrote base does
    /// not undo the factor, and a level that stopped being adaptive (or a
    /// resource that lost its estimated capacity) is back at base. A target
    /// no longer declared is retired. Each stamp is checked against the
    /// target's generation as read: a controller that moves it meanwhile
    /// owns its buckets. A pass cut short by the deadline is handed to the
    /// controller: the target takes a new generation, and its next tick
    /// stamps a whole lap.
    pub(super) async fn restamp_adaptive(&self, caller: &Caller, errors: &mut Vec<String>) {
        if let Err(e) = self.restamp(caller).await {
            errors.push(format!("adaptive restamp: {e}"));
        }
    }

    async fn restamp(&self, caller: &Caller) -> Result<(), StoreError> {
        let targets = Target::read_all(self.store, self.namespace).await?;
        if targets.is_empty() {
            return Ok(());
        }
        tracing::info!(
            target: super::PROGRESS,
            phase = "adaptive",
            "stamping the buckets of {} adaptive target(s) under the declaration",
            targets.len()
        );
        let declaration = Declaration::read(self.store, self.namespace, true)
            .await?
            .and_then(Result::ok);
        let declared: Vec<(String, String)> = declaration
            .as_ref()
            .map(|d| d.targets().into_iter().map(|(r, l, _)| (r, l)).collect())
            .unwrap_or_default();
        for read in targets {
            let kept = declared.contains(&(read.resource.clone(), read.limit.clone()));
            let under = declaration.as_ref().filter(|_| kept);
            let shares = under.is_some_and(|d| d.shares_by_demand(&read.resource));
            let Some(mut lap) = self.lap_of(&read, shares).await? else {
                // The controller moved it meanwhile: its own pass follows.
                continue;
            };
            let out_of_time = || super::passed(caller.stop_at);
            let done = pass::run(
                self.store,
                self.namespace,
                under,
                &mut lap,
                Writes::Checked,
                out_of_time,
            )
            .await?;
            if done.superseded {
                continue;
            }
            if done.finished && !shares {
                // Every bucket carries the lap's factor now, raised ones included.
                Allocated::forget_all(self.store, self.namespace, &read.resource, &read.limit)
                    .await?;
            }
            if done.finished && !kept {
                lap.remove(self.store, self.namespace).await?;
            } else if done.finished && lap.generation != read.generation {
                // Its own lap finished under the generation it took.
                let write = lap.write(self.namespace, Some(lap.generation));
                match self.store.update(&write, Returns::Nothing).await {
                    Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                    Err(e) => return Err(e),
                }
            } else if !done.finished {
                self.hand_over(&read, lap.generation).await?;
            }
        }
        Ok(())
    }

    /// A whole lap of `read`'s own, whatever lap the controller is in. A
    /// target that no longer shares by demand first takes a generation above
    /// every entity the share raised, written over the one read, so that
    /// the lap reaches their buckets too (`None`: the target moved meanwhile).
    async fn lap_of(&self, read: &Target, shares: bool) -> Result<Option<Target>, StoreError> {
        let mut lap = read.clone();
        lap.cursor = None;
        lap.lap_start = None;
        lap.wrapped = false;
        lap.owed.clear();
        if shares {
            return Ok(Some(lap));
        }
        let above =
            Allocated::above_all(self.store, self.namespace, &read.resource, &read.limit).await?;
        if above <= read.generation {
            return Ok(Some(lap));
        }
        let now = chrono::Utc::now().timestamp_millis();
        let generation = lap
            .fresh_above(self.store, self.namespace, above, now)
            .await?;
        lap.restamp(generation);
        match self
            .store
            .update(
                &lap.write(self.namespace, Some(read.generation)),
                Returns::Nothing,
            )
            .await
        {
            Ok(_) => Ok(Some(lap)),
            Err(StoreError::ConditionFailed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A pass cut short: the target (at `generation`, as the lap left it)
    /// takes a new generation, above every raise's, and the controller's
    /// next tick stamps a whole lap.
    async fn hand_over(&self, read: &Target, generation: i64) -> Result<(), StoreError> {
        let mut handed = read.clone();
        handed.generation = generation;
        let now = chrono::Utc::now().timestamp_millis();
        handed
            .restamp_above_raises(self.store, self.namespace, now)
            .await?;
        match self
            .store
            .update(
                &handed.write(self.namespace, Some(generation)),
                Returns::Nothing,
            )
            .await
        {
            // The controller moved it meanwhile: its own pass follows.
            Ok(_) | Err(StoreError::ConditionFailed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
