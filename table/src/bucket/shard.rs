//! Writes that change a bucket's shards: a doubling of shard 0's count, the
//! raise of the other shards' counts, a new shard cloned from shard 0, the
//! debit of a quota's donor shard, and the repair of a clone a later
//! doubling overtook.

use super::{REFILLED_AT, SHARD_COUNT, field, limit_attr};
use crate::keys::{BucketKey, SK_STATE};
use crate::store::{ITEM_EXISTS, Update, UpdateBuilder};
use crate::value::{Attr, Item};
use std::collections::BTreeMap;

/// The client's ceiling on a bucket's shard count.
pub const MAX_SHARD_COUNT: i64 = 32;

/// `SET shard_count = to`, if it is still what was read.
pub fn double(pk: &str, count_read: Option<i64>, to: i64) -> Update {
    let mut b = UpdateBuilder::new();
    b.set(SHARD_COUNT, Attr::n(to));
    let sc = b.name(SHARD_COUNT);
    let condition = match count_read {
        Some(c) => format!("{sc} = {}", b.value(Attr::n(c))),
        None => format!("attribute_not_exists({sc})"),
    };
    b.build(pk, SK_STATE, Some(condition))
}

/// `SET shard_count = to` where it is lower, freezing each quota's grant
/// count at what it was granted under (`b_{q}_gc`, where absent).
pub fn raise_count(pk: &str, to: i64, freeze: &[(&str, i64)]) -> Update {
    raising(pk, to, freeze, &[])
}

/// A raise to `to` where the count is below it, freezing quotas' grant
/// counts and taking back `excess` tokens.
fn raising(pk: &str, to: i64, freeze: &[(&str, i64)], excess: &[(String, i64)]) -> Update {
    let mut b = UpdateBuilder::new();
    b.set(SHARD_COUNT, Attr::n(to));
    for (quota, grants) in freeze {
        b.set_if_absent(&limit_attr(quota, field::GRANT_COUNT), Attr::n(*grants));
    }
    for (limit, amount) in excess.iter().filter(|(_, a)| *a > 0) {
        b.add(&limit_attr(limit, field::TOKENS), Attr::n(-amount));
    }
    let sc = b.name(SHARD_COUNT);
    let condition = format!("{sc} < {}", b.value(Attr::n(to)));
    b.build(pk, SK_STATE, Some(condition))
}

/// Shard 0's item as shard `key.shard` of `count`: every attribute copied,
/// the keys and the count its own, each limit starting at `tokens` with
/// nothing consumed, and each quota granted under `count` with no top-up.
pub fn clone_item(
    source: &Item,
    key: &BucketKey,
    count: i64,
    tokens: &BTreeMap<String, i64>,
    quotas: &[String],
) -> Item {
    let mut item = source.clone();
    item.insert("PK".into(), Attr::s(key.pk()));
    for (attr, value) in key.index_sort_keys() {
        item.insert(attr.into(), Attr::s(value));
    }
    item.insert(SHARD_COUNT.into(), Attr::n(count));
    for (limit, tk) in tokens {
        item.insert(limit_attr(limit, field::TOKENS), Attr::n(*tk));
        item.insert(limit_attr(limit, field::CONSUMED), Attr::n(0));
        let wtc = limit_attr(limit, field::WINDOW_CONSUMED);
        if item.contains_key(&wtc) {
            item.insert(wtc, Attr::n(0));
        }
    }
    for quota in quotas {
        item.insert(limit_attr(quota, field::GRANT_COUNT), Attr::n(count));
        item.remove(&limit_attr(quota, field::TOPPED_UP));
    }
    item
}

/// One quota's share moved off a donor shard, and what it was read as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Debit {
    pub limit: String,
    pub amount: i64,
    /// The grant count the donor was sized at; `stored_count` pins a legacy
    /// donor (no `gc`) on its `shard_count` instead.
    pub grant_count: i64,
    pub stored_count: i64,
    /// A calendar quota: the donor must have been refilled since this edge.
    pub edge: Option<i64>,
    /// A session quota: the donor's window must still be the one read.
    pub window_applied: Option<i64>,
}

/// `ADD b_{q}_tk -amount` for each debit, if the donor still holds them,
/// still in the period and under the grant count they were planned from.
pub fn debit(pk: &str, debits: &[Debit]) -> Update {
    let mut b = UpdateBuilder::new();
    let mut conditions = vec![ITEM_EXISTS.to_owned()];
    for d in debits {
        let tk = limit_attr(&d.limit, field::TOKENS);
        b.add(&tk, Attr::n(-d.amount));
        let (tk, amount) = (b.name(&tk), b.value(Attr::n(d.amount)));
        conditions.push(format!("{tk} >= {amount}"));
        let gc = b.name(&limit_attr(&d.limit, field::GRANT_COUNT));
        let sc = b.name(SHARD_COUNT);
        let (g, stored) = (
            b.value(Attr::n(d.grant_count)),
            b.value(Attr::n(d.stored_count)),
        );
        conditions.push(format!(
            "({gc} = {g} OR (attribute_not_exists({gc}) AND {sc} = {stored}))"
        ));
        if let Some(edge) = d.edge {
            let rf = b.name(REFILLED_AT);
            conditions.push(format!("{rf} >= {}", b.value(Attr::n(edge))));
        }
        if let Some(wa) = d.window_applied {
            let name = b.name(&limit_attr(&d.limit, field::WINDOW_APPLIED));
            conditions.push(format!("{name} = {}", b.value(Attr::n(wa))));
        }
    }
    b.build(pk, SK_STATE, Some(conditions.join(" AND ")))
}

/// A clone created under a count a later doubling has passed: `SET
/// shard_count = current`, keeping each quota's grant count, and taking
/// back from each other limit the `excess` its share at the old count held
/// over its share at `current` (relative, so a client's consumption since
/// is kept; never minted).
pub fn repair(
    pk: &str,
    current: i64,
    granted: i64,
    quotas: &[String],
    excess: &[(String, i64)],
) -> Update {
    let freeze: Vec<(&str, i64)> = quotas.iter().map(|q| (q.as_str(), granted)).collect();
    raising(pk, current, &freeze, excess)
}
