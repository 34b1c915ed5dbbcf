//! The table's registries as the client keeps them: namespace names to ids
//! (`_/SYSTEM#`, `#NAMESPACE#<name>`), the version record (`_/SYSTEM#`,
//! `#VERSION`), and per namespace the set of resources with a config
//! (`#RESOURCES`) and the count of entity configs per resource
//! (`#ENTITY_CONFIG_RESOURCES`), changed together with the config items.

use crate::keys::{self, SK_ENTITY_CONFIG_RESOURCES, SK_RESOURCES};
use crate::store::{Condition, TxWrite, Update};
use crate::value::{Attr, Item};
use std::collections::{BTreeMap, BTreeSet};

/// The namespace registry entry's id attribute.
pub const NAMESPACE_ID: &str = "namespace_id";
/// On the version record: the version of the table's Lambdas.
pub const LAMBDA_VERSION: &str = "lambda_version";
/// On the version record: the stack resource (`<StackId>|<LogicalResourceId>`)
/// whose `Custom::ZaeLimiterTable` stamped it, and alone may restore it.
pub const STAMP_OWNER: &str = "stamp_owner";
/// On the version record: who stamped it last.
pub const UPDATED_BY: &str = "updated_by";
/// `updated_by` of a stamp a stack's resource made (before owners existed too).
pub const STACK_STAMP_PREFIX: &str = "cfn:";
/// On the version record: the oldest client allowed to open the table.
pub const CLIENT_MIN_VERSION: &str = "client_min_version";

/// The stamp of every build of these Lambdas before 0.8.0, and the start of
/// every later one's: the protocol level they implement (0.17.0) with the
/// local label `rust`. A macro, so `concat!` can build on the one spelling.
macro_rules! first_stamp {
    () => {
        "0.17.0+rust"
    };
}
/// What builds before 0.8.0 stamped (the crates' version was not in it).
pub const FIRST_STAMP: &str = first_stamp!();
/// What this build stamps on `lambda_version`: `0.17.0+rust.<crate
/// version>`. A PEP 440 local label, which the 0.17.0 client drops before
/// it compares (its gates see 0.17.0); operators read the build after it.
pub const LAMBDA_VERSION_STAMP: &str = concat!(first_stamp!(), ".", env!("CARGO_PKG_VERSION"));

