//! The namespace's `#PROVISIONER` record: which levels a manifest manages,
//! in the 0.17.0 layout, plus the CloudFormation resource that owns it.

use crate::manifest::{Level, ManagedSet};
use crate::store::{Attr, Item, Store, StoreError};
use std::collections::BTreeMap;
use zae_table::keys;

pub const SK_PROVISIONER: &str = "#PROVISIONER";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub managed: ManagedSet,
    /// `<StackId>|<LogicalResourceId>` of the custom resource that last
    /// applied; absent for CLI applies and for records the reference wrote.
    pub owner: Option<String>,
    /// A 0.16 record's unfinished cascade fan-outs, owed by the next apply.
    pub cascade_pending: Vec<Level>,
    /// The hash of the manifest last applied.
    pub applied_hash: Option<String>,
}

fn strings(attr: Option<&Attr>) -> Vec<String> {
    match attr {
        Some(Attr::L(items)) => items.iter().filter_map(Attr::as_s).map(str::to_owned).collect(),
        Some(Attr::Ss(set)) => set.iter().cloned().collect(),
        _ => Vec::new(),
    }
}

impl State {
    pub fn decode(item: Option<&Item>) -> State {
        let Some(item) = item else {
            return State::default();
        };
        let mut entities: Vec<(String, Vec<String>)> = match item.get("managed_entities") {
            Some(Attr::M(map)) => map
                .iter()
                .map(|(entity, resources)| (entity.clone(), strings(Some(resources))))
                .collect(),
            _ => Vec::new(),
        };
        entities.sort();
        let cascade_pending = match item.get("cascade_pending") {
            Some(Attr::L(entries)) => entries
                .iter()
                .filter_map(|entry| match entry {
                    Attr::M(m) => Level::from_parts(
                        m.get("level").and_then(Attr::as_s)?,
                        m.get("target").and_then(Attr::as_s).unwrap_or_default(),
                    ),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        State {
            managed: ManagedSet {
                system: matches!(item.get("managed_system"), Some(Attr::Bool(true))),
                resources: strings(item.get("managed_resources")),
                entities,
            },
            owner: item.get("cfn_owner").and_then(Attr::as_s).map(str::to_owned),
            cascade_pending,
            applied_hash: item.get("applied_hash").and_then(Attr::as_s).map(str::to_owned),
        }
    }

    /// The record as the reference writes it, and `cfn_owner` when owned.
    pub fn encode(&self, namespace: &str, applied_at: &str, applied_hash: &str) -> Item {
        let pk = keys::pk_system(namespace);
        let list = |names: &[String]| Attr::L(names.iter().map(Attr::s).collect());
        let mut item = BTreeMap::from([
            ("PK".to_owned(), Attr::s(&pk)),
            ("SK".to_owned(), Attr::s(SK_PROVISIONER)),
            ("GSI4PK".to_owned(), Attr::s(namespace)),
            ("GSI4SK".to_owned(), Attr::s(&pk)),
            ("managed_system".to_owned(), Attr::Bool(self.managed.system)),
            ("managed_resources".to_owned(), list(&self.managed.resources)),
            (
                "managed_entities".to_owned(),
                Attr::M(
                    self.managed
                        .entities
                        .iter()
                        .map(|(entity, resources)| (entity.clone(), list(resources)))
                        .collect(),
                ),
            ),
            ("last_applied".to_owned(), Attr::s(applied_at)),
            ("applied_hash".to_owned(), Attr::s(applied_hash)),
        ]);
        if let Some(owner) = &self.owner {
            item.insert("cfn_owner".into(), Attr::s(owner));
        }
        item
    }
}

/// The id of a namespace name, from the client's registry (`_/SYSTEM#`,
/// `#NAMESPACE#<name>`); `None` when the name is not registered.
pub async fn namespace_id(store: &impl Store, name: &str) -> Result<Option<String>, StoreError> {
    let item = store.get("_/SYSTEM#", &format!("#NAMESPACE#{name}"), true).await?;
    Ok(item
        .as_ref()
        .and_then(|i| i.get("namespace_id"))
        .and_then(Attr::as_s)
        .map(str::to_owned))
}

/// `2026-11-29T18:00:00.123456+00:00`, Python's `datetime.isoformat()` in UTC.
pub fn iso_now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f+00:00")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_keeps_the_reference_layout() {
        let state = State {
            managed: ManagedSet {
                system: true,
                resources: vec!["gpt-4".into()],
                entities: vec![("user-1".into(), vec!["_default_".into(), "gpt-4".into()])],
            },
            owner: Some("arn:stack|TenantLimits".into()),
            cascade_pending: Vec::new(),
            applied_hash: Some("sha256:x".into()),
        };
        let item = state.encode("a7x3kq", "2026-11-29T18:00:00.000000+00:00", "sha256:x");
        assert_eq!(item["PK"], Attr::s("a7x3kq/SYSTEM#"));
        assert_eq!(item["GSI4SK"], Attr::s("a7x3kq/SYSTEM#"));
        assert_eq!(item["managed_resources"], Attr::L(vec![Attr::s("gpt-4")]));
        assert_eq!(State::decode(Some(&item)), state);
        assert_eq!(State::decode(None), State::default());
    }
}
