//! zae-client's integration tests, in one binary (each test binary links
//! the whole SDK; one link instead of several on every rebuild).
//!
//! - `memory`: on the in-memory twin, with faults injected at the store seam.
//! - `also`: `acquire_many` on the twin (a cancelled shared transaction, a
//!   failed refund, a disable outranking, the lease per resource).
//! - `bypass`: config bypass on the twin (costs, disagreeing stamps, a lift).
//! - `rejection_cache`: local rejections on the twin, requests counted.
//! - `limits`: `acquire_with_limits` on the twin (the cache, bad limits).
//! - `lifecycle`: how acquires and leases end (a dropped acquire, a dropped
//!   lease, a panic, `acquire_with`).
//! - `defects`: issue 42's admission defects and the Python client's shard
//!   behaviours (a cascading child's short shard, a parent shard drawn
//!   again or doubled), on the twin.
//! - `others`: buckets other writers shaped (bypass, quotas, a moved
//!   parent), careless lease amounts, a lost lock on soft debt.
//! - `differential` and `generated`: the same steps through the Python
//!   0.17.0 client and zae-client on moto, compared step by step.
//! - `entity`: entities created, read and moved, and audit events read,
//!   beside the Python 0.17.0 client on moto and DynamoDB Local.
//! - `tower` (feature `tower`): the example gateway under a real HTTP client.
//! - `load` (feature `load`): the built `zae-load` on moto.

mod also;
mod bypass;
mod common;
mod defects;
mod differential;
mod entity;
mod generated;
mod lifecycle;
mod limits;
#[cfg(feature = "load")]
mod load;
mod memory;
mod others;
mod rejection_cache;
#[cfg(feature = "tower")]
mod tower;
