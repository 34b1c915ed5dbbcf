//! zae-client's integration tests, in one binary (each test binary links
//! the whole SDK; one link instead of several on every rebuild).
//!
//! - `memory`: on the in-memory twin, with faults injected at the store seam.
//! - `differential` and `generated`: the same steps through the Python
//!   0.17.0 client and zae-client on moto, compared step by step.

mod common;
mod differential;
mod generated;
mod memory;
