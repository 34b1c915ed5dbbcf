//! zae-client: acquire tokens from a zae-limiter 0.17.0 table in Rust, next
//! to Python clients on the same buckets. `docs/client.md` has the API, the
//! differences from the Python client, what it refuses and what each
//! acquire costs.

mod bucket;
pub mod clock;
mod config;
pub mod error;
mod fast;
pub mod lease;
mod limiter;
#[cfg(feature = "load")]
pub mod load;
mod slow;
mod status;
#[cfg(feature = "tower")]
pub mod tower;

#[cfg(feature = "tower")]
pub use crate::tower::{Ask, RateLimit, RateLimitLayer, Usage};
/// The SDK configuration crate [`RateLimiter::open_with`] takes, at the
/// version this crate builds with.
pub use aws_config;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::OnUnavailable;
pub use error::{Error, Feature, LimitStatus, RateLimitExceeded};
pub use lease::Lease;
pub use limiter::{CONNECT_TIMEOUT, OPERATION_TIMEOUT, Options, RateLimiter, sdk_config};
pub use zae_table::sdk::DynamoStore;
