//! Version gates: a feature a level declares is only stored once the table's
//! Lambdas can read it, and then `client_min_version` is ratcheted so older
//! clients refuse to open the table instead of misreading it.

use crate::manifest::{Disabled, LevelDecl};
use std::collections::BTreeMap;
use zae_table::Attr;
use zae_table::keys::{self, SK_VERSION};
use zae_table::registry::{CLIENT_MIN_VERSION, LAMBDA_VERSION};
use zae_table::store::{ITEM_EXISTS, Returns, Store, StoreError, Update};

/// The zae-limiter protocol level this provisioner implements.
pub const PROTOCOL_VERSION: &str = "0.17.0";

const RESET_AFTER: &str = "0.15.0";
const CASCADE_POLICY: &str = "0.16.0";
const NON_ENFORCING: &str = "0.17.0";
const ATTEMPTS: usize = 3;

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

/// `(major, minor, patch)` of `0.17.0`, `0.17.0rc1` or `0.17.0.dev3`: the
/// release part is what the gates compare.
pub fn release(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.trim().trim_start_matches('v').splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch_text = parts.next()?;
    let digits: String = patch_text
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor, digits.parse().ok()?))
}

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
    let pk = keys::pk_registry();
    for _ in 0..ATTEMPTS {
        let record = store.get(&pk, SK_VERSION, true).await?;
        let lambda = record
            .as_ref()
            .and_then(|r| r.get(LAMBDA_VERSION))
            .and_then(Attr::as_s)
            .map(str::to_owned);
        let readable = match lambda.as_deref() {
            Some(v) if v == PROTOCOL_VERSION => true,
            Some(v) => release(v)
                .zip(release(minimum))
                .is_some_and(|(a, b)| a >= b),
            None => false,
        };
        if !readable {
            return Err(GateError::Behind {
                lambda: match (&record, lambda) {
                    (None, _) => "unknown (no version record)".into(),
                    (_, Some(v)) => v,
                    (_, None) => "unknown".into(),
                },
                feature,
                minimum,
            });
        }
        let stored = record
            .as_ref()
            .and_then(|r| r.get(CLIENT_MIN_VERSION))
            .and_then(Attr::as_s)
            .map(str::to_owned);
        let current = stored.as_deref().and_then(release).unwrap_or((0, 0, 0));
        if release(minimum).is_some_and(|target| target <= current) {
            return Ok(());
        }
        let mut values = BTreeMap::from([(":new".to_owned(), Attr::s(minimum))]);
        let condition = match &stored {
            Some(value) => {
                values.insert(":stored".into(), Attr::s(value));
                "#cmv = :stored"
            }
            None => "attribute_not_exists(#cmv)",
        };
        let update = Update {
            pk: pk.clone(),
            sk: SK_VERSION.into(),
            expression: "SET #cmv = :new".into(),
            condition: Some(format!("{ITEM_EXISTS} AND {condition}")),
            names: BTreeMap::from([("#cmv".to_owned(), CLIENT_MIN_VERSION.to_owned())]),
            values,
        };
        match store.update(&update, Returns::Nothing).await {
            Ok(_) => return Ok(()),
            Err(StoreError::ConditionFailed { .. }) => continue,
            Err(other) => return Err(other.into()),
        }
    }
    Err(GateError::Contended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_parts_ignore_pre_release_suffixes() {
        assert_eq!(release("0.17.0"), Some((0, 17, 0)));
        assert_eq!(release("0.17.0rc1"), Some((0, 17, 0)));
        assert_eq!(release("0.17.0.dev3"), Some((0, 17, 0)));
        assert_eq!(release("v1.2.10"), Some((1, 2, 10)));
        assert_eq!(release("latest"), None);
        assert!(release("0.9.0") < release("0.15.0"));
    }
}
