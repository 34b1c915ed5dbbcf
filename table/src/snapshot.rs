//! Usage-snapshot items (`{ns}/ENTITY#{entity}`, `#USAGE#...`): the
//! attributes the 0.17.0 reader expects, and the ones the aggregator adds.
//! The reader takes every number attribute that is not one of its own for a
//! counter, named by its limit.

use crate::value::{Attr, Item};
use std::collections::BTreeMap;

pub const ENTITY_ID: &str = "entity_id";
pub const RESOURCE: &str = "resource";
pub const WINDOW: &str = "window";
pub const WINDOW_START: &str = "window_start";
pub const TOTAL_EVENTS: &str = "total_events";
pub const TTL: &str = "ttl";

/// Every attribute of a snapshot item that a limit name could also spell.
/// A limit so named has no counter of its own: the reader would take the
/// attribute for it, and DynamoDB refuses an update that writes one path
/// twice. (Watermarks and `#od` counters hold `#`, which no limit name can.)
pub const OWN_ATTRIBUTES: [&str; 12] = [
    "PK",
    "SK",
    ENTITY_ID,
    RESOURCE,
    WINDOW,
    WINDOW_START,
    TOTAL_EVENTS,
    TTL,
    "GSI2PK",
    "GSI2SK",
    "GSI4PK",
    "GSI4SK",
];

/// Whether a limit's counter would land on one of the item's own attributes.
pub fn collides(limit: &str) -> bool {
    OWN_ATTRIBUTES.contains(&limit)
}

/// Suffix of the counter of records that left a soft limit in debt.
pub const OVERDRAWN_SUFFIX: &str = "#od";

/// The overdraw counter of a limit: `{limit}#od`.
pub fn overdrawn_attr(limit: &str) -> String {
    format!("{limit}{OVERDRAWN_SUFFIX}")
}

/// The string attribute holding, per source bucket shard, the last stream
/// record the snapshot item already counts. A string, so that the 0.17.0
/// reader, which takes every number attribute for a counter, passes it over.
pub fn watermark_attr(shard: u32) -> String {
    format!("seq#{shard}")
}

/// Attributes the 0.17.0 reader never takes for a counter (its own list:
/// the index keys it knows, not GSI4's, which are strings anyway).
const NOT_COUNTERS: [&str; 10] = [
    "PK",
    "SK",
    ENTITY_ID,
    RESOURCE,
    WINDOW,
    WINDOW_START,
    TOTAL_EVENTS,
    "GSI2PK",
    "GSI2SK",
    TTL,
];

/// A usage snapshot as the 0.17.0 client's `get_usage_snapshots` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub entity_id: String,
    pub resource: String,
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub window_start: String,
    /// The window's last second, as the client computes it.
    pub window_end: String,
    /// `hourly`, `daily` or `monthly` (any text the item holds).
    pub window_type: String,
    /// Consumption per limit: every number attribute not the item's own.
    pub counters: BTreeMap<String, i64>,
    pub total_events: i64,
    /// Soft limits' `{limit}#od` counters, by limit.
    pub overdrawn: BTreeMap<String, i64>,
}

impl Usage {
    /// `None` for an item without its entity, resource or window start,
    /// which the client skips. A number too large for i64 counts as 0
    /// (the Python client's int has no bound; none the aggregator writes is).
    pub fn read(item: &Item) -> Option<Usage> {
        let text = |name: &str| item.get(name).and_then(Attr::as_s).map(str::to_owned);
        let (entity_id, resource, window_start) = (
            text(ENTITY_ID).filter(|s| !s.is_empty())?,
            text(RESOURCE).filter(|s| !s.is_empty())?,
            text(WINDOW_START).filter(|s| !s.is_empty())?,
        );
        let window_type = text(WINDOW).unwrap_or_default();
        let mut counters = BTreeMap::new();
        let mut overdrawn = BTreeMap::new();
        for (name, value) in item {
            if NOT_COUNTERS.contains(&name.as_str()) || !matches!(value, Attr::N(_)) {
                continue;
            }
            let count = value.as_int().unwrap_or_default();
            match name.strip_suffix(OVERDRAWN_SUFFIX) {
                Some(limit) => overdrawn.insert(limit.to_owned(), count),
                None => counters.insert(name.clone(), count),
            };
        }
        Some(Usage {
            window_end: window_end(&window_start, &window_type),
            total_events: item.get(TOTAL_EVENTS).and_then(Attr::as_int).unwrap_or(0),
            entity_id,
            resource,
            window_start,
            window_type,
            counters,
            overdrawn,
        })
    }
}

/// The last second of a window, as the 0.17.0 client computes it; the
/// start itself for a window type it does not know or a start it cannot parse.
pub fn window_end(start: &str, window: &str) -> String {
    use chrono::{DateTime, Datelike, Duration, Months, Timelike, Utc};
    let Ok(at) = DateTime::parse_from_rfc3339(start) else {
        return start.to_owned();
    };
    let at = at.with_timezone(&Utc);
    let end = match window {
        "hourly" => at.with_minute(59).and_then(|t| t.with_second(59)),
        "daily" => at
            .with_hour(23)
            .and_then(|t| t.with_minute(59))
            .and_then(|t| t.with_second(59)),
        "monthly" => at
            .with_day(1)
            .and_then(|t| t.checked_add_months(Months::new(1)))
            .map(|t| t - Duration::seconds(1)),
        _ => Some(at),
    };
    end.unwrap_or(at).format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn window_ends_are_the_clients() {
        assert_eq!(
            window_end("2024-01-01T14:00:00Z", "hourly"),
            "2024-01-01T14:59:59Z"
        );
        assert_eq!(
            window_end("2024-01-01T00:00:00Z", "daily"),
            "2024-01-01T23:59:59Z"
        );
        assert_eq!(
            window_end("2024-12-01T00:00:00Z", "monthly"),
            "2024-12-31T23:59:59Z"
        );
        assert_eq!(
            window_end("2024-02-01T00:00:00Z", "monthly"),
            "2024-02-29T23:59:59Z"
        );
        assert_eq!(
            window_end("2024-02-01T00:00:00Z", "weekly"),
            "2024-02-01T00:00:00Z"
        );
        assert_eq!(window_end("garbage", "hourly"), "garbage");
    }
}
