//! The zae-limiter 0.17.0 table model, as the server side sees it.
//!
//! Keys and key builders ([`keys`]), the wire codec of DynamoDB stream records
//! ([`stream`]), bucket images and their per-limit attributes ([`bucket`]),
//! millitoken arithmetic ([`milli`]) and usage-snapshot windows ([`window`]).
//! Nothing here touches the network.

pub mod audit;
pub mod bucket;
pub mod deadline;
pub mod keys;
pub mod milli;
#[cfg(feature = "sdk")]
pub mod sdk;
pub mod store_error;
#[cfg(feature = "telemetry")]
pub mod telemetry;
pub mod stream;
pub mod window;

pub use bucket::{BucketImage, LimitState};
pub use keys::BucketKey;
pub use stream::{EventName, Image, SequenceNumber, StreamRecord};
pub use window::Window;
