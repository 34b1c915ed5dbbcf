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
