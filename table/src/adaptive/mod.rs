//! Adaptive limits' items: effective limits that scale with a resource's
//! utilization, enforced by the unchanged 0.17.0 client through the refill
//! amount stored on its buckets (`b_{limit}_ra`). How a limit moves is
//! `zae_adaptive`'s; here is what it reads and writes. Everything lives in
//! `{ns}/ADAPTIVE#...` partitions without index keys (see [`crate::keys`]),
//! the table's own in `_/ADAPTIVE#...`: the declaration ([`declaration`]),
//! the per-minute usage the aggregator senses ([`usage`]) and each
//! entity's demand ([`demand`]), the canaries that prove the stream is read
//! on every shard ([`canary`]) and the table's tick record ([`tick`]), the
//! targets ([`target`]) and the counter their generations come from
//! ([`generation`]), the allocations of a demand share ([`allocation`]),
//! and a bucket's stamp ([`stamp`]) with the unit it is written in
//! ([`factor`]).

pub mod allocation;
pub mod canary;
pub mod declaration;
pub mod demand;
pub mod factor;
pub mod generation;
pub mod stamp;
pub mod target;
pub mod tick;
pub mod usage;

pub use declaration::{AdaptiveLevel, Declaration};
pub use factor::Factor;
