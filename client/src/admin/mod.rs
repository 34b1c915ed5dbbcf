//! What a service needs beside the acquire, as the 0.17.0 client's public
//! API has it: entities created with their parent and cascade, read, and
//! moved to another parent (`entity`); usage snapshots and audit events
//! read back with the client's filters and paging (`history`). Every write
//! here records the audit event the Python client records (`audit`).
//! Limits are not written here: they stay the manifest's and the Python
//! client's.

mod audit;
mod entity;
mod history;

pub use entity::NewEntity;
pub use history::{PageKey, UsageQuery, UsageSummary};
pub use zae_table::audit::Recorded as AuditEvent;
pub use zae_table::entity::Record as Entity;
pub use zae_table::snapshot::Usage as UsageSnapshot;

use zae_table::store::StoreError;

/// What the entity, usage and audit calls refuse with.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A bad id, name, limit or page key; nothing was written.
    #[error("invalid {what}: {why}")]
    Validation { what: &'static str, why: String },
    #[error("entity {0} already exists")]
    EntityExists(String),
    #[error("entity {0} does not exist")]
    EntityNotFound(String),
    /// The table's Lambdas predate what the call writes.
    #[error(
        "version mismatch: moving an entity to a new parent needs the table's Lambdas at {minimum} or later, and they are at {lambda}; redeploy the stack"
    )]
    VersionMismatch {
        lambda: String,
        minimum: &'static str,
    },
    /// Other writers kept raising `client_min_version` under every try.
    #[error(
        "client_min_version on the version record kept changing under {attempts} tries; retry the move",
        attempts = zae_table::gate::ATTEMPTS
    )]
    VersionRecordContended,
    /// The move landed on the entity's record, but restamping its buckets
    /// stopped part-way; the same call again finishes it.
    #[error(
        "entity {entity} moved, but restamping its buckets stopped after {stamped}: {source}; repeat the call to finish"
    )]
    FanoutIncomplete {
        entity: String,
        stamped: u64,
        source: StoreError,
    },
    /// The table refused the caller's credentials.
    #[error("permission denied: {0}")]
    PermissionDenied(StoreError),
    /// The table could not be reached or answered an error.
    #[error("rate limiter unavailable: {0}")]
    Unavailable(StoreError),
}

impl AdminError {
    pub(crate) fn store(err: StoreError) -> AdminError {
        if err.is_access_denied() {
            AdminError::PermissionDenied(err)
        } else {
            AdminError::Unavailable(err)
        }
    }

    pub(crate) fn invalid(what: &'static str, why: impl Into<String>) -> AdminError {
        AdminError::Validation {
            what,
            why: why.into(),
        }
    }
}

/// An entity id as the client's `validate_identifier` takes it.
pub(crate) fn check_entity(what: &'static str, id: &str) -> Result<(), AdminError> {
    zae_table::names::check(zae_table::names::NameKind::Entity, id)
        .map_err(|why| AdminError::invalid(what, why))
}
