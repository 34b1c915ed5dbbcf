//! What the aggregator senses of each entity on a `share: demand` resource,
//! minute by minute (`{ns}/ADAPTIVE#`, `#DEMAND#{minute}#{resource}#{entity}`):
//! its admitted use per limit, summed over its shards, and which of its
//! shards were found short: a record whose balance, projected to the
//! record's instant with the image's own `cp`/`ra`/`rp`/`shard_count` (as
//! the client's refill decision projects it), left no room for another
//! request of the size just admitted, or was in debt. An entity is
//! **saturated** in a minute when every one of its shards was found short in
//! it: the client tries the other shards before it refuses, so one short
//! shard is not yet a refusal. Rejected requests never reach the stream; the
//! shortness is the demand signal.
//!
//! Only entities that were saturated on some shard, or whose buckets carry a
//! raise of ours (the image's stamp record, with an allocation the
//! controller wrote behind it: the aggregator checks, since a client can
//! write the record on its own bucket), are listed: at most [`ENTITIES_KEPT`] per resource and
//! minute. Each has an item of its own (a few hundred bytes, far from the
//! 400 KB item limit whatever the entity's name), and the minute's header
//! (`#DEMAND#{minute}#{resource}#`) counts them. Concurrent batches merge by
//! `ADD`: use adds up, short shards are a string set. An entity already
//! listed is one conditional update; a new one is a transaction that lists
//! it and raises the header's count only while the count is under the cap.
//! Past the cap, the header's `overflow` counts the entities left out, and
//! the controller holds every unlisted entity's allocation for that minute.

use super::usage::USAGE_TTL_S;
use crate::bucket::BucketImage;
use crate::bucket::refill::refill_tokens;
use crate::keys::{self, Index};
use crate::store::{ITEM_ABSENT, ITEM_EXISTS, Query, TxWrite, Update, UpdateBuilder};
use crate::value::{Attr, Item};
use std::collections::{BTreeMap, BTreeSet};

/// Entities listed per resource and minute.
pub const ENTITIES_KEPT: i64 = 1_000;
pub const ENTITY: &str = "entity";
pub const SHARDS: &str = "shards";
pub const COUNT: &str = "count";
pub const OVERFLOW: &str = "overflow";
const TTL: &str = "ttl";
const USED_PREFIX: &str = "u_";
const SHORT_PREFIX: &str = "short_";

/// What one record says of one limit of its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// No room for another request of the size just admitted, or in debt.
    pub short: bool,
    /// The bucket's image says it carries a raise of ours (our amount,
    /// above the one before). The client can write these fields: a raise
    /// counts only with an allocation of the controller's behind it.
    pub raised: bool,
    pub shards: i64,
}

/// Reads one limit of a bucket's new image at `at_ms`, after a request of
/// `admitted` millitokens; `None` when the image lacks what the client's
/// projection needs. The image was read once, for every use of the record.
pub fn read(image: &BucketImage<'_>, limit: &str, at_ms: i64, admitted: i64) -> Option<Reading> {
    let state = image.limit(limit)?;
    let (tokens, capacity) = (state.balance?, state.capacity?);
    let (amount, period) = image.refill(limit)?;
    let shards = image.shard_count.unwrap_or(1).max(1);
    let projected = refill_tokens(
        tokens,
        image.refilled_at.unwrap_or(at_ms),
        at_ms,
        capacity / shards,
        amount / shards,
        period,
    );
    let raised = image
        .record(limit)
        .is_some_and(|r| r.stamped == amount && amount > r.before);
    Some(Reading {
        short: tokens < 0 || projected < admitted.max(1),
        raised,
        shards,
    })
}

/// One entity's part of a batch, for one resource and minute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Millitokens admitted, per limit.
    pub used: BTreeMap<String, i64>,
    /// Shards found short, per limit.
    pub short: BTreeMap<String, BTreeSet<i64>>,
    pub shards: i64,
}

/// The item of `entity` in `minute_ms`: `entity` empty for the header.
fn key(namespace: &str, resource: &str, minute_ms: i64, entity: &str) -> (String, String) {
    (
        keys::pk_adaptive(namespace),
        keys::sk_adaptive_demand(minute_ms, resource, entity),
    )
}

fn used_attr(limit: &str) -> String {
    format!("{USED_PREFIX}{limit}")
}

fn short_attr(limit: &str) -> String {
    format!("{SHORT_PREFIX}{limit}")
}

