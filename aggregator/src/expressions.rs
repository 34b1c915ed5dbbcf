//! The snapshot UpdateItem: what it sets, adds and guards.

use crate::plan::{SnapshotUpdate, Totals};
use crate::store::{SnapshotWrite, Val};
use std::collections::BTreeMap;
use zae_table::SequenceNumber;
use zae_table::bucket::OVERDRAWN_SUFFIX;
use zae_table::keys;

/// The string attribute holding, per source bucket shard, the last stream
/// record the snapshot item already counts. A string, so that the 0.17.0
/// reader, which takes every number attribute for a counter, passes it over.
pub fn watermark_attr(shard: u32) -> String {
    format!("seq#{shard}")
}

/// What the write must find before it applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// First try: each source's watermark is absent or older than the first
    /// record of this batch, i.e. the item holds none of it.
    Fresh,
    /// After a conflict: each source's watermark is exactly what was read.
    Exactly(BTreeMap<u32, Option<SequenceNumber>>),
}

pub fn snapshot_write(
    update: &SnapshotUpdate,
    totals: &Totals,
    guard: &Guard,
    ttl_epoch_s: i64,
) -> SnapshotWrite {
    let key = &update.key;
    let mut names = BTreeMap::new();
    let mut values = BTreeMap::new();
    let mut set = Vec::new();
    let mut add = Vec::new();
    let mut conditions = Vec::new();

    let mut always = |attr: &str, alias: &str, value: Val, set: &mut Vec<String>| {
        names.insert(format!("#{alias}"), attr.to_owned());
        values.insert(format!(":{alias}"), value);
        set.push(format!("#{alias} = :{alias}"));
    };
    always("entity_id", "eid", Val::s(&key.entity), &mut set);
    always(
        "GSI2PK",
        "g2pk",
        Val::s(keys::gsi2_pk_resource(&key.namespace, &key.resource)),
        &mut set,
    );
    always(
        "GSI2SK",
        "g2sk",
        Val::s(keys::gsi2_sk_usage(&key.window_key, &key.entity)),
        &mut set,
    );
    for (alias, attr, value) in [
        ("res", "resource", Val::s(&key.resource)),
        ("win", "window", Val::s(key.window.name())),
        ("wst", "window_start", Val::s(&key.window_key)),
        ("g4pk", "GSI4PK", Val::s(&key.namespace)),
        ("g4sk", "GSI4SK", Val::s(key.pk())),
        ("ttl", "ttl", Val::n(ttl_epoch_s)),
    ] {
        names.insert(format!("#{alias}"), attr.to_owned());
        values.insert(format!(":{alias}"), value);
        set.push(format!("#{alias} = if_not_exists(#{alias}, :{alias})"));
    }

    let firsts = update.first_per_source();
    for (i, (shard, last)) in update.latest_per_source().into_iter().enumerate() {
        let alias = format!("#m{i}");
        names.insert(alias.clone(), watermark_attr(shard));
        values.insert(format!(":m{i}"), Val::s(last.padded()));
        set.push(format!("{alias} = :m{i}"));
        match guard {
            Guard::Fresh => {
                values.insert(format!(":f{i}"), Val::s(firsts[&shard].padded()));
                conditions.push(format!(
                    "(attribute_not_exists({alias}) OR {alias} < :f{i})"
                ));
            }
            Guard::Exactly(read) => match read.get(&shard).and_then(|m| m.as_ref()) {
                Some(mark) => {
                    values.insert(format!(":x{i}"), Val::s(mark.padded()));
                    conditions.push(format!("{alias} = :x{i}"));
                }
                None => conditions.push(format!("attribute_not_exists({alias})")),
            },
        }
    }

    for (i, (limit, n)) in totals.counters.iter().enumerate() {
        names.insert(format!("#c{i}"), limit.clone());
        values.insert(format!(":c{i}"), Val::n(n));
        add.push(format!("#c{i} :c{i}"));
    }
    for (i, (limit, n)) in totals.overdrawn.iter().enumerate() {
        names.insert(format!("#o{i}"), format!("{limit}{OVERDRAWN_SUFFIX}"));
        values.insert(format!(":o{i}"), Val::n(n));
        add.push(format!("#o{i} :o{i}"));
    }
    names.insert("#te".into(), "total_events".into());
    values.insert(":te".into(), Val::n(totals.events));
    add.push("#te :te".into());

    SnapshotWrite {
        pk: key.pk(),
        sk: key.sk(),
        update: format!("SET {} ADD {}", set.join(", "), add.join(", ")),
        condition: conditions.join(" AND "),
        names,
        values,
    }
}
