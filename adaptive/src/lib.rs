//! How an adaptive limit moves; the items it reads and writes are
//! `zae_table::adaptive`'s. The law ([`law`]: a level's factor at a
//! utilization, within its `max_factor`) and its estimator ([`estimator`]),
//! the demand-aware share ([`share`], with a tick's plan in
//! [`share::plan`]), the controller tick's decisions for a factor target
//! ([`tick`]) and the stamp the aggregator's repair gives a bucket the
//! stream shows ([`repair`]): pure, no store, no `async`. Then the two that
//! read and write through `zae_table::store::Store`: the stamping lap over
//! a resource's buckets ([`pass`]) and every target back to base
//! ([`reset`]). Used by the aggregator's controller, the provisioner's apply
//! and the operators' CLI.

pub mod estimator;
pub mod law;
pub mod pass;
pub mod repair;
pub mod reset;
pub mod share;
pub mod tick;

pub use law::Factor;
