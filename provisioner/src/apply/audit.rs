//! `limits_set` / `limits_deleted` audit events, laid out as the client's own
//! config writers log them, so `get_audit_events` lists provisioner changes
//! beside the client's.

use crate::manifest::{Level, LevelDecl, LimitDecl};
use std::collections::BTreeMap;
use zae_table::audit::{Action, AuditEvent, RESOURCE_AUDIT_PREFIX, SYSTEM_AUDIT_ENTITY, ulid};
use zae_table::schedule::ScheduleEntry;
use zae_table::{Attr, Item};

/// The audit partition's entity id for a level: `$SYSTEM`,
/// `$RESOURCE:<resource>`, or the entity itself.
pub fn audit_entity(level: &Level) -> String {
    match level {
        Level::System => SYSTEM_AUDIT_ENTITY.into(),
        Level::Resource(resource) => format!("{RESOURCE_AUDIT_PREFIX}{resource}"),
        Level::Entity { entity, .. } => entity.clone(),
    }
}

fn entry_details(entry: &ScheduleEntry) -> Attr {
    let mut map = BTreeMap::from([
        ("cron".to_owned(), Attr::s(&entry.cron)),
        ("tz".to_owned(), Attr::s(&entry.tz)),
    ]);
    if let Some(scale) = entry.scale {
        map.insert("scale".into(), Attr::n(scale));
    }
    for (name, value) in [
        ("capacity", entry.capacity),
        ("refill_amount", entry.refill_amount),
        ("refill_period_seconds", entry.refill_period_seconds),
    ] {
        if let Some(value) = value {
            map.insert(name.into(), Attr::n(value));
        }
    }
    Attr::M(map)
}

/// The client's `Limit.to_dict()` shape.
fn limit_details(name: &str, limit: &LimitDecl) -> Attr {
    let mut map = BTreeMap::from([
        ("name".to_owned(), Attr::s(name)),
        ("capacity".to_owned(), Attr::n(limit.capacity)),
        ("refill_amount".to_owned(), Attr::n(limit.refill_amount)),
        (
            "refill_period_seconds".to_owned(),
            Attr::n(limit.refill_period),
        ),
    ]);
    if !limit.schedule.is_empty() {
        map.insert(
            "schedule".into(),
            Attr::L(limit.schedule.iter().map(entry_details).collect()),
        );
    }
    if !limit.reset_schedule.is_empty() {
        map.insert(
            "reset_schedule".into(),
            Attr::L(limit.reset_schedule.iter().map(entry_details).collect()),
        );
    }
    if let Some(seconds) = limit.reset_after_seconds {
        map.insert("reset_after_seconds".into(), Attr::n(seconds));
    }
    if limit.soft {
        map.insert("soft".into(), Attr::Bool(true));
    }
    Attr::M(map)
}

/// What changed, for the event: the new declaration, or for a delete the
/// names the level held.
pub enum Change<'a> {
    Set(&'a LevelDecl),
    Deleted {
        limit_names: Vec<String>,
        on_unavailable: Option<String>,
    },
}

pub struct AuditContext<'a> {
    pub namespace: &'a str,
    pub principal: &'a str,
    pub retention_days: i64,
    pub at_ms: i64,
}

pub fn audit_item(context: &AuditContext<'_>, level: &Level, change: &Change<'_>) -> Item {
    let entity = audit_entity(level);
    let mut entropy = [0u8; 10];
    entropy.copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..10]);
    let id = ulid(context.at_ms, entropy);
    let (action, details) = match change {
        Change::Set(decl) => (Action::LimitsSet, set_details(level, decl)),
        Change::Deleted {
            limit_names,
            on_unavailable,
        } => (
            Action::LimitsDeleted,
            deleted_details(level, limit_names, on_unavailable.as_deref()),
        ),
    };
    let resource = match level {
        Level::System => None,
        Level::Resource(resource) | Level::Entity { resource, .. } => Some(resource.as_str()),
    };
    AuditEvent {
        namespace: context.namespace,
        entity_id: &entity,
        event_id: &id,
        at_ms: context.at_ms,
        action,
        principal: Some(context.principal).filter(|p| !p.is_empty()),
        resource,
        details,
        retention_days: context.retention_days,
    }
    .item()
}

/// A set event carries the declared limits, and `on_unavailable` at the system level.
fn set_details(level: &Level, decl: &LevelDecl) -> Item {
    let mut details = BTreeMap::from([(
        "limits".to_owned(),
        Attr::L(
            decl.limits
                .iter()
                .map(|(name, limit)| limit_details(name, limit))
                .collect(),
        ),
    )]);
    if matches!(level, Level::System) {
        details.insert(
            "on_unavailable".into(),
            decl.on_unavailable.as_ref().map_or(Attr::Null, Attr::s),
        );
    }
    details
}

/// A delete event names the system level's limits; other levels' are empty.
fn deleted_details(level: &Level, limit_names: &[String], on_unavailable: Option<&str>) -> Item {
    if !matches!(level, Level::System) {
        return Item::new();
    }
    BTreeMap::from([
        (
            "limits".to_owned(),
            Attr::L(limit_names.iter().map(Attr::s).collect()),
        ),
        (
            "on_unavailable".to_owned(),
            on_unavailable.map_or(Attr::Null, Attr::s),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Manifest;

    #[test]
    fn a_set_event_carries_the_limits_in_the_clients_shape() {
        let manifest = Manifest::from_yaml(
            "namespace: t\nentities: {user-1: {resources: {gpt-4: {limits: {rpm: {capacity: 1000, soft: true}}}}}}",
        )
        .unwrap();
        let (level, decl) = manifest.declared().remove(0);
        let context = AuditContext {
            namespace: "a7x3kq",
            principal: "arn:aws:cloudformation:us-east-1:1:stack/s/x",
            retention_days: 90,
            at_ms: 1_795_970_136_158,
        };
        let item = audit_item(&context, &level, &Change::Set(decl));
        assert_eq!(item["PK"], Attr::s("a7x3kq/AUDIT#user-1"));
        assert_eq!(item["action"], Attr::s("limits_set"));
        assert_eq!(item["resource"], Attr::s("gpt-4"));
        assert_eq!(item["ttl"], Attr::n(1_795_970_136 + 90 * 86_400));
        let Attr::M(details) = &item["details"] else {
            panic!("a map")
        };
        let Attr::L(limits) = &details["limits"] else {
            panic!("a list")
        };
        let Attr::M(rpm) = &limits[0] else {
            panic!("a map")
        };
        assert_eq!(rpm["refill_period_seconds"], Attr::n(60));
        assert_eq!(rpm["soft"], Attr::Bool(true));

        let deleted = audit_item(
            &context,
            &Level::System,
            &Change::Deleted {
                limit_names: vec!["rpm".into()],
                on_unavailable: None,
            },
        );
        assert_eq!(deleted["PK"], Attr::s("a7x3kq/AUDIT#$SYSTEM"));
        assert_eq!(deleted["resource"], Attr::Null);
        assert_eq!(deleted["action"], Attr::s("limits_deleted"));
    }
}
