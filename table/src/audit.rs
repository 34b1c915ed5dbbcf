//! Audit events, whichever Lambda writes them: the item layout the client's
//! `get_audit_events` reads, its ULID event ids, its timestamp format and
//! its retention.

use crate::keys;
use crate::value::{Attr, Item};
use chrono::DateTime;

/// The client's default when the namespace's system config sets no retention.
pub const DEFAULT_RETENTION_DAYS: i64 = 90;

/// A ULID: 48 bits of milliseconds, then 80 bits of `entropy`, in Crockford
/// base 32, so events sort by time like the client's own.
pub fn ulid(at_ms: i64, entropy: [u8; 10]) -> String {
    let mut random = [0u8; 16];
    random[6..].copy_from_slice(&entropy);
    let millis = u64::try_from(at_ms).unwrap_or(0) & 0xFFFF_FFFF_FFFF;
    ulid::Ulid::from_parts(millis, u128::from_be_bytes(random)).to_string()
}

/// Reads the time part of a ULID back, in milliseconds.
pub fn ulid_millis(id: &str) -> Option<i64> {
    let parsed = ulid::Ulid::from_string(id).ok()?;
    i64::try_from(parsed.timestamp_ms()).ok()
}

/// `YYYY-MM-DDTHH:MM:SSZ`, the client's timestamp format.
pub fn timestamp(at_ms: i64) -> String {
    DateTime::from_timestamp_millis(at_ms)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The audit item's `ttl`: epoch seconds when it expires.
pub fn expiry(at_ms: i64, retention_days: i64) -> i64 {
    // Retention is read from the table: saturate rather than wrap.
    at_ms
        .div_euclid(1000)
        .saturating_add(retention_days.saturating_mul(86_400))
}

/// The actions the server side and the Rust client record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    LimitsSet,
    LimitsDeleted,
    LimitOverdrawn,
    LimitRecovered,
    EntityCreated,
    EntityParentChanged,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::LimitsSet => "limits_set",
            Action::LimitsDeleted => "limits_deleted",
            Action::LimitOverdrawn => "limit_overdrawn",
            Action::LimitRecovered => "limit_recovered",
            Action::EntityCreated => "entity_created",
            Action::EntityParentChanged => "entity_parent_changed",
        }
    }
}

/// The audit partition of system-level config events.
pub const SYSTEM_AUDIT_ENTITY: &str = "$SYSTEM";
/// The audit partition of a resource's config events: this, then the resource.
pub const RESOURCE_AUDIT_PREFIX: &str = "$RESOURCE:";

/// Whether `entity` names an audit partition the client writes: `$SYSTEM`,
/// `$RESOURCE:<resource>` (a resource name may hold `/` and `:`), or an
/// entity id under the client's identifier rules. None holds a `#`.
pub fn is_audit_entity(entity: &str) -> bool {
    use crate::names::{NameKind, check};
    if entity == SYSTEM_AUDIT_ENTITY {
        return true;
    }
    match entity.strip_prefix(RESOURCE_AUDIT_PREFIX) {
        Some(resource) => check(NameKind::Resource, resource).is_ok(),
        None => check(NameKind::Entity, entity).is_ok(),
    }
}

/// One audit event, before it becomes an item.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent<'a> {
    pub namespace: &'a str,
    /// The audit partition: an entity, `$SYSTEM` or `$RESOURCE:<resource>`.
    pub entity_id: &'a str,
    pub event_id: &'a str,
    pub at_ms: i64,
    pub action: Action,
    /// Stored as NULL when absent.
    pub principal: Option<&'a str>,
    pub resource: Option<&'a str>,
    pub details: Item,
    pub retention_days: i64,
}

