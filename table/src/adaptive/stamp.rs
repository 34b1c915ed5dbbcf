//! A bucket's adaptive stamp: the refill amount its limit carries under a
//! target factor, written as a compare-and-set on the amount read.
//!
//! Every stamp records, beside the limit and outside the client's
//! `b_{limit}_{field}` names (the client finds a limit by `b_{limit}_tk` and
//! `b_{limit}_cp` and reads nothing else of ours):
//! - `ad_g_{limit}`: the generation of the target the stamp came from. A
//!   stamp is written only over one of the same or an older generation, so
//!   no writer puts an older decision over a newer one;
//! - `ad_ra_{limit}`: the refill amount the stamp wrote. While the bucket
//!   still carries it, the amount is ours; once the client writes another
//!   (an admin sync), the record no longer speaks for it;
//! - `ad_pre_{limit}`: the amount the bucket carried before it was first
//!   stamped: what the unchanged client would have left on it.
//!
//! A bucket is managed while its stored capacity (`b_{limit}_cp`) is its
//! governing level's configured one; it is then stamped with
//! `min(base x factor, cp)`, never below the base, on every shard (stored
//! values are undivided). A bucket whose capacity no longer matches (the
//! client's `set_system_defaults` or `set_resource_defaults` leave existing
//! buckets as they were) but still carries our amount goes back to the one
//! recorded before the first stamp, and loses the record. Buckets whose
//! parameters came from `acquire(limits=...)` or an older config, never
//! stamped, are left alone. A decrease also sets `vu = 0`: the client's
//! slow path and the aggregator's refill pin `vu`, so a refill computed from
//! an image read before the decrease cannot apply the old rate.

use super::law::{Factor, stamped_refill};
use crate::bucket::{VALID_UNTIL, field, limit_attr};
use crate::config::LimitConfig;
use crate::keys;
use crate::milli::MILLI;
use crate::store::{ITEM_EXISTS, Update, UpdateBuilder};
use crate::value::{Attr, Item};

/// The record's attributes for a limit.
pub fn generation_attr(limit: &str) -> String {
    format!("ad_g_{limit}")
}

pub fn stamped_attr(limit: &str) -> String {
    format!("ad_ra_{limit}")
}

pub fn before_attr(limit: &str) -> String {
    format!("ad_pre_{limit}")
}

/// What a bucket records of its last stamp of one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub generation: i64,
    /// The refill amount the stamp wrote.
    pub stamped: i64,
    /// The amount before the first stamp.
    pub before: i64,
}

impl Record {
    /// The record of `limit` on `bucket`, when it has a whole one.
    pub fn of(bucket: &Item, limit: &str) -> Option<Record> {
        let int = |name: String| bucket.get(&name).and_then(Attr::as_int);
        Some(Record {
            generation: int(generation_attr(limit))?,
            stamped: int(stamped_attr(limit))?,
            before: int(before_attr(limit))?,
        })
    }

    /// The attributes a stream image carries of it, for the repair.
    pub fn names(limit: &str) -> [String; 3] {
        [
            generation_attr(limit),
            stamped_attr(limit),
            before_attr(limit),
        ]
    }
}

/// What a bucket needs for one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// Not the governing level's parameters and not ours, or no such limit:
    /// left alone.
    Unmanaged,
    /// Already carries the stamp.
    Current,
    /// The write that stamps it.
    Write { update: Update, lowers: bool },
}

/// What a stamp is for: the factor its target asks of the limit the
/// governing level configures (`base`), capped by `max_scale`, and the
/// target's generation.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub base: &'a LimitConfig,
    pub factor: Factor,
    pub max_scale: Option<Factor>,
    pub generation: i64,
}