/// Whether `lambda_version` is a stamp of these Lambdas, this build's or an
/// earlier one's (not the Python Lambdas' `0.17.0`, nor anyone else's).
pub fn is_our_stamp(lambda_version: &str) -> bool {
    lambda_version
        .strip_prefix(FIRST_STAMP)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// The condition "`lambda_version` is one of our stamps" ([`is_our_stamp`]) in
/// `update`'s placeholders.
fn our_stamp_condition(update: &mut crate::store::UpdateBuilder) -> String {
    let ver = update.name(LAMBDA_VERSION);
    let first = update.value(Attr::s(FIRST_STAMP));
    let later = update.value(Attr::s(concat!(first_stamp!(), ".")));
    format!("({ver} = {first} OR begins_with({ver}, {later}))")
}
const RESOURCES: &str = "resources";

/// The id in a namespace registry entry.
pub fn namespace_id(entry: &Item) -> Option<&str> {
    entry.get(NAMESPACE_ID).and_then(Attr::as_s)
}

/// The registry entry's status attribute: `active`, `deleted` (the
/// client's soft delete, its data kept), or `purging` (its data going).
const STATUS: &str = "status";
const PURGING: &str = "purging";

/// An id entry (`#NSID#<id>`) whose namespace the client is purging.
pub fn purging(entry: &Item) -> bool {
    entry.get(STATUS).and_then(Attr::as_s) == Some(PURGING)
}

/// A transaction's check that the client is not purging `namespace` (an
/// id): its `#NSID#` entry absent, or its status anything but `purging`.
/// A claim carries it, so a purge begun after the claim's registry read
/// gets no record written into the partition it is emptying.
pub fn not_purging(namespace: &str) -> TxWrite {
    TxWrite::Check {
        pk: keys::pk_registry(),
        sk: keys::sk_namespace_id(namespace),
        condition: Condition {
            expression: "attribute_not_exists(#st) OR #st <> :purging".into(),
            names: BTreeMap::from([("#st".to_owned(), STATUS.to_owned())]),
            values: BTreeMap::from([(":purging".to_owned(), Attr::s(PURGING))]),
        },
    }
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

/// The schema version the 0.17.0 client writes on a table it initialises
/// (its majors must match the client's).
pub const SCHEMA_VERSION: &str = "0.10.0";
/// What `client_min_version` starts at: any client may open the table.
const ANY_CLIENT: &str = "0.0.0";
/// The registry entries' name attribute.
pub const NAMESPACE_NAME: &str = "namespace_name";

/// Stamps the version record with the version of the table's Lambdas,
/// creating it as the client would when it is missing (schema version,
/// `client_min_version` and index keys kept when present).
pub fn stamp_version(lambda_version: &str, by: &str, now_ms: i64) -> Update {
    stamping(lambda_version, by, now_ms).build(&keys::pk_registry(), keys::SK_VERSION, None)
}

fn stamping(lambda_version: &str, by: &str, now_ms: i64) -> crate::store::UpdateBuilder {
    let mut update = crate::store::UpdateBuilder::new();
    update
        .set(LAMBDA_VERSION, Attr::s(lambda_version))
        .set("updated_at", Attr::s(crate::audit::timestamp(now_ms)))
        .set(UPDATED_BY, Attr::s(by))
        .set_if_absent("schema_version", Attr::s(SCHEMA_VERSION))
        .set_if_absent(CLIENT_MIN_VERSION, Attr::s(ANY_CLIENT))
        .set_if_absent(keys::Index::GSI4.pk, Attr::s(keys::RESERVED_NAMESPACE))
        .set_if_absent(keys::Index::GSI4.sk, Attr::s(keys::pk_registry()));
    update
}

/// The same stamp, owned by a stack's resource: it lands where nobody owns
/// the record or `owner` does. An unowned stamp of ours a stack made (a
/// deployment from before owners, of any build) is taken only with `adopt`
/// (that stack's own Update); anything else leaves it to its stack.
pub fn stamp_version_owned(
    lambda_version: &str,
    by: &str,
    owner: &str,
    adopt: bool,
    now_ms: i64,
) -> Update {
    let mut update = stamping(lambda_version, by, now_ms);
    update.set(STAMP_OWNER, Attr::s(owner));
    let o = update.name(STAMP_OWNER);
    let me = update.value(Attr::s(owner));
    let unowned = format!("attribute_not_exists({o})");
    let condition = if adopt {
        format!("{unowned} OR {o} = {me}")
    } else {
        let ours = our_stamp_condition(&mut update);
        let by_name = update.name(UPDATED_BY);
        let cfn = update.value(Attr::s(STACK_STAMP_PREFIX));
        format!("({unowned} AND NOT ({ours} AND begins_with({by_name}, {cfn}))) OR {o} = {me}")
    };
    update.build(&keys::pk_registry(), keys::SK_VERSION, Some(condition))
}

/// Puts `lambda_version` back to `to` only while it still reads one of our
/// stamps (nobody else has stamped it since; an earlier build's counts) and,
/// with `owner`, only while `owner` holds it; the owner is then dropped.
pub fn restore_version(to: &str, by: &str, owner: Option<&str>, now_ms: i64) -> Update {
    let mut update = crate::store::UpdateBuilder::new();
    update
        .set(LAMBDA_VERSION, Attr::s(to))
        .set("updated_at", Attr::s(crate::audit::timestamp(now_ms)))
        .set(UPDATED_BY, Attr::s(by));
    let mut condition = our_stamp_condition(&mut update);
    if let Some(owner) = owner {
        update.remove(STAMP_OWNER);
        let o = update.name(STAMP_OWNER);
        let v = update.value(Attr::s(owner));
        condition = format!("{condition} AND {o} = {v}");
    }
    update.build(&keys::pk_registry(), keys::SK_VERSION, Some(condition))
}

/// A new namespace id as the client makes them: eight random bytes in
/// URL-safe base64 (11 characters), never starting with `-`.
pub fn new_namespace_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    loop {
        let bits = fastrand::u64(..);
        // 64 bits in 11 sextets: the last carries the low 4 bits, shifted up.
        let id: String = (0..11)
            .map(|i| {
                let sextet = if i < 10 {
                    (bits >> (58 - 6 * i)) & 0x3f
                } else {
                    (bits & 0xf) << 2
                };
                ALPHABET[sextet as usize] as char
            })
            .collect();
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// The two registry entries of a namespace (name to id, id to name), each
/// written only where nothing is: one transaction, as the client registers.
pub fn register_namespace(name: &str, id: &str, now_ms: i64) -> Vec<TxWrite> {
    let entry = |sk: String| {
        let item = Item::from([
            (
                keys::Index::TABLE.pk.to_owned(),
                Attr::s(keys::pk_registry()),
            ),
            (keys::Index::TABLE.sk.to_owned(), Attr::s(sk)),
            (NAMESPACE_ID.to_owned(), Attr::s(id)),
            (NAMESPACE_NAME.to_owned(), Attr::s(name)),
            (STATUS.to_owned(), Attr::s("active")),
            (
                "created_at".to_owned(),
                Attr::s(crate::audit::timestamp(now_ms)),
            ),
            (
                keys::Index::GSI4.pk.to_owned(),
                Attr::s(keys::RESERVED_NAMESPACE),
            ),
            (
                keys::Index::GSI4.sk.to_owned(),
                Attr::s(keys::pk_registry()),
            ),
        ]);
        TxWrite::Put {
            item,
            condition: Some(Condition::plain("attribute_not_exists(PK)")),
        }
    };
    vec![
        entry(keys::sk_namespace(name)),
        entry(keys::sk_namespace_id(id)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stamp is the first builds' with the crates' version after a dot:
    /// what the 0.17.0 client reads as release 0.17.0 (it drops the local
    /// label) and an operator reads as the build.
    #[test]
    fn this_builds_stamp_is_the_first_stamp_and_the_crate_version() {
        assert_eq!(
            LAMBDA_VERSION_STAMP,
            format!("0.17.0+rust.{}", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(FIRST_STAMP, "0.17.0+rust");
    }

    #[test]
    fn every_build_s_stamp_is_ours_and_nobody_else_s_is() {
        for ours in [FIRST_STAMP, LAMBDA_VERSION_STAMP, "0.17.0+rust.0.7.9"] {
            assert!(is_our_stamp(ours), "{ours}");
        }
        for theirs in [
            "0.17.0",
            "0.17.0+rustacean",
            "0.17.0+d20260926",
            "0.18.0+rust",
            "",
        ] {
            assert!(!is_our_stamp(theirs), "{theirs}");
        }
    }
}
