//! A bucket's adaptive stamp: the refill amount its limit carries under a
//! target factor, written as a compare-and-set on the amount read.
//!
//! A bucket is managed only while its stored capacity (`b_{limit}_cp`) is
//! its governing level's configured one: buckets whose parameters came
//! from `acquire(limits=...)` or from an older config are left alone. The
//! stamp is `min(base x factor, cp)`, never below the base, on every shard
//! (stored values are undivided). A decrease also sets `vu = 0`: the
//! client's slow path and the aggregator's refill pin `vu`, so a refill
//! computed from an image read before the decrease cannot apply the old rate.

use super::law::{Factor, stamped_refill};
use crate::bucket::{VALID_UNTIL, field, limit_attr};
use crate::config::LimitConfig;
use crate::keys;
use crate::milli::MILLI;
use crate::store::{ITEM_EXISTS, Update, UpdateBuilder};
use crate::value::{Attr, Item};

/// What a bucket needs for one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    /// Not the governing level's parameters, or no such limit: left alone.
    Unmanaged,
    /// Already carries the stamp.
    Current,
    /// The write that stamps it.
    Write { update: Update, lowers: bool },
}

/// The stamp of `bucket` for `limit`, whose governing level configures
/// `base`, under `factor` capped by `max_scale`.
pub fn stamp(
    bucket: &Item,
    base: &LimitConfig,
    factor: Factor,
    max_scale: Option<Factor>,
) -> Stamp {
    let attr = |f: &str| limit_attr(&base.name, f);
    let int = |name: &str| bucket.get(name).and_then(Attr::as_int);
    let (Some(cp), Some(ra)) = (
        int(&attr(field::CAPACITY)),
        int(&attr(field::REFILL_AMOUNT)),
    ) else {
        return Stamp::Unmanaged;
    };
    let configured = base.capacity.checked_mul(MILLI);
    let base_ra = base.refill_amount.checked_mul(MILLI);
    let (Some(configured), Some(base_ra)) = (configured, base_ra) else {
        return Stamp::Unmanaged;
    };
    if cp != configured {
        return Stamp::Unmanaged;
    }
    let wanted = stamped_refill(base_ra, cp, factor, max_scale);
    if wanted == ra {
        return Stamp::Current;
    }
    let (Some(pk), Some(sk)) = (keys::pk_of(bucket), keys::sk_of(bucket)) else {
        return Stamp::Unmanaged;
    };
    let lowers = wanted < ra;
    let mut update = UpdateBuilder::new();
    update.set(&attr(field::REFILL_AMOUNT), Attr::n(wanted));
    if lowers {
        update.set(VALID_UNTIL, Attr::n(0));
    }
    let ra_name = update.name(&attr(field::REFILL_AMOUNT));
    let cp_name = update.name(&attr(field::CAPACITY));
    let read = update.value(Attr::n(ra));
    let capacity = update.value(Attr::n(cp));
    let condition = format!("{ITEM_EXISTS} AND {ra_name} = {read} AND {cp_name} = {capacity}");
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

    #[test]
    fn a_raise_sets_ra_alone_and_a_cut_also_sets_vu() {
        let five = Factor::from_ppm(5_000_000);
        let Stamp::Write { update, lowers } =
            stamp(&bucket(10_000_000, 1_000_000), &base(), five, None)
        else {
            panic!("a write")
        };
        assert!(!lowers);
        assert!(update.values.values().any(|v| *v == Attr::n(5_000_000)));
        assert!(!update.names.values().any(|n| n == "vu"));
        let Stamp::Write { update, lowers } =
            stamp(&bucket(10_000_000, 5_000_000), &base(), Factor::ONE, None)
        else {
            panic!("a write")
        };
        assert!(lowers);
        assert!(update.names.values().any(|n| n == "vu"));
        assert!(update.condition.unwrap().contains("attribute_exists(PK)"));
    }

    #[test]
    fn buckets_on_other_parameters_are_left_alone_and_current_ones_unwritten() {
        let five = Factor::from_ppm(5_000_000);
        assert_eq!(
            stamp(&bucket(9_999_000, 1_000_000), &base(), five, None),
            Stamp::Unmanaged
        );
        assert_eq!(
            stamp(&bucket(10_000_000, 5_000_000), &base(), five, None),
            Stamp::Current
        );
        // Never above the burst: 20x asks for 20,000/min, the burst is 10,000.
        let twenty = Factor::from_ppm(20_000_000);
        let Stamp::Write { update, .. } =
            stamp(&bucket(10_000_000, 1_000_000), &base(), twenty, None)
        else {
            panic!("a write")
        };
        assert!(update.values.values().any(|v| *v == Attr::n(10_000_000)));
    }
}
