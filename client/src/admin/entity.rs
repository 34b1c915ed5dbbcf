//! Entities: create (with parent and cascade), read, and move to another
//! parent, as the 0.17.0 client's `create_entity`, `get_entity` and
//! `set_parent` write and read them. A move restamps the entity's buckets
//! (`cascade`, `parent_id`, `pgen`, `pinc`) with the provisioner's cascade
//! stamp, so every process, Python or Rust, learns the new parent from the
//! bucket on its next acquire.

use super::audit::{self, text_or_null};
use super::{AdminError, Entity, check_entity};
use crate::limiter::RateLimiter;
use crate::shared::Shared;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use zae_table::audit::Action;
use zae_table::entity::{self as meta, Record};
use zae_table::gate::{self, Gate};
use zae_table::keys::{self, BucketKey, Index, SK_META, SK_STATE};
use zae_table::resolve::Resolver;
use zae_table::store::{Condition, ITEM_ABSENT, Query, Returns, Store, StoreError};
use zae_table::{Attr, Item};

/// The release whose readers keep a move (the client's
/// `MIN_READER_VERSION_FOR_PARENT_MOVE`).
const PARENT_MOVE_READERS: &str = "0.17.0";
/// Ancestors a new parent's chain may have (the client's `_MAX_ANCESTOR_HOPS`).
const MAX_ANCESTOR_HOPS: usize = 32;
/// Tries of a META write that meets a bucket create's transaction (which
/// holds a check on the META): such a write did not apply and is re-sent.
const CONFLICT_TRIES: usize = 4;

/// An entity to create.
#[derive(Debug, Clone, Default)]
pub struct NewEntity {
    pub id: String,
    /// Defaults to the id.
    pub name: Option<String>,
    pub parent_id: Option<String>,
    /// Whether its acquires also debit the parent (when no config level's
    /// cascade policy says otherwise).
    pub cascade: bool,
    pub metadata: BTreeMap<String, String>,
    /// Who did it, for the audit event; stored as NULL when absent.
    pub principal: Option<String>,
}

impl<S: Store + 'static> RateLimiter<S> {
    /// Creates an entity (`EntityExists` if there is one) and records
    /// `entity_created`.
    pub async fn create_entity(&self, new: NewEntity) -> Result<Entity, AdminError> {
        check_entity("entity_id", &new.id)?;
        if let Some(parent) = &new.parent_id {
            check_entity("parent_id", parent)?;
        }
        audit::check_principal(new.principal.as_deref())?;
        let shared = &self.shared;
        let now = shared.now();
        let record = Record {
            name: Some(new.name.unwrap_or_else(|| new.id.clone())),
            id: new.id,
            parent_id: new.parent_id,
            cascade: new.cascade,
            metadata: new.metadata,
            created_at: Some(zae_table::audit::timestamp(now)),
            // Now, not 0: above any generation a deleted predecessor's
            // buckets still carry (the client's creation generation).
            parent_generation: now,
            incarnation: format!("{:016x}", fastrand::u64(..)),
        };
        let item = record.item(&shared.namespace);
        let absent = Condition::plain(ITEM_ABSENT);
        retrying_conflict(shared, || shared.store.put(&item, Some(&absent)))
            .await
            .map_err(|e| match e {
                StoreError::ConditionFailed { .. } => AdminError::EntityExists(record.id.clone()),
                other => AdminError::store(other),
            })?;
        let details = Item::from([
            ("name".into(), text_or_null(record.name.as_deref())),
            (
                "parent_id".into(),
                text_or_null(record.parent_id.as_deref()),
            ),
            ("cascade".into(), Attr::Bool(record.cascade)),
            ("metadata".into(), metadata_attr(&record)),
        ]);
        let principal = new.principal.as_deref();
        audit::record(
            shared,
            &record.id,
            Action::EntityCreated,
            principal,
            details,
        )
        .await?;
        Ok(record)
    }

    /// The entity's record, `None` when there is none (an eventually
    /// consistent read, as the client's).
    pub async fn get_entity(&self, id: &str) -> Result<Option<Entity>, AdminError> {
        check_entity("entity_id", id)?;
        read_entity(&self.shared, id, false).await
    }

    /// Moves `id` to `parent` (or to no parent), as the client's
    /// `set_parent`: the version gate, the new parent's chain checked for a
    /// cycle, the META moved (`pgen + 1`), every bucket of the entity
    /// restamped, and `entity_parent_changed` recorded. Answers the number
    /// of buckets stamped. Repeating a move finishes one that stopped.
    pub async fn set_parent(
        &self,
        id: &str,
        parent: Option<&str>,
        principal: Option<&str>,
    ) -> Result<u64, AdminError> {
        check_move(id, parent)?;
        audit::check_principal(principal)?;
        let shared = &self.shared;
        require_move_readers(shared).await?;
        if let Some(parent) = parent {
            check_new_parent(shared, id, parent).await?;
        }
        let old = write_parent(shared, id, parent).await?;
        self.forget_parents(id);
        let mut details = Item::from([
            (
                "old_parent_id".into(),
                text_or_null(old.parent_id.as_deref()),
            ),
            ("parent_id".into(), text_or_null(parent)),
            (
                "pgen".into(),
                Attr::n(old.parent_generation.saturating_add(1)),
            ),
        ]);
        let stamped = restamp(shared, id).await;
        let count = match &stamped {
            Ok(n) | Err(AdminError::FanoutIncomplete { stamped: n, .. }) => *n,
            Err(_) => 0,
        };
        details.insert("buckets_stamped".into(), Attr::n(count));
        let audited = audit::record(shared, id, Action::EntityParentChanged, principal, details);
        match stamped {
            Ok(n) => audited.await.map(|()| n),
            // The fan-out's error says what to do next; a failed audit
            // write must not hide it (the client logs and drops that one).
            Err(e) => {
                // Its kind only: the error's key names the entity, often
                // an API key, as the client avoids logging it.
                if let Err(audit_error) = audited.await {
                    let kind = match audit_error {
                        AdminError::PermissionDenied(_) => "permission denied",
                        _ => "unavailable",
                    };
                    tracing::warn!(
                        kind,
                        "audit event entity_parent_changed not written after an incomplete move"
                    );
                }
                Err(e)
            }
        }
    }

    /// This process's cascade knowledge of the entity, learnt under the old
    /// parent: the next acquire learns the new one from its bucket.
    fn forget_parents(&self, id: &str) {
        let mut parents = self
            .shared
            .parents
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        parents.retain(|(entity, _), _| entity != id);
    }
}

