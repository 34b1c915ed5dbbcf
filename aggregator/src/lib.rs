//! The zae-limiter stream aggregator: exact usage snapshots and soft-limit
//! overdraw signals from a 0.17.0 table's DynamoDB stream, and the adaptive
//! controller's tick.
//!
//! [`settings`] reads the environment. A batch flows from an entry ([`lambda`], or [`poll`] outside Lambda)
//! through [`plan`] (records to snapshot updates and overdraw transitions,
//! pure) to [`write`] (the batch writer: snapshot writes, audit events,
//! retries), which talks to the table through `zae_table::store::Store`;
//! [`metrics`] publishes what it found.
//! [`control`] is the adaptive controller's tick: its reads, writes and
//! metrics, deciding through `zae_adaptive`.

pub mod control;
pub mod lambda;
pub mod metrics;
pub mod plan;
pub mod poll;
pub mod settings;
pub mod write;
