//! The ranges the 0.17.0 client writes a bucket's numbers in. Any principal
//! with the acquire policy may write any number on its own bucket; a number
//! outside its range is refused where the item is parsed, so that no
//! arithmetic downstream (a division by a period or a count, a product of a
//! capacity) ever meets it. Counters and balances (`tc`, `tk`, `wtc`, `tu`)
//! and stamps the server side only compares (`gc`, `pgen`) take any `i64`:
//! every sum on them is checked where it is made.

use super::{REFILLED_AT, SHARD_COUNT, VALID_UNTIL, field, shard::MAX_SHARD_COUNT};
use crate::config::MAX_PERIOD_SECONDS;
use crate::stream::AttrError;

/// 9999-12-31T23:59:59.999Z: the last instant an epoch-ms stamp may name.
pub const LAST_MS: i64 = 253_402_300_799_999;

/// The longest refill period the client stores, in milliseconds.
const MAX_PERIOD_MS: i64 = MAX_PERIOD_SECONDS * 1000;

/// The range of an item-level number (`rf`, `vu`, `shard_count`); `None`
/// for one read as any `i64`.
pub fn of_attr(attr: &str) -> Option<(i64, i64)> {
    match attr {
        REFILLED_AT | VALID_UNTIL => Some((0, LAST_MS)),
        SHARD_COUNT => Some((1, MAX_SHARD_COUNT)),
        _ => None,
    }
}

/// The range of a limit's field (`b_{limit}_{field}`), millitokens,
/// milliseconds or seconds as stored. Capacities and amounts have no upper
/// bound of their own: a schedule may scale the client's `MAX_TOKENS` past
/// `i64`, and such a bucket is refused as a number already.
pub fn of_field(name: &str) -> Option<(i64, i64)> {
    match name {
        field::CAPACITY => Some((1, i64::MAX)),
        field::REFILL_AMOUNT => Some((0, i64::MAX)),
        field::REFILL_PERIOD => Some((1, MAX_PERIOD_MS)),
        field::RESET_AFTER => Some((1, MAX_PERIOD_SECONDS)),
        field::WINDOW_START | field::WINDOW_APPLIED => Some((0, LAST_MS)),
        _ => None,
    }
}

/// Whether `value` is within `range` (`None`: any `i64`).
pub fn holds(range: Option<(i64, i64)>, value: i64) -> bool {
    range.is_none_or(|(lo, hi)| (lo..=hi).contains(&value))
}

/// `value` of attribute `name` when within `range`.
pub fn checked(name: &str, value: i64, range: Option<(i64, i64)>) -> Result<i64, AttrError> {
    match range {
        Some((lo, hi)) if !holds(range, value) => Err(AttrError::OutOfRange {
            name: name.to_owned(),
            value,
            lo,
            hi,
        }),
        _ => Ok(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_is_inclusive_and_one_past_it_is_refused_by_name() {
        for (name, range) in [
            ("b_tpm_cp", of_field(field::CAPACITY)),
            ("b_tpm_rp", of_field(field::REFILL_PERIOD)),
            ("rf", of_attr(REFILLED_AT)),
            ("shard_count", of_attr(SHARD_COUNT)),
        ] {
            let (lo, hi) = range.unwrap();
            assert_eq!(checked(name, lo, range), Ok(lo));
            assert_eq!(checked(name, hi, range), Ok(hi));
            let below = checked(name, lo - 1, range).unwrap_err();
            assert!(below.to_string().contains(name), "{below}");
            if hi < i64::MAX {
                assert!(checked(name, hi + 1, range).is_err());
            }
        }
        assert_eq!(
            checked("b_tpm_tk", i64::MIN, of_field(field::TOKENS)),
            Ok(i64::MIN)
        );
    }
}
