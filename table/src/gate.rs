//! The version gate the 0.17.0 client and the provisioner share: a feature
//! is only written once the table's Lambdas can read it, and then the
//! version record's `client_min_version` is raised to the feature's release
//! (never lowered), so older clients refuse to open the table instead of
//! misreading it.

use crate::keys::{self, SK_VERSION};
use crate::registry::{CLIENT_MIN_VERSION, LAMBDA_VERSION};
use crate::store::{ITEM_EXISTS, Returns, Store, StoreError, Update};
use crate::value::Attr;
use std::collections::BTreeMap;

/// The zae-limiter protocol level these crates implement.
pub const PROTOCOL_VERSION: &str = "0.17.0";

/// Tries of the ratchet against other writers of `client_min_version`.
pub const ATTEMPTS: usize = 3;

/// `(major, minor, patch)` of `0.17.0`, `0.17.0rc1`, `0.17.0.dev3` or
/// `0.17.0+rust.1`: the release part is what the gates compare.
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

/// What the gate found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// The Lambdas read the feature, and `client_min_version` is at least it.
    Open,
    /// The Lambdas are older than `minimum`, or unknown: the text says which.
    Behind { lambda: String },
    /// `client_min_version` kept changing under every try.
    Contended,
}

/// Reads the version record (strongly consistent) and, when its Lambdas
/// read `minimum`, raises `client_min_version` to it.
pub async fn require_readers(store: &impl Store, minimum: &str) -> Result<Gate, StoreError> {
    let pk = keys::pk_registry();
    for _ in 0..ATTEMPTS {
        let record = store.get(&pk, SK_VERSION, true).await?;
        let text = |name: &str| {
            record
                .as_ref()
                .and_then(|r| r.get(name))
                .and_then(Attr::as_s)
                .map(str::to_owned)
        };
        let lambda = text(LAMBDA_VERSION);
        let readable = match lambda.as_deref() {
            Some(v) if v == PROTOCOL_VERSION => true,
            Some(v) => release(v)
                .zip(release(minimum))
                .is_some_and(|(a, b)| a >= b),
            None => false,
        };
        if !readable {
            let lambda = match (&record, lambda) {
                (None, _) => "unknown (no version record)".into(),
                (_, Some(v)) => v,
                (_, None) => "unknown".into(),
            };
            return Ok(Gate::Behind { lambda });
        }
        let stored = text(CLIENT_MIN_VERSION);
        let current = stored.as_deref().and_then(release).unwrap_or((0, 0, 0));
        if release(minimum).is_some_and(|target| target <= current) {
            return Ok(Gate::Open);
        }
        match store
            .update(&ratchet(minimum, stored.as_deref()), Returns::Nothing)
            .await
        {
            Ok(_) => return Ok(Gate::Open),
            Err(StoreError::ConditionFailed { .. }) => continue,
            Err(other) => return Err(other),
        }
    }
    Ok(Gate::Contended)
}

/// `client_min_version` to `minimum`, conditioned on the value just read,
/// so a concurrent raise is read again rather than overwritten.
fn ratchet(minimum: &str, stored: Option<&str>) -> Update {
    let mut values = BTreeMap::from([(":new".to_owned(), Attr::s(minimum))]);
    let condition = match stored {
        Some(value) => {
            values.insert(":stored".into(), Attr::s(value));
            "#cmv = :stored"
        }
        None => "attribute_not_exists(#cmv)",
    };
    Update {
        pk: keys::pk_registry(),
        sk: SK_VERSION.into(),
        expression: "SET #cmv = :new".into(),
        condition: Some(format!("{ITEM_EXISTS} AND {condition}")),
        names: BTreeMap::from([("#cmv".to_owned(), CLIENT_MIN_VERSION.to_owned())]),
        values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_parts_ignore_pre_release_suffixes() {
        assert_eq!(release("0.17.0"), Some((0, 17, 0)));
        assert_eq!(release("0.17.0rc1"), Some((0, 17, 0)));
        assert_eq!(release("0.17.0.dev3"), Some((0, 17, 0)));
        assert_eq!(release("0.17.0+rust.0.9.0"), Some((0, 17, 0)));
        assert_eq!(release("v1.2.10"), Some((1, 2, 10)));
        assert_eq!(release("latest"), None);
        assert!(release("0.9.0") < release("0.15.0"));
    }
}
