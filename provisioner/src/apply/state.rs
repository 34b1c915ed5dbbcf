//! What an apply reads first and writes last about its namespace: the id
//! of a namespace name, from the client's registry, and the `#PROVISIONER`
//! state record (its layout is `zae_table::provisioner::State`).

use super::{Action, ApplyError, Caller, Ownership, Plan, Provisioner, store_err};
use crate::manifest::Manifest;
use zae_table::Attr;
use zae_table::keys;
use zae_table::provisioner::{CFN_OWNER, ManagedSet, Rollback, Stamp, State};
use zae_table::registry;
use zae_table::store::{Condition, Store, StoreError, TxWrite};

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

/// What the owner's rollback may undo once this apply has written. A new
/// claim records the namespace as it found it; the owner's later applies
/// add the levels they create; a release or a CLI apply leaves it as read.
fn rollback_after(plan: &Plan, caller: &Caller) -> Option<Rollback> {
    let before = &plan.state;
    let Ownership::Claim(me) = &caller.ownership else {
        return before.rollback.clone();
    };
    // A level no item held at the plan's read is this owner's to delete.
    let created = ManagedSet::of(
        plan.changes
            .iter()
            .filter(|change| change.live.is_none() && change.item.is_some())
            .map(|change| change.level.clone()),
    );
    let adaptive_created = plan
        .adaptive
        .as_ref()
        .is_some_and(|change| change.action == Action::Create);
    if before.owner.as_deref() == Some(me.as_str()) {
        return before.rollback.clone().map(|mut found| {
            found.created = found.created.union(&created);
            found.adaptive_created |= adaptive_created;
            found
        });
    }
    Some(Rollback {
        managed: before.managed.clone(),
        applied_hash: before.applied_hash.clone(),
        created,
        adaptive_created,
    })
}

/// The condition every write of the record carries: the record is still
/// the version the apply read (or last wrote), so a write another apply
/// made meanwhile (its managed set, a claim, a release) is never
/// overwritten; and the owner is one this caller may write over (a custom
/// resource's claim or release where it or nobody owns the namespace, a
/// CLI or direct-invoke apply only over the owner it read), which also
/// holds against `zae-limits release-owner`, which leaves the stamp as is.
fn record_condition(caller: &Caller, before: &State) -> Condition {
    let (expression, owner) = match (&caller.ownership, &before.owner) {
        (Ownership::Claim(me) | Ownership::Release(me), _) => {
            ("attribute_not_exists(#o) OR #o = :me", Some(me))
        }
        (Ownership::Keep, Some(read)) => ("#o = :me", Some(read)),
        (Ownership::Keep, None) => ("attribute_not_exists(#o)", None),
    };
    let mut condition = before.stamp.unchanged();
    condition.expression = format!("({expression}) AND ({})", condition.expression);
    condition
        .names
        .insert("#o".to_owned(), CFN_OWNER.to_owned());
    if let Some(owner) = owner {
        condition.values.insert(":me".to_owned(), Attr::s(owner));
    }
    condition
}

impl<S: Store> Provisioner<'_, S> {
    /// Before the first config write: the record names every level this
    /// apply may leave written (the old managed set and the new one) and the
    /// owner it claims, so a run that dies midway leaves nothing enforced that
    /// nobody owns. Returns the record as it now stands.
    pub(super) async fn record_intent(
        &self,
        manifest: &Manifest,
        plan: &Plan,
        caller: &Caller,
    ) -> Result<State, ApplyError> {
        let before = &plan.state;
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
            rollback: rollback_after(plan, caller),
            stamp: before.stamp.clone(),
        };
        let stamp = self.write_record(&intent, before, caller).await?;
        Ok(State { stamp, ..intent })
    }

    /// The last phase: the record names the manifest's managed set (or, on
    /// the rollback of a failed claim, the one the claim found) and the
    /// owning custom resource.
    pub(super) async fn record_state(
        &self,
        manifest: &Manifest,
        restore: Option<&Rollback>,
        before: &State,
        caller: &Caller,
    ) -> Result<(), ApplyError> {
        let (managed, applied_hash) = match restore {
            Some(found) => (found.managed.clone(), found.applied_hash.clone()),
            None => (manifest.managed_set(), Some(manifest.applied_hash())),
        };
        let state = State {
            managed,
            owner: owner_after(caller, before),
            cascade_pending: Vec::new(),
            applied_hash,
            rollback: match caller.ownership {
                Ownership::Release(_) => None,
                _ => before.rollback.clone(),
            },
            stamp: before.stamp.clone(),
        };
        // Past the writes: a lost condition here is no longer "nothing written".
        match self.write_record(&state, before, caller).await {
            Ok(_) => Ok(()),
            Err(ApplyError::Owned { namespace }) => Err(ApplyError::OwnedAfter { namespace }),
            Err(ApplyError::OwnerMoved { namespace }) => {
                Err(ApplyError::OwnerMovedAfter { namespace })
            }
            Err(ApplyError::RecordMoved { namespace }) => {
                Err(ApplyError::RecordMovedAfter { namespace })
            }
            Err(other) => Err(other),
        }
    }

    /// Writes the record when what it says changes, so a no-change apply
    /// costs reads only (`last_applied` is the last apply that changed it),
    /// and answers the version it now stands at. Every write is conditional
    /// (`record_condition`): of two applies at once, one wins and the other
    /// writes nothing; a Delete's release never drops a claim another
    /// resource made since the record was read; a CLI apply never drops or
    /// undoes one, nor another apply's managed set.
    async fn write_record(
        &self,
        state: &State,
        before: &State,
        caller: &Caller,
    ) -> Result<Stamp, ApplyError> {
        // A Delete's claim is always written: it is the check, before any
        // delete, that no other resource claimed the namespace since the read.
        let delete = matches!(caller.ownership, Ownership::Release(_));
        if state == before && !delete {
            return Ok(before.stamp.clone());
        }
        let at = iso_now();
        let record = state.encode(
            self.namespace,
            &at,
            state.applied_hash.as_deref().unwrap_or_default(),
        );
        let condition = record_condition(caller, before);
        let written = match caller.ownership {
            Ownership::Keep => self.store.put(&record, Some(&condition)).await.map(drop),
            // A claim or release: only while the client is not purging the
            // namespace (a purge may have begun since the registry read).
            _ => {
                let put = TxWrite::Put {
                    item: record,
                    condition: Some(condition),
                };
                let check = registry::not_purging(self.namespace);
                self.store.transact(&[put, check]).await
            }
        };
        match written {
            Ok(()) => Ok(Stamp::At(at)),
            Err(StoreError::ConditionFailed { .. }) => Err(self.lost(before, caller).await),
            Err(StoreError::Cancelled { .. }) => Err(ApplyError::Purging {
                namespace: self.namespace.to_owned(),
            }),
            Err(err) => Err(store_err("writing the #PROVISIONER record")(err)),
        }
    }

    /// Why a record write's condition failed: the owner moved (a claim or
    /// a release), or another apply recorded its levels.
    async fn lost(&self, before: &State, caller: &Caller) -> ApplyError {
        let now = match self.read_state().await {
            Ok(now) => now,
            Err(err) => return err,
        };
        let namespace = self.namespace.to_owned();
        match (&caller.ownership, now.owner == before.owner) {
            (_, true) => ApplyError::RecordMoved { namespace },
            (Ownership::Keep, false) => ApplyError::OwnerMoved { namespace },
            (_, false) => ApplyError::Owned { namespace },
        }
    }
}
