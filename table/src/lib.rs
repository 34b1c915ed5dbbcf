//! The zae-limiter 0.17.0 table model, shared by both Lambdas: every key
//! ([`keys`]), the one attribute-value type ([`value`]) and the store seam
//! it travels through ([`store`], with its SDK adapter in `sdk`), and the
//! items the server side reads and writes: buckets ([`bucket`]), usage
//! snapshots ([`snapshot`]), config levels ([`level`], [`config`]) resolved
//! in the client's order ([`resolve`]), entities ([`entity`]), registries
//! ([`registry`]), audit events ([`audit`]) and their archive
//! ([`archive`]), the provisioner's records ([`provisioner`]) and adaptive
//! limits' items ([`adaptive`]); the rules the client applies to names
//! ([`names`]) and schedules ([`schedule`]); the stream-record codec
//! ([`stream`]), millitoken arithmetic ([`milli`]) and snapshot windows
//! ([`window`]); the version gate a feature's first write passes ([`gate`]).
//! Client-chosen text and messages, bounded for errors and logs: [`shown`].

pub mod adaptive;
pub mod archive;
pub mod audit;
pub mod bucket;
pub mod config;
pub mod entity;
pub mod gate;
pub mod keys;
pub mod level;
pub mod milli;
pub mod names;
pub mod provisioner;
pub mod registry;
pub mod resolve;
pub mod schedule;
#[cfg(feature = "sdk")]
pub mod sdk;
pub mod shown;
pub mod snapshot;
pub mod store;
pub mod stream;
pub mod value;
pub mod window;

pub use bucket::{BucketImage, LimitState};
pub use keys::BucketKey;
pub use level::Level;
pub use stream::{EventName, Image, SequenceNumber, StreamRecord};
pub use value::{Attr, Item};
pub use window::Window;
