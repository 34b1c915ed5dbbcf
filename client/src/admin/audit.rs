//! The audit event each write of this module records, laid out by
//! `zae_table::audit` as the 0.17.0 client lays out its own.

use super::AdminError;
use crate::shared::Shared;
use zae_table::audit::{self, Action, AuditEvent};
use zae_table::keys::{self, SK_CONFIG};
use zae_table::store::Store;
use zae_table::{Attr, Item};

/// A principal as the client checks one: an ARN as given, anything else
/// under its identifier rules (the id is stored and shown).
pub(super) fn check_principal(principal: Option<&str>) -> Result<(), AdminError> {
    match principal {
        Some(p) if !p.starts_with("arn:") => super::check_entity("principal", p),
        _ => Ok(()),
    }
}

/// Puts one event under `entity`'s audit partition. Its `ttl` follows the
/// namespace's `audit_retention_days` (one read of the system config).
pub(super) async fn record<S: Store>(
    shared: &Shared<S>,
    entity: &str,
    action: Action,
    principal: Option<&str>,
    details: Item,
) -> Result<(), AdminError> {
    let store = &shared.store;
    let system = store
        .get(&keys::pk_system(&shared.namespace), SK_CONFIG, false)
        .await
        .map_err(AdminError::store)?;
    let at_ms = shared.now();
    let event_id = audit::ulid(at_ms, std::array::from_fn(|_| fastrand::u8(..)));
    let event = AuditEvent {
        namespace: &shared.namespace,
        entity_id: entity,
        event_id: &event_id,
        at_ms,
        action,
        principal,
        resource: None,
        details,
        retention_days: zae_table::config::audit_retention_days(system.as_ref()),
    };
    store
        .put(&event.item(), None)
        .await
        .map_err(AdminError::store)?;
    Ok(())
}

/// `Some(text)` as a string, `None` as NULL: the client's `details` values.
pub(super) fn text_or_null(value: Option<&str>) -> Attr {
    value.map_or(Attr::Null, Attr::s)
}