/// Adds `seen` to the entity's item, under `condition`.
fn add(parts: (&str, &str, i64, &str), seen: &Seen, condition: &str) -> Update {
    let (namespace, resource, minute_ms, entity) = parts;
    let update = add_builder(parts, seen);
    let (pk, sk) = key(namespace, resource, minute_ms, entity);
    update.build(&pk, &sk, Some(condition.to_owned()))
}

/// The additions of `seen` to the entity's item.
fn add_builder((_, _, minute_ms, entity): (&str, &str, i64, &str), seen: &Seen) -> UpdateBuilder {
    let mut update = UpdateBuilder::new();
    for (limit, used) in &seen.used {
        update.add(&used_attr(limit), Attr::n(used));
    }
    for (limit, shards) in seen.short.iter().filter(|(_, s)| !s.is_empty()) {
        let set = shards.iter().map(i64::to_string).collect();
        update.add(&short_attr(limit), Attr::Ss(set));
    }
    update
        .set(SHARDS, Attr::n(seen.shards))
        .set_if_absent(ENTITY, Attr::s(entity))
        .set_if_absent(TTL, Attr::n(minute_ms / 1000 + USAGE_TTL_S));
    update
}

/// Where an entity's part of a batch goes.
pub struct Listing<'a> {
    pub namespace: &'a str,
    pub resource: &'a str,
    pub minute_ms: i64,
    pub entity: &'a str,
}

impl Listing<'_> {
    fn parts(&self) -> (&str, &str, i64, &str) {
        (self.namespace, self.resource, self.minute_ms, self.entity)
    }

    /// Adds to an entity already listed (fails when it is not).
    pub fn listed(&self, seen: &Seen) -> Update {
        add(self.parts(), seen, ITEM_EXISTS)
    }

    /// Lists or adds to an entity carrying a raise, outside the cap (the
    /// header's count is of the others).
    pub fn raised(&self, seen: &Seen) -> Update {
        let update = add_builder(self.parts(), seen);
        let (pk, sk) = key(self.namespace, self.resource, self.minute_ms, self.entity);
        update.build(&pk, &sk, None)
    }

    /// Lists a new entity while the minute has room: the header's count
    /// first (its condition failing means the cap), then the entity's item
    /// (failing means it was listed meanwhile).
    pub fn admit(&self, seen: &Seen) -> [TxWrite; 2] {
        let mut header = UpdateBuilder::new();
        header
            .add(COUNT, Attr::n(1))
            .set_if_absent(TTL, Attr::n(self.minute_ms / 1000 + USAGE_TTL_S));
        let count = header.name(COUNT);
        let cap = header.value(Attr::n(ENTITIES_KEPT));
        let condition = format!("attribute_not_exists({count}) OR {count} < {cap}");
        let (pk, sk) = key(self.namespace, self.resource, self.minute_ms, "");
        [
            TxWrite::Update(header.build(&pk, &sk, Some(condition))),
            TxWrite::Update(add(self.parts(), seen, ITEM_ABSENT)),
        ]
    }

    /// Counts an entity the cap left out.
    pub fn overflow(&self) -> Update {
        let mut header = UpdateBuilder::new();
        header
            .add(OVERFLOW, Attr::n(1))
            .set_if_absent(TTL, Attr::n(self.minute_ms / 1000 + USAGE_TTL_S));
        let (pk, sk) = key(self.namespace, self.resource, self.minute_ms, "");
        header.build(&pk, &sk, None)
    }
}

/// One listed entity's minute, for one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityMinute {
    /// Millitokens admitted.
    pub used: i64,
    pub saturated: bool,
}

/// A resource's demand in one minute, for one limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    pub entities: BTreeMap<String, EntityMinute>,
    /// Entities left out past the cap: unlisted ones hold.
    pub overflow: i64,
}

impl Demand {
    /// The minute's header and entities.
    pub fn query(namespace: &str, resource: &str, minute_ms: i64) -> Query {
        Query {
            index: &Index::TABLE,
            pk: keys::pk_adaptive(namespace),
            sk_prefix: keys::sk_adaptive_demand(minute_ms, resource, ""),
            consistent: true,
        }
    }

