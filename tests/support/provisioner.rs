//! The provisioner's tests' table (shared by `zae-provisioner`,
//! `cfn-limits-resource` and `zae-limits`): a table as the client leaves it,
//! buckets with the client's index keys, and a slow bucket discovery.

use crate::faults::{Call, Faults};
use crate::memory::MemoryStore;
use std::sync::Arc;
use zae_table::keys::{self, BucketKey};
use zae_table::{Attr, Item};

pub const NS: &str = "ns1";

/// A table as the client leaves it: namespace `default` registered as
/// [`NS`], and the version record of 0.17.0 Lambdas.
pub fn seeded() -> Arc<MemoryStore> {
    let store = MemoryStore::new();
    store.insert(item(
        &keys::pk_registry(),
        &keys::sk_namespace("default"),
        &[("namespace_id", Attr::s(NS))],
    ));
    store.insert(item(
        &keys::pk_registry(),
        keys::SK_VERSION,
        &[("lambda_version", Attr::s("0.17.0"))],
    ));
    Arc::new(store)
}

pub fn item(pk: &str, sk: &str, extra: &[(&str, Attr)]) -> Item {
    let mut item = Item::from([("PK".into(), Attr::s(pk)), ("SK".into(), Attr::s(sk))]);
    item.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    item
}

/// A bucket of (entity, resource) with the client's index keys and a limit.
pub fn bucket(store: &MemoryStore, entity: &str, resource: &str) {
    let key = BucketKey {
        namespace: NS.into(),
        entity: entity.into(),
        resource: resource.into(),
        shard: 0,
    };
    store.insert(item(
        &key.pk(),
        keys::SK_STATE,
        &[
            ("GSI2PK", Attr::s(keys::pk_resource(NS, resource))),
            ("GSI2SK", Attr::s(format!("BUCKET#{entity}#0"))),
            ("GSI3PK", Attr::s(keys::pk_entity(NS, entity))),
            ("GSI3SK", Attr::s(format!("BUCKET#{resource}#0"))),
            ("GSI4PK", Attr::s(NS)),
            ("GSI4SK", Attr::s(format!("BUCKET#{entity}#{resource}#0"))),
            ("b_rpm_cp", Attr::n(9000)),
            ("b_rpm_tk", Attr::n(9000)),
        ],
    ));
}

pub fn bucket_item(store: &MemoryStore, entity: &str, resource: &str) -> Item {
    let pk = format!("{NS}/BUCKET#{entity}#{resource}#0");
    store.item(&pk, keys::SK_STATE).expect("the bucket exists")
}

/// Each page of bucket discovery takes 10 s of tokio's paused clock: a
/// namespace too large for one invocation, without waiting for it.
#[derive(Clone)]
pub struct SlowDiscovery;

impl Faults for SlowDiscovery {
    fn delay(&self, call: &Call<'_>) -> Option<std::time::Duration> {
        matches!(call, Call::Query(query) if query.index.name.is_some())
            .then_some(std::time::Duration::from_secs(10))
    }
}
