//! The table's registries as the client keeps them: namespace names to ids
//! (`_/SYSTEM#`, `#NAMESPACE#<name>`), the version record (`_/SYSTEM#`,
//! `#VERSION`), and per namespace the set of resources with a config
//! (`#RESOURCES`) and the count of entity configs per resource
//! (`#ENTITY_CONFIG_RESOURCES`), changed together with the config items.

use crate::keys::{self, SK_ENTITY_CONFIG_RESOURCES, SK_RESOURCES};
use crate::store::Update;
use crate::value::{Attr, Item};
use std::collections::{BTreeMap, BTreeSet};

/// The namespace registry entry's id attribute.
pub const NAMESPACE_ID: &str = "namespace_id";
/// On the version record: the version of the table's Lambdas.
pub const LAMBDA_VERSION: &str = "lambda_version";
/// On the version record: the oldest client allowed to open the table.
pub const CLIENT_MIN_VERSION: &str = "client_min_version";
const RESOURCES: &str = "resources";

/// The id in a namespace registry entry.
pub fn namespace_id(entry: &Item) -> Option<&str> {
    entry.get(NAMESPACE_ID).and_then(Attr::as_s)
}

fn registry_keys(namespace: &str, values: &mut BTreeMap<String, Attr>) -> &'static str {
    values.insert(":gsi4pk".into(), Attr::s(namespace));
    values.insert(":gsi4sk".into(), Attr::s(keys::pk_system(namespace)));
    "SET GSI4PK = if_not_exists(GSI4PK, :gsi4pk), GSI4SK = if_not_exists(GSI4SK, :gsi4sk)"
}

/// Adds a resource to `#RESOURCES`, as a resource config write does.
pub fn add_resource(namespace: &str, resource: &str) -> Update {
    let mut values = BTreeMap::from([(
        ":resource".to_owned(),
        Attr::Ss(BTreeSet::from([resource.to_owned()])),
    )]);
    let set = registry_keys(namespace, &mut values);
    Update {
        pk: keys::pk_system(namespace),
        sk: SK_RESOURCES.into(),
        expression: format!("{set} ADD {RESOURCES} :resource"),
        condition: None,
        names: BTreeMap::new(),
        values,
    }
}

/// Drops a resource from `#RESOURCES`, as a resource config delete does.
pub fn remove_resource(namespace: &str, resource: &str) -> Update {
    Update {
        pk: keys::pk_system(namespace),
        sk: SK_RESOURCES.into(),
        expression: format!("DELETE {RESOURCES} :resource"),
        condition: None,
        names: BTreeMap::new(),
        values: BTreeMap::from([(
            ":resource".to_owned(),
            Attr::Ss(BTreeSet::from([resource.to_owned()])),
        )]),
    }
}

/// Moves a resource's entity-config count by `delta`; a creation also
/// stamps the registry's own index keys.
pub fn count_entity_config(namespace: &str, resource: &str, delta: i64) -> Update {
    let mut values = BTreeMap::from([(":delta".to_owned(), Attr::n(delta))]);
    let expression = if delta > 0 {
        format!(
            "{} ADD #resource :delta",
            registry_keys(namespace, &mut values)
        )
    } else {
        "ADD #resource :delta".to_owned()
    };
    Update {
        pk: keys::pk_system(namespace),
        sk: SK_ENTITY_CONFIG_RESOURCES.into(),
        expression,
        condition: None,
        names: BTreeMap::from([("#resource".to_owned(), resource.to_owned())]),
        values,
    }
}

/// Removes a resource's entity-config count once it is down to zero; fails
/// its condition (harmlessly) while configs remain.
pub fn drop_empty_entity_count(namespace: &str, resource: &str) -> Update {
    Update {
        pk: keys::pk_system(namespace),
        sk: SK_ENTITY_CONFIG_RESOURCES.into(),
        expression: "REMOVE #resource".into(),
        condition: Some("#resource <= :zero".into()),
        names: BTreeMap::from([("#resource".to_owned(), resource.to_owned())]),
        values: BTreeMap::from([(":zero".to_owned(), Attr::n(0))]),
    }
}
