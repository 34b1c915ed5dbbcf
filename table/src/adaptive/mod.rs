//! Adaptive limits: effective limits that scale with a resource's
//! utilization, enforced by the unchanged 0.17.0 client through the refill
//! amount stored on its buckets (`b_{limit}_ra`). Everything lives in
//! `{ns}/ADAPTIVE#...` partitions without index keys (see [`crate::keys`]),
//! the table's own in `_/ADAPTIVE#...`: the law ([`law`]) and its estimator
//! ([`estimator`]), the declaration ([`declaration`]), the per-minute usage
//! the aggregator senses ([`usage`]), the canaries that prove the stream is
//! read on every shard ([`canary`]) and the table's tick record ([`tick`]),
//! the targets ([`target`]) and the counter their generations come from
//! ([`generation`]), and the stamps ([`stamp`]) written in passes
//! over a resource's buckets ([`pass`]).

pub mod allocation;
pub mod canary;
pub mod declaration;
pub mod demand;
pub mod estimator;
pub mod generation;
pub mod law;
pub mod pass;
pub mod share;
pub mod stamp;
pub mod target;
pub mod tick;
pub mod usage;

pub use declaration::{AdaptiveLevel, Declaration};
pub use law::Factor;
