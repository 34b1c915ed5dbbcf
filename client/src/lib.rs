//! zae-client: acquire tokens from a zae-limiter 0.17.0 table in Rust, next
//! to Python clients on the same buckets. `docs/client.md` has the API, the
//! differences from the Python client, what it refuses and what each
//! acquire costs.
//!
//! Its modules, in an acquire's order:
//! - `limiter`: `RateLimiter`, its `Options`, `open`, `acquire` and
//!   `acquire_with`, and the dispatch between the two paths;
//! - `also`: `acquire_many`, several resources in one acquire;
//! - `shared`: the state every acquire and lease of a limiter shares;
//! - `config`: the limits resolved from the entity, resource and system
//!   levels, and `OnUnavailable`;
//! - `overrides`: `limits=`, a caller's own limits for one acquire;
//! - `bucket`: a bucket item as the paths read it, and the `vu` pin;
//! - `fast`: the fast path (its write, its refusals, cascades and shards);
//! - `slow`: the slow path (reads, the plan, the commit);
//! - `rejection`: the errors an acquire refuses with, and their statuses;
//! - `rejection_cache`: the last image of each shard, to refuse a repeat
//!   with no request;
//! - `status`: one limit's status, as a rejection lists it;
//! - `lease`: what an admitted acquire holds, and its commit and rollback;
//! - `error`: `Error` and the rejection it carries;
//! - `clock`: the time the paths read (a manual one for tests);
//! - `admin`: beside the acquire: entities created, read and moved to
//!   another parent; usage snapshots and audit events read back;
//! - `tower` (feature `tower`): the middleware;
//! - `load` (feature `load`): `zae-load`, the load generator.

pub mod admin;
mod also;
mod bucket;
pub mod clock;
mod config;
pub mod error;
mod fast;
pub mod lease;
mod limiter;
#[cfg(feature = "load")]
pub mod load;
mod overrides;
mod rejection;
mod rejection_cache;
mod shared;
mod slow;
mod status;
#[cfg(feature = "tower")]
pub mod tower;

#[cfg(feature = "tower")]
pub use crate::tower::{Ask, RateLimit, RateLimitLayer, Usage};
/// The SDK configuration crate [`RateLimiter::open_with`] takes, at the
/// version this crate builds with.
pub use admin::{
    AdminError, AuditEvent, Entity, NewEntity, PageKey, UsageQuery, UsageSnapshot, UsageSummary,
};
pub use also::MAX_ACQUIRE_RESOURCES;
pub use aws_config;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::OnUnavailable;
pub use error::{Error, Feature, LimitStatus, RateLimitExceeded};
pub use lease::{Lease, LeaseResource};
pub use limiter::{CONNECT_TIMEOUT, OPERATION_TIMEOUT, Options, RateLimiter, sdk_config};
pub use shared::ShardDraw;
pub use zae_table::config::LimitConfig;
pub use zae_table::sdk::DynamoStore;