/// The stamp of `bucket` for `wanted.base`'s limit.
pub fn stamp(bucket: &Item, wanted: Wanted<'_>) -> Stamp {
    let limit = wanted.base.name.as_str();
    let int = |name: &str| bucket.get(name).and_then(Attr::as_int);
    let (Some(cp), Some(ra)) = (
        int(&limit_attr(limit, field::CAPACITY)),
        int(&limit_attr(limit, field::REFILL_AMOUNT)),
    ) else {
        return Stamp::Unmanaged;
    };
    let record = Record::of(bucket, limit);
    if record.is_some_and(|r| r.generation > wanted.generation) {
        // A newer target's stamp: not ours to change.
        return Stamp::Current;
    }
    // The amount in place is ours while the bucket still carries it.
    let ours = record.filter(|r| r.stamped == ra);
    let configured = wanted.base.capacity.checked_mul(MILLI);
    let base_ra = wanted.base.refill_amount.checked_mul(MILLI);
    let (Some(configured), Some(base_ra)) = (configured, base_ra) else {
        return Stamp::Unmanaged;
    };
    if cp != configured {
        return match ours {
            Some(r) => write(bucket, limit, (cp, ra), r.before, None, wanted.generation),
            None => Stamp::Unmanaged,
        };
    }
    let target = stamped_refill(base_ra, cp, wanted.factor, wanted.max_scale);
    if target == ra {
        return Stamp::Current;
    }
    let before = ours.map_or(ra, |r| r.before);
    write(
        bucket,
        limit,
        (cp, ra),
        target,
        Some(before),
        wanted.generation,
    )
}

