//! What an apply reads first and writes last about its namespace: the id
//! of a namespace name, from the client's registry, and the `#PROVISIONER`
//! state record (its layout is `zae_table::provisioner::State`).

use super::{ApplyError, Caller, Ownership, Provisioner, store_err};
use crate::manifest::Manifest;
use zae_table::keys;
use zae_table::provisioner::State;
use zae_table::registry;
use zae_table::store::{Store, StoreError};

/// The id of a namespace name, from the client's registry (`_/SYSTEM#`,
/// `#NAMESPACE#<name>`); `None` when the name is not registered.
pub async fn namespace_id(store: &impl Store, name: &str) -> Result<Option<String>, StoreError> {
    let item = store
        .get(&keys::pk_registry(), &keys::sk_namespace(name), true)
        .await?;
    Ok(item
        .as_ref()
        .and_then(registry::namespace_id)
        .map(str::to_owned))
}

/// `2026-11-29T18:00:00.123456+00:00`, Python's `datetime.isoformat()` in UTC.
pub fn iso_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f+00:00")
        .to_string()
}

impl<S: Store> Provisioner<'_, S> {
    /// The last phase: the record names the manifest's managed set and the
    /// owning custom resource. A no-change apply costs reads only: the record
    /// is rewritten only when what it says changes (`last_applied` is the
    /// last apply that did).
    pub(super) async fn record_state(
        &self,
        manifest: &Manifest,
        before: &State,
        caller: &Caller,
    ) -> Result<(), ApplyError> {
        let state = State {
            managed: manifest.managed_set(),
            owner: match &caller.ownership {
                Ownership::Keep => before.owner.clone(),
                Ownership::Claim(owner) => Some(owner.clone()),
                Ownership::Release => None,
            },
            cascade_pending: Vec::new(),
            applied_hash: Some(manifest.applied_hash()),
        };
        if state == *before {
            return Ok(());
        }
        let record = state.encode(
            self.namespace,
            &iso_now(),
            state.applied_hash.as_deref().unwrap_or_default(),
        );
        self.store
            .put(&record, None)
            .await
            .map_err(store_err("writing the #PROVISIONER record"))?;
        Ok(())
    }
}
