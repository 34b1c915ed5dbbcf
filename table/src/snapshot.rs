//! Usage-snapshot items (`{ns}/ENTITY#{entity}`, `#USAGE#...`): the
//! attributes the 0.17.0 reader expects, and the ones the aggregator adds.
//! The reader takes every number attribute that is not one of its own for a
//! counter, named by its limit.

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
