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
//! A bucket is governed by its level while it stores the level's own
//! parameters: its `cp`, its `rp`, and its `ra` before the first stamp
//! (`ad_pre`) are the level's. It is then stamped with
//! `min(base x factor, cp)`, never below the base, on every shard (stored
//! values are undivided). Anything else is left alone: a caller's
//! `acquire(limits=...)` shares the level's burst but not its rate, and an
//! older config (the client's `set_system_defaults` or
//! `set_resource_defaults` leave existing buckets as they were) may share
//! either. Such a bucket that still carries our amount goes back to the one
//! recorded before the first stamp, and loses the record. A decrease also
//! sets `vu = 0`: the client's
//! slow path and the aggregator's refill pin `vu`, so a refill computed from
//! an image read before the decrease cannot apply the old rate.

use super::factor::{Factor, stamped_refill};
pub use crate::bucket::stamp_record::{
    RECORD_PREFIXES, Record, before_attr, generation_attr, split_record_attr, stamped_attr,
};
use crate::bucket::{VALID_UNTIL, field, limit_attr};
use crate::config::LimitConfig;
use crate::keys;
use crate::milli::MILLI;
use crate::store::{ITEM_EXISTS, Update, UpdateBuilder};
use crate::value::{Attr, Item};

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

/// A bucket's parameters of one limit as stored: `cp` and `ra` in
/// millitokens, `rp` in milliseconds (undivided).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stored {
    cp: i64,
    ra: i64,
    rp: Option<i64>,
}

impl Stored {
    fn of(bucket: &Item, limit: &str) -> Option<Stored> {
        let int = |f: &str| bucket.get(&limit_attr(limit, f)).and_then(Attr::as_int);
        Some(Stored {
            cp: int(field::CAPACITY)?,
            ra: int(field::REFILL_AMOUNT)?,
            rp: int(field::REFILL_PERIOD),
        })
    }
}

/// The stamp of `bucket` for `wanted.base`'s limit.
pub fn stamp(bucket: &Item, wanted: Wanted<'_>) -> Stamp {
    let limit = wanted.base.name.as_str();
    let Some(stored) = Stored::of(bucket, limit) else {
        return Stamp::Unmanaged;
    };
    let record = Record::of(bucket, limit);
    if record.is_some_and(|r| r.generation > wanted.generation) {
        // A newer target's stamp: not ours to change.
        return Stamp::Current;
    }
    // The amount in place is ours while the bucket still carries it.
    let ours = record.filter(|r| r.stamped == stored.ra);
    let Some(level) = level_parameters(wanted.base) else {
        return Stamp::Unmanaged;
    };
    // Governed only by the level's own parameters: a caller's
    // `acquire(limits=...)` or an older config shares the burst but not the
    // rate, and scaling its amount would mint tokens at a rate nobody set.
    let before = ours.map_or(stored.ra, |r| r.before);
    let governed = stored.cp == level.cp && stored.rp == level.rp && before == level.ra;
    if !governed {
        return match ours {
            Some(r) => write(bucket, limit, stored, r.before, None, wanted.generation),
            None => Stamp::Unmanaged,
        };
    }
    let target = stamped_refill(level.ra, stored.cp, wanted.factor, wanted.max_scale);
    if target == stored.ra {
        return Stamp::Current;
    }
    write(
        bucket,
        limit,
        stored,
        target,
        Some(before),
        wanted.generation,
    )
}

/// What a bucket the level governs stores: the level's parameters in the
/// bucket's units.
fn level_parameters(base: &LimitConfig) -> Option<Stored> {
    Some(Stored {
        cp: base.capacity.checked_mul(MILLI)?,
        ra: base.refill_amount.checked_mul(MILLI)?,
        rp: Some(base.refill_period.checked_mul(MILLI)?),
    })
}

/// The compare-and-set that puts `target` on the limit (read as `stored`),
/// recording the stamp when `before` is given and dropping the record when
/// not; pinned to records of `generation` or older.
fn write(
    bucket: &Item,
    limit: &str,
    stored: Stored,
    target: i64,
    before: Option<i64>,
    generation: i64,
) -> Stamp {
    let (Some(pk), Some(sk)) = (keys::pk_of(bucket), keys::sk_of(bucket)) else {
        return Stamp::Unmanaged;
    };
    let lowers = target < stored.ra;
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
    let condition = read_condition(&mut update, limit, stored, generation);
    Stamp::Write {
        update: update.build(pk, sk, Some(condition)),
        lowers,
    }
}