/// `details.metadata` of `entity_created`: the map as stored.
fn metadata_attr(record: &Record) -> Attr {
    Attr::M(
        record
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), Attr::s(v)))
            .collect(),
    )
}

/// The ids a move names, and no entity its own parent.
fn check_move(id: &str, parent: Option<&str>) -> Result<(), AdminError> {
    check_entity("entity_id", id)?;
    match parent {
        Some(parent) => {
            check_entity("parent_id", parent)?;
            if parent == id {
                return Err(AdminError::invalid(
                    "parent_id",
                    format!("{parent}: an entity cannot be its own parent"),
                ));
            }
            Ok(())
        }
        None => Ok(()),
    }
}

async fn read_entity<S: Store>(
    shared: &Shared<S>,
    id: &str,
    consistent: bool,
) -> Result<Option<Entity>, AdminError> {
    let item = shared
        .store
        .get(&keys::pk_entity(&shared.namespace, id), SK_META, consistent)
        .await
        .map_err(AdminError::store)?;
    Ok(item.as_ref().map(Record::read))
}

/// The client's version gate for a move: its Lambdas at 0.17.0 or later,
/// then `client_min_version` raised to it.
async fn require_move_readers<S: Store>(shared: &Shared<S>) -> Result<(), AdminError> {
    match gate::require_readers(&shared.store, PARENT_MOVE_READERS).await {
        Ok(Gate::Open) => Ok(()),
        Ok(Gate::Behind { lambda }) => Err(AdminError::VersionMismatch {
            lambda,
            minimum: PARENT_MOVE_READERS,
        }),
        Ok(Gate::Contended) => Err(AdminError::VersionRecordContended),
        Err(e) => Err(AdminError::store(e)),
    }
}

/// The new parent exists and `id` is not among its ancestors (strongly
/// consistent reads, one per level): a guard against an operator's
/// mistake, not a lock, as in the client.
async fn check_new_parent<S: Store>(
    shared: &Shared<S>,
    id: &str,
    parent: &str,
) -> Result<(), AdminError> {
    let Some(found) = read_entity(shared, parent, true).await? else {
        return Err(AdminError::EntityNotFound(parent.to_owned()));
    };
    let mut cursor = found.parent_id;
    for _ in 0..MAX_ANCESTOR_HOPS {
        let Some(ancestor) = cursor else {
            return Ok(());
        };
        if ancestor == id {
            return Err(AdminError::invalid(
                "parent_id",
                format!("{parent}: {id} is an ancestor of {parent}; the move would make a cycle"),
            ));
        }
        cursor = read_entity(shared, &ancestor, true)
            .await?
            .and_then(|e| e.parent_id);
    }
    match cursor {
        None => Ok(()),
        Some(_) => Err(AdminError::invalid(
            "parent_id",
            format!("{parent}: its ancestor chain is deeper than {MAX_ANCESTOR_HOPS} levels"),
        )),
    }
}