/// The compare-and-set that puts `target` on the limit (read at `cp`, `ra`),
/// recording the stamp when `before` is given and dropping the record when
/// not; pinned to records of `generation` or older.
fn write(
    bucket: &Item,
    limit: &str,
    (cp, ra): (i64, i64),
    target: i64,
    before: Option<i64>,
    generation: i64,
) -> Stamp {
    let (Some(pk), Some(sk)) = (keys::pk_of(bucket), keys::sk_of(bucket)) else {
        return Stamp::Unmanaged;
    };
    let lowers = target < ra;
    let mut update = UpdateBuilder::new();
    update.set(&limit_attr(limit, field::REFILL_AMOUNT), Attr::n(target));
    match before {
        Some(before) => {
            update
                .set(&generation_attr(limit), Attr::n(generation))
                .set(&stamped_attr(limit), Attr::n(target))
                .set(&before_attr(limit), Attr::n(before));
        }
        None => {
            for name in Record::names(limit) {
                update.remove(&name);
            }
        }
    }
    if lowers {
        update.set(VALID_UNTIL, Attr::n(0));
    }
    let ra_name = update.name(&limit_attr(limit, field::REFILL_AMOUNT));
    let cp_name = update.name(&limit_attr(limit, field::CAPACITY));
    let g_name = update.name(&generation_attr(limit));
    let read = update.value(Attr::n(ra));
    let capacity = update.value(Attr::n(cp));
    let g = update.value(Attr::n(generation));
    let condition = format!(
        "{ITEM_EXISTS} AND {ra_name} = {read} AND {cp_name} = {capacity} \
         AND (attribute_not_exists({g_name}) OR {g_name} <= {g})"
    );
    Stamp::Write {
        update: update.build(pk, sk, Some(condition)),
        lowers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> LimitConfig {
        LimitConfig::drip("tpm", 10_000, 1_000, 60)
    }

    fn bucket(cp: i64, ra: i64) -> Item {
        Item::from([
            ("PK".into(), Attr::s("ns/BUCKET#e#r#0")),
            ("SK".into(), Attr::s("#STATE")),
            ("b_tpm_cp".into(), Attr::n(cp)),
            ("b_tpm_ra".into(), Attr::n(ra)),
        ])
    }

    fn recorded(mut bucket: Item, generation: i64, stamped: i64, before: i64) -> Item {
        bucket.insert(generation_attr("tpm"), Attr::n(generation));
        bucket.insert(stamped_attr("tpm"), Attr::n(stamped));
        bucket.insert(before_attr("tpm"), Attr::n(before));
        bucket
    }

    fn wanted(base: &LimitConfig, factor: i64, generation: i64) -> Wanted<'_> {
        Wanted {
            base,
            factor: Factor::from_ppm(factor * 1_000_000),
            max_scale: None,
            generation,
        }
    }

    fn value(update: &Update, attr: &str) -> Option<Attr> {
        update.assigned(attr).cloned()
    }

    #[test]
    fn a_raise_records_the_amount_before_and_a_cut_also_sets_vu() {
        let base = base();
        let Stamp::Write { update, lowers } =
            stamp(&bucket(10_000_000, 1_000_000), wanted(&base, 5, 3))
        else {
            panic!("a write")
        };
        assert!(!lowers);
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(5_000_000)));
        assert_eq!(value(&update, "ad_g_tpm"), Some(Attr::n(3)));
        assert_eq!(value(&update, "ad_ra_tpm"), Some(Attr::n(5_000_000)));
        assert_eq!(value(&update, "ad_pre_tpm"), Some(Attr::n(1_000_000)));
        assert!(!update.names.values().any(|n| n == "vu"));
        let condition = update.condition.unwrap();
        assert!(condition.contains("attribute_not_exists") && condition.contains("<="));
        // Stamped at 5x, cut to base: the amount before stays what it was.
        let stamped = recorded(bucket(10_000_000, 5_000_000), 3, 5_000_000, 1_000_000);
        let Stamp::Write { update, lowers } = stamp(&stamped, wanted(&base, 1, 4)) else {
            panic!("a write")
        };
        assert!(lowers);
        assert!(update.names.values().any(|n| n == "vu"));
        assert_eq!(value(&update, "ad_pre_tpm"), Some(Attr::n(1_000_000)));
    }

    #[test]
    fn an_older_generation_never_writes_over_a_newer_stamp() {
        let stamped = recorded(bucket(10_000_000, 1_000_000), 7, 1_000_000, 1_000_000);
        assert_eq!(stamp(&stamped, wanted(&base(), 5, 6)), Stamp::Current);
        assert!(matches!(
            stamp(&stamped, wanted(&base(), 5, 7)),
            Stamp::Write { .. }
        ));
    }

    #[test]
    fn a_capacity_the_config_no_longer_has_goes_back_to_the_amount_before_the_first_stamp() {
        // The system default's capacity moved to 20,000: the bucket keeps
        // 10,000, and the 5x stamp goes back to the 1,000 the client left.
        let moved = LimitConfig::drip("tpm", 20_000, 2_000, 60);
        let stamped = recorded(bucket(10_000_000, 5_000_000), 3, 5_000_000, 1_000_000);
        let Stamp::Write { update, lowers } = stamp(&stamped, wanted(&moved, 5, 3)) else {
            panic!("a write")
        };
        assert!(lowers);
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(1_000_000)));
        assert!(
            update.expression.contains("REMOVE"),
            "{}",
            update.expression
        );
        // Never stamped, or re-synced by the client since: left alone.
        assert_eq!(
            stamp(&bucket(10_000_000, 1_000_000), wanted(&moved, 5, 3)),
            Stamp::Unmanaged
        );
        let synced = recorded(bucket(10_000_000, 3_000_000), 3, 5_000_000, 1_000_000);
        assert_eq!(stamp(&synced, wanted(&moved, 5, 3)), Stamp::Unmanaged);
    }

    #[test]
    fn an_amount_the_client_wrote_over_a_stamp_is_the_new_amount_before() {
        // An admin sync wrote 2,000 over the 5x stamp: that is the client's now.
        let synced = recorded(bucket(10_000_000, 2_000_000), 3, 5_000_000, 1_000_000);
        let Stamp::Write { update, .. } = stamp(&synced, wanted(&base(), 5, 4)) else {
            panic!("a write")
        };
        assert_eq!(value(&update, "ad_pre_tpm"), Some(Attr::n(2_000_000)));
    }

    #[test]
    fn buckets_on_other_parameters_are_left_alone_and_current_ones_unwritten() {
        let base = base();
        assert_eq!(
            stamp(&bucket(9_999_000, 1_000_000), wanted(&base, 5, 1)),
            Stamp::Unmanaged
        );
        assert_eq!(
            stamp(&bucket(10_000_000, 5_000_000), wanted(&base, 5, 1)),
            Stamp::Current
        );
        // Never above the burst: 20x asks for 20,000/min, the burst is 10,000.
        let Stamp::Write { update, .. } =
            stamp(&bucket(10_000_000, 1_000_000), wanted(&base, 20, 1))
        else {
            panic!("a write")
        };
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(10_000_000)));
    }
}