impl AuditEvent<'_> {
    pub fn pk(&self) -> String {
        keys::pk_audit(self.namespace, self.entity_id)
    }

    pub fn sk(&self) -> String {
        keys::sk_audit(self.event_id)
    }

    /// The item, laid out as the client's own events.
    pub fn item(&self) -> Item {
        let pk = self.pk();
        let text = |value: Option<&str>| value.map_or(Attr::Null, Attr::s);
        Item::from([
            ("PK".to_owned(), Attr::s(&pk)),
            ("SK".to_owned(), Attr::s(self.sk())),
            ("entity_id".to_owned(), Attr::s(self.entity_id)),
            ("event_id".to_owned(), Attr::s(self.event_id)),
            ("timestamp".to_owned(), Attr::s(timestamp(self.at_ms))),
            ("action".to_owned(), Attr::s(self.action.name())),
            ("principal".to_owned(), text(self.principal)),
            ("resource".to_owned(), text(self.resource)),
            ("details".to_owned(), Attr::M(self.details.clone())),
            (
                "ttl".to_owned(),
                Attr::n(expiry(self.at_ms, self.retention_days)),
            ),
            ("GSI4PK".to_owned(), Attr::s(self.namespace)),
            ("GSI4SK".to_owned(), Attr::s(&pk)),
        ])
    }
}

/// An audit event as the 0.17.0 client reads one back.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub event_id: String,
    pub timestamp: String,
    pub action: String,
    pub entity_id: String,
    pub principal: Option<String>,
    pub resource: Option<String>,
    /// The item's `details` map as stored.
    pub details: Item,
}

impl Recorded {
    /// `None` for an item without a text `action`, which the client skips.
    pub fn read(item: &Item) -> Option<Recorded> {
        let text = |name: &str| item.get(name).and_then(Attr::as_s).map(str::to_owned);
        Some(Recorded {
            action: text("action")?,
            event_id: text("event_id").unwrap_or_default(),
            timestamp: text("timestamp").unwrap_or_default(),
            entity_id: text("entity_id").unwrap_or_default(),
            principal: text("principal"),
            resource: text("resource"),
            details: match item.get("details") {
                Some(Attr::M(map)) => map.clone(),
                _ => Item::new(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_carry_their_time_and_sort_by_it() {
        let a = ulid(1_795_970_136_158, [0xff; 10]);
        let b = ulid(1_795_970_136_159, [0; 10]);
        // The ids the earlier, hand-written encoder gave: a record
        // redelivered across the change names the same event.
        assert_eq!(a, "01M8M2JY2YZZZZZZZZZZZZZZZZ");
        assert_eq!(b, "01M8M2JY2Z0000000000000000");
        let entropy: [u8; 10] = std::array::from_fn(|i| i as u8 + 1);
        assert_eq!(
            ulid(1_795_970_136_158, entropy),
            "01M8M2JY2Y041061050R3GG28A"
        );
        assert_eq!(a.len(), 26);
        assert!(
            a.bytes()
                .all(|c| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&c))
        );
        assert!(a < b);
        assert_eq!(ulid_millis(&a), Some(1_795_970_136_158));
        assert_eq!(timestamp(1_795_970_136_158), "2026-11-29T16:35:36Z");
    }

    #[test]
    fn any_stored_retention_gives_an_expiry_without_overflow() {
        assert_eq!(expiry(1_795_970_136_158, i64::MAX), i64::MAX);
        assert_eq!(expiry(1_795_970_136_158, 1), 1_795_970_136 + 86_400);
    }

    #[test]
    fn an_event_is_keyed_under_its_audit_partition_and_expires_with_the_retention() {
        let event = AuditEvent {
            namespace: "ns",
            entity_id: "$SYSTEM",
            event_id: "01M8M5NKBKD9ANKQQKMR6BEWM6",
            at_ms: 1_795_970_136_158,
            action: Action::LimitsDeleted,
            principal: None,
            resource: None,
            details: Item::new(),
            retention_days: 30,
        };
        let item = event.item();
        assert_eq!(item["PK"], Attr::s("ns/AUDIT#$SYSTEM"));
        assert_eq!(item["SK"], Attr::s("#AUDIT#01M8M5NKBKD9ANKQQKMR6BEWM6"));
        assert_eq!(item["GSI4SK"], item["PK"]);
        assert_eq!(
            (&item["principal"], &item["resource"]),
            (&Attr::Null, &Attr::Null)
        );
        assert_eq!(item["action"], Attr::s("limits_deleted"));
        assert_eq!(item["ttl"], Attr::n(1_795_970_136 + 30 * 86_400));
    }
}
