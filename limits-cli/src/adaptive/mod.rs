//! `zae-limits adaptive`: operating a namespace's adaptive limits from
//! outside the controller. `reset` (`zae_adaptive::reset`) returns every
//! stamped bucket to what the client would have (base, or the amount before
//! the first stamp) and every target to a factor of one; the way back to the
//! 0.17.0 Python Lambdas starts with it. `utilization` shows what the
//! controller sees and what the buckets carry ([`status`]); `explain` says
//! why a factor is what it is ([`explain`]); a demand share as both show it
//! ([`share`]).

pub mod explain;
pub mod share;
pub mod status;

pub use explain::{Explanation, explain, render_explanation};
pub use status::{Status, render_status, status};

// The reset is the adaptive crate's; the CLI's `adaptive reset` runs it.
pub use zae_adaptive::reset::{Reset, reset};

#[cfg(test)]
mod tests;
