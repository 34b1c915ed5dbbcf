//! A namespace with one adaptive target, for the controller's tests and its
//! benchmark: registered (its name is its id), a system `tpm` of 1,000 a
//! minute with a burst of 10,000 (at most 10x), opted in; resource `r` sized
//! for 100,000 tokens a minute; and buckets of `r` as the client creates
//! them at base.

use crate::memory::MemoryStore;
use std::collections::BTreeMap;
use zae_table::adaptive::{AdaptiveLevel, Declaration, Factor};
use zae_table::config::{LevelConfig, LimitConfig, build_item};
use zae_table::{Attr, Item, Level, keys};

pub const CAPACITY_TPM: i64 = 100_000;

pub fn table(namespace: &str, buckets: usize) -> MemoryStore {
    let store = MemoryStore::new();
    add_namespace(&store, namespace, buckets);
    store
}

/// Another namespace like [`table`]'s in `store`.
pub fn add_namespace(store: &MemoryStore, namespace: &str, buckets: usize) {
    store.register_namespace(namespace);
    let config = LevelConfig {
        limits: vec![LimitConfig::drip("tpm", 10_000, 1_000, 60)],
        ..LevelConfig::default()
    };
    store.insert(build_item(namespace, &Level::System, &config));
    let declaration = Declaration {
        capacity: BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), CAPACITY_TPM)]))]),
        levels: vec![AdaptiveLevel {
            level: Level::System,
            limit: "tpm".into(),
            max_scale: None,
            max_factor: Factor::from_ppm(10_000_000),
            shadow: false,
        }],
        ..Declaration::default()
    };
    store.insert(declaration.to_item(namespace));
    for i in 0..buckets {
        store.insert(bucket(namespace, &format!("e{i}"), 10_000_000, 1_000_000));
    }
}

/// A bucket of `r` with the client's GSI2 keys and `tpm`'s `cp` and `ra`,
/// refilled each minute.
pub fn bucket(namespace: &str, entity: &str, cp: i64, ra: i64) -> Item {
    Item::from([
        (
            "PK".into(),
            Attr::s(format!("{namespace}/BUCKET#{entity}#r#0")),
        ),
        ("SK".into(), Attr::s("#STATE")),
        ("GSI2PK".into(), Attr::s(keys::pk_resource(namespace, "r"))),
        ("GSI2SK".into(), Attr::s(format!("BUCKET#{entity}#0"))),
        ("b_tpm_cp".into(), Attr::n(cp)),
        ("b_tpm_ra".into(), Attr::n(ra)),
        ("b_tpm_rp".into(), Attr::n(60_000)),
        ("b_tpm_tk".into(), Attr::n(0)),
    ])
}

/// `bucket`, stamped by a target of `generation` at `ra` (from 1,000 a minute),
/// with the record every stamp leaves.
pub fn stamped(namespace: &str, entity: &str, cp: i64, ra: i64, generation: i64) -> Item {
    use zae_table::adaptive::stamp::{before_attr, generation_attr, stamped_attr};
    let mut b = bucket(namespace, entity, cp, ra);
    b.insert(generation_attr("tpm"), Attr::n(generation));
    b.insert(stamped_attr("tpm"), Attr::n(ra));
    b.insert(before_attr("tpm"), Attr::n(1_000_000));
    b
}

/// `tpm` on `r` at 5x, its pass finished at `generation`, written as the
/// controller writes it (set at 1 s after the epoch).
pub async fn five_times(store: &MemoryStore, namespace: &str, generation: i64) {
    use zae_table::adaptive::target::Target;
    use zae_table::store::{Returns, Store};
    let mut target = Target::base("r", "tpm");
    target.factor = Factor::from_ppm(5_000_000);
    target.generation = generation;
    target.stamped = generation;
    target.set_at_ms = 1_000;
    store
        .update(&target.write(namespace, None), Returns::Nothing)
        .await
        .expect("the in-memory table takes a first target");
}

/// `entity` raised by a demand share to `factor` x base on `r`'s `tpm`
/// under `generation`, as the controller records it once stamped.
pub fn raised(
    entity: &str,
    factor: i64,
    generation: i64,
) -> zae_table::adaptive::allocation::Allocated {
    zae_table::adaptive::allocation::Allocated {
        resource: "r".into(),
        limit: "tpm".into(),
        entity: entity.into(),
        factor: Factor::from_ppm(factor * 1_000_000),
        generation,
        used: 1_000,
        saturated: true,
        why: "share".into(),
        at_ms: 0,
        pending: false,
    }
}

/// Declares `namespace`'s resource `r` shared by demand.
pub async fn share_by_demand(store: &MemoryStore, namespace: &str) {
    let mut d = Declaration::read(store, namespace, true)
        .await
        .ok()
        .flatten()
        .and_then(Result::ok)
        .expect("the namespace's declaration");
    d.demand.insert("r".to_owned());
    store.insert(d.to_item(namespace));
}