    /// What `items` (the query's) say of `limit`.
    pub fn from_items(items: &[Item], limit: &str) -> Demand {
        let mut demand = Demand::default();
        for item in items {
            let int = |name: &str| item.get(name).and_then(Attr::as_int);
            let Some(entity) = item.get(ENTITY).and_then(Attr::as_s) else {
                demand.overflow = int(OVERFLOW).unwrap_or(0);
                continue;
            };
            let shards = int(SHARDS).unwrap_or(1).max(1);
            let short = match item.get(&short_attr(limit)) {
                Some(Attr::Ss(set)) => set.iter().filter_map(|s| s.parse::<i64>().ok()).collect(),
                _ => BTreeSet::new(),
            };
            let minute = EntityMinute {
                used: int(&used_attr(limit)).unwrap_or(0).max(0),
                saturated: (0..shards).all(|s| short.contains(&s)),
            };
            demand.entities.insert(entity.to_owned(), minute);
        }
        demand
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Image;

    fn image(json: &str) -> Image<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_bucket_is_short_when_its_projected_balance_cannot_fit_the_request_again() {
        // 2 shards: each refills 500 of 1,000 per minute, ceiling 5,000.
        let text = r#"{"b_tpm_tk": {"N": "400"}, "b_tpm_cp": {"N": "10000"},
            "b_tpm_ra": {"N": "1000"}, "b_tpm_rp": {"N": "60000"},
            "rf": {"N": "0"}, "shard_count": {"N": "2"}}"#;
        let img = image(text);
        let i = BucketImage::read(&img).unwrap();
        // At the write: 400 left, a request of 500 does not fit.
        assert!(read(&i, "tpm", 0, 500).unwrap().short);
        // 12 s later the shard has refilled 100: 500 fits.
        assert!(!read(&i, "tpm", 12_000, 500).unwrap().short);
        assert_eq!(read(&i, "tpm", 0, 500).unwrap().shards, 2);
        assert!(read(&i, "rpm", 0, 500).is_none());
    }

    #[test]
    fn debt_is_short_and_our_raise_is_seen() {
        let text = r#"{"b_tpm_tk": {"N": "-1"}, "b_tpm_cp": {"N": "10000"},
            "b_tpm_ra": {"N": "5000"}, "b_tpm_rp": {"N": "60000"},
            "ad_g_tpm": {"N": "7"}, "ad_ra_tpm": {"N": "5000"}, "ad_pre_tpm": {"N": "1000"}}"#;
        let img = image(text);
        let r = read(&BucketImage::read(&img).unwrap(), "tpm", 0, 1).unwrap();
        assert!(r.short && r.raised && r.shards == 1);
    }

    #[test]
    fn an_entity_is_saturated_only_when_every_shard_was_short() {
        let item = |entity: &str, shards: i64, short: &[&str]| -> Item {
            Item::from([
                (ENTITY.to_owned(), Attr::s(entity)),
                (SHARDS.to_owned(), Attr::n(shards)),
                ("u_tpm".to_owned(), Attr::n(9)),
                (
                    "short_tpm".to_owned(),
                    Attr::Ss(short.iter().map(|s| s.to_string()).collect()),
                ),
            ])
        };
        let header = Item::from([(OVERFLOW.to_owned(), Attr::n(3))]);
        let d = Demand::from_items(
            &[header, item("a", 2, &["0", "1"]), item("b", 2, &["1"])],
            "tpm",
        );
        assert!(d.entities["a"].saturated && !d.entities["b"].saturated);
        assert_eq!((d.entities["a"].used, d.overflow), (9, 3));
    }

    #[test]
    fn a_new_entity_raises_the_count_only_under_the_cap() {
        let l = Listing {
            namespace: "ns",
            resource: "r",
            minute_ms: 60_000,
            entity: "e",
        };
        let seen = Seen {
            used: BTreeMap::from([("tpm".to_owned(), 5)]),
            short: BTreeMap::from([("tpm".to_owned(), BTreeSet::from([0]))]),
            shards: 1,
        };
        let [TxWrite::Update(header), TxWrite::Update(entity)] = l.admit(&seen) else {
            panic!("two updates")
        };
        assert_eq!(header.sk, "#DEMAND#0000000060000#r#");
        assert!(header.condition.unwrap().contains('<'));
        assert_eq!(entity.sk, "#DEMAND#0000000060000#r#e");
        assert_eq!(entity.condition.as_deref(), Some(ITEM_ABSENT));
        assert_eq!(l.listed(&seen).condition.as_deref(), Some(ITEM_EXISTS));
    }
}
