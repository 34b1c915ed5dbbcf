//! The `Custom::ZaeLimiterLimits` provisioner for zae-limiter 0.17.0 tables.
//!
//! A request enters through the Lambda ([`lambda`]) or the `zae-limits` CLI
//! (`bin/zae-limits.rs`), speaks one of two protocols ([`cloudformation`],
//! [`invoke`]), and becomes a limits manifest ([`manifest`]: parsed,
//! validated, each problem at its path). [`apply`] turns the manifest into
//! writes, phase by phase: plan, version gate, claim pending fan-outs, config
//! items with registries and audit events, bucket fan-outs, release, state
//! record; a fan-out stopped at the deadline goes on in follow-up invocations
//! ([`continuation`]). Everything the table holds is modelled in `zae_table`, and every
//! read and write goes through its `Store` seam. [`report`] renders what an
//! apply did, in the Python CLI's words.

pub mod adaptive;
pub mod apply;
pub mod cli;
pub mod cloudformation;
pub mod continuation;
pub mod invoke;
pub mod lambda;
pub mod manifest;
pub mod metrics;
pub mod registry;
pub mod report;
pub mod suggest;