/// The META moved, answering the record as it was (`ALL_OLD`).
async fn write_parent<S: Store>(
    shared: &Shared<S>,
    id: &str,
    parent: Option<&str>,
) -> Result<Entity, AdminError> {
    let update = meta::move_parent(&shared.namespace, id, parent);
    let old = retrying_conflict(shared, || shared.store.update(&update, Returns::AllOld))
        .await
        .map_err(|e| match e {
            StoreError::ConditionFailed { .. } => AdminError::EntityNotFound(id.to_owned()),
            other => AdminError::store(other),
        })?;
    old.as_ref()
        .map(Record::read)
        .ok_or_else(|| AdminError::EntityNotFound(id.to_owned()))
}

/// Sends `write` again while it meets a transaction conflict, up to
/// [`CONFLICT_TRIES`] times, with the store's backoff between.
async fn retrying_conflict<S: Store, T, F, W>(shared: &Shared<S>, write: W) -> Result<T, StoreError>
where
    W: Fn() -> F,
    F: Future<Output = Result<T, StoreError>>,
{
    let mut attempt = 1;
    loop {
        match write().await {
            Err(e) if e.is_conflict() && attempt < CONFLICT_TRIES => {
                shared.store.backoff(attempt as u32).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Every bucket of the entity stamped from its META as it now stands and
/// the policy resolved for each resource. Two discovery passes, as the
/// client's: the second finds buckets an acquire created during the
/// first. A bucket gone, or holding a newer move's stamp, is not counted.
async fn restamp<S: Store>(shared: &Shared<S>, id: &str) -> Result<u64, AdminError> {
    let incomplete = |stamped, source| AdminError::FanoutIncomplete {
        entity: id.to_owned(),
        stamped,
        source,
    };
    let owner = shared
        .store
        .get(&keys::pk_entity(&shared.namespace, id), SK_META, true)
        .await
        .map_err(|e| incomplete(0, e))?;
    // The entity went away since the move: nothing to stamp, as the
    // client skips a bucket whose entity has no META.
    let Some(owner) = owner else { return Ok(0) };
    let resolver = Resolver::new(&shared.store, &shared.namespace);
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut stamped = 0u64;
    for _pass in 0..2 {
        let buckets = discover(shared, id)
            .await
            .map_err(|e| incomplete(stamped, e))?;
        for key in buckets {
            if !done.insert(key.pk()) {
                continue;
            }
            let wrote = stamp_one(&shared.store, &resolver, &owner, &key)
                .await
                .map_err(|e| incomplete(stamped, e))?;
            stamped += u64::from(wrote);
        }
    }
    Ok(stamped)
}

/// The entity's buckets, from GSI3 (keys only).
async fn discover<S: Store>(shared: &Shared<S>, id: &str) -> Result<Vec<BucketKey>, StoreError> {
    let query = Query {
        index: &Index::GSI3,
        pk: keys::pk_entity(&shared.namespace, id),
        sk_prefix: keys::BUCKET_PREFIX.to_owned(),
        consistent: false,
    };
    let items = shared.store.query(&query).await?;
    Ok(items
        .iter()
        .filter_map(|item| BucketKey::parse(keys::pk_of(item)?).ok())
        .collect())
}

/// One bucket's stamp; `false` when the bucket is gone or a newer move
/// stamped it first.
async fn stamp_one<S: Store>(
    store: &S,
    resolver: &Resolver<'_, S>,
    owner: &Item,
    key: &BucketKey,
) -> Result<bool, StoreError> {
    let policy = match resolver.cascade(&key.entity, &key.resource).await? {
        Some(policy) => policy,
        None => matches!(owner.get(meta::CASCADE), Some(Attr::Bool(true))),
    };
    let (mut update, pin) = meta::cascade_stamp(owner, policy);
    let exists = update.name(Index::TABLE.pk);
    let condition = format!("attribute_exists({exists}) AND ({pin})");
    let update = update.build(&key.pk(), SK_STATE, Some(condition));
    match store.update(&update, Returns::Nothing).await {
        Ok(_) => Ok(true),
        Err(StoreError::ConditionFailed { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}
