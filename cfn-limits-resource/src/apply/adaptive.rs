//! The namespace's adaptive declaration (`zae_table::adaptive::Declaration`):
//! planned beside the config levels, written after them. One item per
//! namespace, replaced whole, deleted when the manifest declares nothing
//! adaptive.

use super::plan::{Action, ChangeLine};
use super::{ApplyError, Provisioner, store_err};
use zae_table::adaptive::Declaration;
use zae_table::keys;
use zae_table::store::{Store, StoreError};

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
                limits
                    .iter()
                    .map(move |(limit, tpm)| format!("{resource} {limit} ~{tpm}/min"))
            })
            .collect();
        parts.extend(d.levels.iter().map(|l| {
            let scale = l
                .max_scale
                .map(|s| format!(" (max {}x)", s.as_f64()))
                .unwrap_or_default();
            format!("{} {} adaptive{scale}", l.level.describe(), l.limit)
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
        let pk = keys::pk_adaptive(self.namespace);
        let live = self
            .store
            .get(&pk, keys::SK_ADAPTIVE_DECLARATION, true)
            .await
            .map_err(store_err("reading the adaptive declaration"))?;
        // An unreadable live item is rewritten.
        let live_decoded = live.as_ref().map(|item| Declaration::from_item(item).ok());
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
