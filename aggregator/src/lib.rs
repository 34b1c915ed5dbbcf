//! The zae-limiter stream aggregator: exact usage snapshots and soft-limit
//! overdraw signals from a 0.17.0 table's DynamoDB stream.
//!
//! The logic ([`plan`], [`expressions`], [`audit`], [`process`], [`poll`]) does no
//! I/O of its own; it talks to DynamoDB, the stream and CloudWatch through the
//! [`store::Table`], [`poll::StreamSource`] and [`metrics::MetricSink`] seams, whose
//! SDK adapters live in [`dynamo`], [`streams`] and [`cloudwatch`].

pub mod audit;
pub mod cloudwatch;
pub mod config;
pub mod dynamo;
pub mod expressions;
pub mod filter;
pub mod lambda;
pub mod metrics;
pub mod plan;
pub mod poll;
pub mod process;
pub mod store;
pub mod streams;
