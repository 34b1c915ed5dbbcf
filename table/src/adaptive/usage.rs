//! Per-minute usage of a resource (`{ns}/ADAPTIVE#`, `#USAGE#{minute}#{resource}`):
//! the admitted consumption of every entity on the resource, per limit, in
//! millitokens, added by the aggregator batch by batch.

use crate::keys;
use crate::store::{Update, UpdateBuilder};
use crate::value::{Attr, Item};
use std::collections::BTreeMap;

pub const MINUTE_MS: i64 = 60_000;
/// Usage items expire an hour after their minute: the controller reads the
/// last few minutes, the `utilization` CLI the last fifteen.
pub const USAGE_TTL_S: i64 = 3_600;
pub const RESOURCE: &str = "resource";
pub const MINUTE: &str = "minute";
pub const TTL: &str = "ttl";
const USED_PREFIX: &str = "u_";
const TAIL_PREFIX: &str = "tail_";
/// A minute's tail, its last third: where it starts within the minute. A
/// surge that begins within a minute shows here before the minute's whole
/// use says so (the controller's surge check reads it).
pub const TAIL_FROM_MS: i64 = 40_000;
/// How many tails make a minute: a tail's use times this is a rate per minute.
pub const TAILS_PER_MINUTE: i64 = MINUTE_MS / (MINUTE_MS - TAIL_FROM_MS);

/// The start of the minute holding `at_ms`.
pub fn minute_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// `u_{limit}`: millitokens of the limit used in the minute.
pub fn used_attr(limit: &str) -> String {
    format!("{USED_PREFIX}{limit}")
}

/// `tail_{limit}`: millitokens of the limit used in the minute's tail.
pub fn tail_attr(limit: &str) -> String {
    format!("{TAIL_PREFIX}{limit}")
}

/// Adds a batch's usage of one resource in one minute.
pub fn add(
    namespace: &str,
    resource: &str,
    minute_ms: i64,
    used: &BTreeMap<String, i64>,
) -> Update {
    add_with_tail(namespace, resource, minute_ms, used, &BTreeMap::new())
}

/// [`add`], with the part of it used in the minute's tail.
pub fn add_with_tail(
    namespace: &str,
    resource: &str,
    minute_ms: i64,
    used: &BTreeMap<String, i64>,
    tail: &BTreeMap<String, i64>,
) -> Update {
    let mut update = UpdateBuilder::new();
    for (limit, amount) in used {
        update.add(&used_attr(limit), Attr::n(amount));
    }
    for (limit, amount) in tail {
        update.add(&tail_attr(limit), Attr::n(amount));
    }
    update
        .set_if_absent(RESOURCE, Attr::s(resource))
        .set_if_absent(MINUTE, Attr::n(minute_ms))
        .set_if_absent(TTL, Attr::n(minute_ms / 1000 + USAGE_TTL_S));
    update.build(
        &keys::pk_adaptive(namespace),
        &keys::sk_adaptive_usage(minute_ms, resource),
        None,
    )
}

/// What a usage item holds: the resource, its minute and the amount per limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minute {
    pub resource: String,
    pub minute_ms: i64,
    pub used: BTreeMap<String, i64>,
    /// Of it, what was used in the minute's tail; absent from items an
    /// aggregator before the tail wrote.
    pub tail: BTreeMap<String, i64>,
}

impl Minute {
    /// Reads a usage item; `None` when it is not one (a missing resource or minute).
    pub fn from_item(item: &Item) -> Option<Minute> {
        let resource = item.get(RESOURCE)?.as_s()?.to_owned();
        let minute_ms = item.get(MINUTE)?.as_int()?;
        let with = |prefix: &str| {
            item.iter()
                .filter_map(|(name, value)| {
                    let limit = name.strip_prefix(prefix)?;
                    Some((limit.to_owned(), value.as_int()?))
                })
                .collect()
        };
        Some(Minute {
            resource,
            minute_ms,
            used: with(USED_PREFIX),
            tail: with(TAIL_PREFIX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_floor_toward_the_past() {
        assert_eq!(minute_of(119_999), 60_000);
        assert_eq!(minute_of(120_000), 120_000);
        assert_eq!(minute_of(-1), -60_000);
    }

    #[test]
    fn an_update_adds_each_limit_and_sets_the_rest_once() {
        let used = BTreeMap::from([("tpm".to_owned(), 5_000), ("rpm".to_owned(), 1_000)]);
        let update = add("ns", "gpt-4", 120_000, &used);
        assert_eq!(update.pk, "ns/ADAPTIVE#");
        assert_eq!(update.sk, "#USAGE#0000000120000#gpt-4");
        assert!(update.expression.contains("ADD"), "{}", update.expression);
        assert!(update.names.values().any(|n| n == "u_tpm"));
        assert!(update.condition.is_none());
    }

    #[test]
    fn reads_back_what_was_added() {
        let item: Item = [
            ("resource", Attr::s("gpt-4")),
            ("minute", Attr::n(120_000)),
            ("u_tpm", Attr::n(7)),
            ("tail_tpm", Attr::n(3)),
            ("ttl", Attr::n(1)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let minute = Minute::from_item(&item).unwrap();
        assert_eq!(minute.used, BTreeMap::from([("tpm".to_owned(), 7)]));
        assert_eq!(minute.tail, BTreeMap::from([("tpm".to_owned(), 3)]));
        assert_eq!(minute.minute_ms, 120_000);
    }
}
