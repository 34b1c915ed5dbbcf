//! What an apply reads first and writes last about its namespace: the id
//! of a namespace name, from the client's registry, and the `#PROVISIONER`
//! state record (its layout is `zae_table::provisioner::State`).

use super::{ApplyError, Caller, Ownership, Provisioner, store_err};
use crate::manifest::Manifest;
use std::collections::BTreeMap;
use zae_table::Attr;
use zae_table::keys;
use zae_table::provisioner::{CFN_OWNER, State};
use zae_table::registry;
use zae_table::store::{Condition, Store, StoreError};

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

/// The owner a record names once `caller` has applied.
fn owner_after(caller: &Caller, before: &State) -> Option<String> {
    match &caller.ownership {
        Ownership::Keep => before.owner.clone(),
        Ownership::Claim(owner) => Some(owner.clone()),
        Ownership::Release(_) => None,
    }
}

impl<S: Store> Provisioner<'_, S> {
    /// Before the first config write: the record names every level this
    /// apply may leave written (the old managed set and the new one) and the
    /// owner it claims, so a run that dies midway leaves nothing enforced that
    /// nobody owns. Returns the record as it now stands.
    pub(super) async fn record_intent(
        &self,
        manifest: &Manifest,
        before: &State,
        caller: &Caller,
    ) -> Result<State, ApplyError> {
        let intent = State {
            managed: before.managed.union(&manifest.managed_set()),
            // A Delete holds the namespace while it deletes (a namespace
            // nobody owned included: no stack can claim it meanwhile) and
            // releases it only once its levels are gone.
            owner: match &caller.ownership {
                Ownership::Release(me) => Some(me.clone()),
                _ => owner_after(caller, before),
            },
            cascade_pending: before.cascade_pending.clone(),
            applied_hash: before.applied_hash.clone(),
        };
        self.write_record(&intent, before, caller).await?;
        Ok(intent)
    }

    /// The last phase: the record names the manifest's managed set and the
    /// owning custom resource.
    pub(super) async fn record_state(
        &self,
        manifest: &Manifest,
        before: &State,
        caller: &Caller,
    ) -> Result<(), ApplyError> {
        let state = State {
            managed: manifest.managed_set(),
            owner: owner_after(caller, before),
            cascade_pending: Vec::new(),
            applied_hash: Some(manifest.applied_hash()),
        };
        // Past the writes: a lost condition here is no longer "nothing written".
        match self.write_record(&state, before, caller).await {
            Err(ApplyError::Owned { namespace }) => Err(ApplyError::OwnedAfter { namespace }),
            other => other,
        }
    }

    /// Writes the record when what it says changes, so a no-change apply
    /// costs reads only (`last_applied` is the last apply that changed it).
    /// A custom resource claims the namespace in the same conditional write:
    /// of two stacks applying at once, one wins and the other writes nothing.
    /// Its Delete releases it under the same condition, so a release never
    /// drops a claim another resource made since the record was read.
    async fn write_record(
        &self,
        state: &State,
        before: &State,
        caller: &Caller,
    ) -> Result<(), ApplyError> {
        // A Delete's claim is always written: it is the check, before any
        // delete, that no other resource claimed the namespace since the read.
        let delete = matches!(caller.ownership, Ownership::Release(_));
        if state == before && !delete {
            return Ok(());
        }
        let record = state.encode(
            self.namespace,
            &iso_now(),
            state.applied_hash.as_deref().unwrap_or_default(),
        );
        let claim = match &caller.ownership {
            Ownership::Claim(me) | Ownership::Release(me) => Some(Condition {
                expression: "attribute_not_exists(#o) OR #o = :me".into(),
                names: BTreeMap::from([("#o".to_owned(), CFN_OWNER.to_owned())]),
                values: BTreeMap::from([(":me".to_owned(), Attr::s(me))]),
            }),
            _ => None,
        };
        match self.store.put(&record, claim.as_ref()).await {
            Ok(_) => Ok(()),
            Err(StoreError::ConditionFailed { .. }) => Err(ApplyError::Owned {
                namespace: self.namespace.to_owned(),
            }),
            Err(err) => Err(store_err("writing the #PROVISIONER record")(err)),
        }
    }
}
