//! Version gates: a feature a level declares is only stored once the table's
//! Lambdas can read it, and then `client_min_version` is ratcheted so older
//! clients refuse to open the table instead of misreading it.

use crate::manifest::{Disabled, LevelDecl};
use zae_table::gate::{ATTEMPTS, Gate, require_readers};
use zae_table::store::{Store, StoreError};

/// The zae-limiter protocol level this provisioner implements.
pub use zae_table::gate::PROTOCOL_VERSION;

const RESET_AFTER: &str = "0.15.0";
const CASCADE_POLICY: &str = "0.16.0";
const NON_ENFORCING: &str = "0.17.0";

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(
        "version mismatch: this provisioner implements zae-limiter {PROTOCOL_VERSION}, \
         the table's Lambdas are at {lambda}; refusing to store {feature}, which needs \
         Lambdas at {minimum} or later. Redeploy this project's stack (`sam build && sam \
         deploy`) to bring the table's functions and version record up to date"
    )]
    Behind {
        lambda: String,
        feature: &'static str,
        minimum: &'static str,
    },
    #[error("client_min_version on _/SYSTEM# #VERSION kept changing under {ATTEMPTS} attempts")]
    Contended,
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub use zae_table::gate::release;

/// The features a set of declared levels needs, highest minimum first.
pub fn required(levels: &[&LevelDecl]) -> Vec<(&'static str, &'static str)> {
    let mut needs = Vec::new();
    let soft_or_bypass = levels.iter().any(|level| {
        level.disabled == Some(Disabled::Bypass) || level.limits.iter().any(|(_, l)| l.soft)
    });
    if soft_or_bypass {
        needs.push(("soft limits or `disabled: bypass`", NON_ENFORCING));
    }
    if levels.iter().any(|level| level.cascade.is_some()) {
        needs.push(("a cascade policy", CASCADE_POLICY));
    }
    let reset_after = levels.iter().any(|level| {
        level
            .limits
            .iter()
            .any(|(_, l)| l.reset_after_seconds.is_some())
    });
    if reset_after {
        needs.push(("reset_after_seconds", RESET_AFTER));
    }
    needs
}

/// Refuses when the table's Lambdas are older than the newest feature in
/// use, then raises `client_min_version` to it (never lowers it).
pub async fn check(store: &impl Store, levels: &[&LevelDecl]) -> Result<(), GateError> {
    let Some(&(feature, minimum)) = required(levels).first() else {
        return Ok(());
    };
    match require_readers(store, minimum).await? {
        Gate::Open => Ok(()),
        Gate::Behind { lambda } => Err(GateError::Behind {
            lambda,
            feature,
            minimum,
        }),
        Gate::Contended => Err(GateError::Contended),
    }
}