/// The bucket still as read (`cp`, `ra` and `rp`), and no newer stamp.
fn read_condition(update: &mut UpdateBuilder, limit: &str, stored: Stored, g: i64) -> String {
    let ra_name = update.name(&limit_attr(limit, field::REFILL_AMOUNT));
    let cp_name = update.name(&limit_attr(limit, field::CAPACITY));
    let rp_name = update.name(&limit_attr(limit, field::REFILL_PERIOD));
    let g_name = update.name(&generation_attr(limit));
    let read = update.value(Attr::n(stored.ra));
    let capacity = update.value(Attr::n(stored.cp));
    let g = update.value(Attr::n(g));
    let period = match stored.rp {
        Some(rp) => format!("{rp_name} = {}", update.value(Attr::n(rp))),
        None => format!("attribute_not_exists({rp_name})"),
    };
    format!(
        "{ITEM_EXISTS} AND {ra_name} = {read} AND {cp_name} = {capacity} AND {period} \
         AND (attribute_not_exists({g_name}) OR {g_name} <= {g})"
    )
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
            ("b_tpm_rp".into(), Attr::n(60_000)),
        ])
    }

    /// A bucket as a caller's own `acquire(limits=...)` leaves it.
    fn on_period(mut bucket: Item, rp: i64) -> Item {
        bucket.insert("b_tpm_rp".into(), Attr::n(rp));
        bucket
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
        // The level moved to 2,000/min and the client's sync wrote it over
        // the 5x stamp: that amount is the client's now.
        let moved = LimitConfig::drip("tpm", 10_000, 2_000, 60);
        let synced = recorded(bucket(10_000_000, 2_000_000), 3, 5_000_000, 1_000_000);
        let Stamp::Write { update, .. } = stamp(&synced, wanted(&moved, 5, 4)) else {
            panic!("a write")
        };
        assert_eq!(value(&update, "ad_pre_tpm"), Some(Attr::n(2_000_000)));
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(10_000_000)));
        // An amount that is not the level's, written over a stamp: the
        // client's, and not the level's to scale.
        assert_eq!(stamp(&synced, wanted(&base(), 5, 4)), Stamp::Unmanaged);
    }

    #[test]
    fn a_callers_own_limit_on_the_levels_burst_is_never_scaled() {
        // `acquire(limits=[Limit.per_second("tpm", 100, burst=10000)])` on a
        // level of 1,000/min, burst 10,000: the level's `cp`, not its rate.
        let base = base();
        let own = on_period(bucket(10_000_000, 100_000), 1_000);
        assert_eq!(stamp(&own, wanted(&base, 5, 1)), Stamp::Unmanaged);
        // The level's period and burst, another amount: not the level's.
        assert_eq!(
            stamp(&bucket(10_000_000, 500_000), wanted(&base, 5, 1)),
            Stamp::Unmanaged
        );
        // No period stored: nothing says it is the level's.
        let mut bare = bucket(10_000_000, 1_000_000);
        bare.remove("b_tpm_rp");
        assert_eq!(stamp(&bare, wanted(&base, 5, 1)), Stamp::Unmanaged);
    }

    #[test]
    fn a_stamp_on_a_bucket_the_level_does_not_govern_goes_back() {
        // What an earlier version wrote over a caller's 100/s: 1,000 x 10
        // under rp = 1 s. It goes back to the caller's 100/s.
        let minted = recorded(
            on_period(bucket(10_000_000, 10_000_000), 1_000),
            3,
            10_000_000,
            100_000,
        );
        let Stamp::Write { update, lowers } = stamp(&minted, wanted(&base(), 10, 3)) else {
            panic!("a write")
        };
        assert!(lowers);
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(100_000)));
        assert!(update.expression.contains("REMOVE"));
        // The level's period moved to an hour (`set_system_defaults`): a
        // bucket stamped under the minute goes back to what it had.
        let hourly = LimitConfig::drip("tpm", 10_000, 1_000, 3_600);
        let stamped = recorded(bucket(10_000_000, 5_000_000), 3, 5_000_000, 1_000_000);
        let Stamp::Write { update, .. } = stamp(&stamped, wanted(&hourly, 5, 3)) else {
            panic!("a write")
        };
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(1_000_000)));
        // The write holds only over the period read.
        let condition = update.condition.unwrap();
        let rp = update.names.iter().find(|(_, n)| *n == "b_tpm_rp");
        assert!(rp.is_some_and(|(alias, _)| condition.contains(alias.as_str())));
    }

    #[test]
    fn buckets_on_other_parameters_are_left_alone_and_current_ones_unwritten() {
        let base = base();
        assert_eq!(
            stamp(&bucket(9_999_000, 1_000_000), wanted(&base, 5, 1)),
            Stamp::Unmanaged
        );
        // At 5x with no record of ours: a caller's own amount, not ours.
        assert_eq!(
            stamp(&bucket(10_000_000, 5_000_000), wanted(&base, 5, 1)),
            Stamp::Unmanaged
        );
        let ours = recorded(bucket(10_000_000, 5_000_000), 1, 5_000_000, 1_000_000);
        assert_eq!(stamp(&ours, wanted(&base, 5, 1)), Stamp::Current);
        // Never above the burst: 20x asks for 20,000/min, the burst is 10,000.
        let Stamp::Write { update, .. } =
            stamp(&bucket(10_000_000, 1_000_000), wanted(&base, 20, 1))
        else {
            panic!("a write")
        };
        assert_eq!(value(&update, "b_tpm_ra"), Some(Attr::n(10_000_000)));
    }
}
