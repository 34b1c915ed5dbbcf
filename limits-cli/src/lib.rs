//! `zae-limits`: the operators' CLI. It runs the provisioner's core
//! (`zae_provisioner`: manifests, apply, the table's initialisation)
//! straight against a table, from a laptop or CI, with no Lambda between.
//!
//! [`cli`] reads the command line, opens the table and runs the command
//! (its arguments, errors and exit codes, the progress reporter on stderr,
//! `release-owner`); [`report`] prints what a plan, apply or diff did, in
//! the Python CLI's words; [`adaptive`] shows a namespace's adaptive limits
//! (`utilization`, `explain`, the demand-aware share) and resets them.
//! `bin/zae-limits.rs` only calls `cli::main`.

pub mod adaptive;
pub mod cli;
pub mod report;
