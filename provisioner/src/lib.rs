//! The limits provisioner's core: what the `Custom::ZaeLimiterLimits` Lambda
//! (`cfn-limits-resource`) and the operators' CLI (`zae-limits`) both run.
//!
//! A limits manifest ([`manifest`]: parsed, validated, each problem at its
//! path; CloudFormation's string properties coerced and tenant stacks printed
//! by `manifest::stack`; a misspelt name answered with the nearest one,
//! [`suggest`]) becomes writes in [`apply`], phase by phase: plan, version
//! gate, claim pending fan-outs, config items with registries and audit
//! events, bucket fan-outs, release, state record. [`init`] initialises the
//! table as the stack's `TableInit` does: the version stamp and the
//! namespaces' registration. Everything the table holds is modelled in
//! `zae_table`, and every read and write goes through its `Store` seam.

pub mod apply;
pub mod init;
pub mod manifest;
pub mod suggest;
