//! Adaptive limits: effective limits that scale with a resource's
//! utilization, enforced by the unchanged 0.17.0 client through the refill
//! amount stored on its buckets (`b_{limit}_ra`). Everything lives in
//! `{ns}/ADAPTIVE#...` partitions without index keys (see [`crate::keys`]):
//! the law ([`law`]), the per-minute usage the aggregator senses
//! ([`usage`]), and the canaries that prove the stream is read ([`canary`]).

pub mod canary;
pub mod declaration;
pub mod estimator;
pub mod law;
pub mod pass;
pub mod stamp;
pub mod target;
pub mod usage;

pub use declaration::{AdaptiveLevel, Declaration};
pub use law::Factor;
