//! The `Custom::ZaeLimiterLimits` provisioner Lambda for zae-limiter 0.17.0
//! tables. Its core (manifests, apply, the table's initialisation) is
//! `zae_provisioner`'s, which the `zae-limits` CLI runs too.
//!
//! An event enters through [`lambda`] and speaks one of two protocols:
//! CloudFormation's custom resource ([`cloudformation`]: the request, its
//! answer to `ResponseURL`, the `Custom::ZaeLimiterTable` initialisation) or
//! the Python CLI's direct invoke ([`invoke`]). A fan-out stopped at the
//! deadline goes on in follow-up invocations ([`continuation`]); a
//! follow-up that never started is counted in the provisioner's one metric
//! ([`metrics`]).

pub mod cloudformation;
pub mod continuation;
pub mod invoke;
pub mod lambda;
pub mod metrics;
