//! Bucket items (`#STATE`): the attributes the server side reads and
//! stamps, and the per-limit attributes of a bucket image; the adaptive
//! stamp's record on it ([`stamp_record`]), its refill ([`refill`]), shards
//! ([`shard`]) and ranges ([`range`]).

use crate::names::is_limit_name;
use crate::stream::{AttrError, Image};
use stamp_record::{Record, split_record_attr};
use std::collections::BTreeMap;

pub mod range;
pub mod refill;
pub mod sched;
pub mod shard;
pub mod stamp_record;
mod state;

pub use state::{BucketState, LimitParams};

pub const BUCKET_ATTR_PREFIX: &str = "b_";
pub const SHARD_COUNT: &str = "shard_count";
/// The last refill instant (epoch ms); also the time of a record without one.
pub const REFILLED_AT: &str = "rf";
/// `0` forces the client's next slow-path pass to re-read parameters.
pub const VALID_UNTIL: &str = "vu";
pub const TTL: &str = "ttl";
pub const DISABLED: &str = "disabled";
/// A bypass deadline (epoch ms).
pub const BYPASS: &str = "bypass";
pub const CASCADE: &str = "cascade";
pub const PARENT_ID: &str = "parent_id";
/// The parent generation and entity incarnation a cascade stamp came from.
pub const PARENT_GENERATION: &str = "pgen";
pub const PARENT_INCARNATION: &str = "pinc";
/// The bucket's default schedule and reset schedule, and their timezone.
pub const SCHED: &str = "sched";
pub const RSCHED: &str = "rsched";
pub const SCHED_TZ: &str = "sched_tz";
/// A per-limit schedule override meaning "no schedule" under a bucket default.
pub const SCHED_NONE: &str = "-";

/// The fields of one limit on a bucket: `b_{limit}_{field}`.
pub mod field {
    /// Cumulative net consumption, millitokens.
    pub const CONSUMED: &str = "tc";
    /// Balance, millitokens; negative when a soft limit is overdrawn.
    pub const TOKENS: &str = "tk";
    /// Capacity, refill amount (millitokens) and refill period (ms), undivided.
    pub const CAPACITY: &str = "cp";
    pub const REFILL_AMOUNT: &str = "ra";
    pub const REFILL_PERIOD: &str = "rp";
    /// Present (any form): the limit is soft; a number is its renewal deadline.
    pub const SOFT: &str = "soft";
    pub const RESET_AFTER: &str = "rsa";
    pub const SCHED: &str = "sched";
    pub const RSCHED: &str = "rsched";
    /// A duration window's start (epoch ms) and the start already applied.
    pub const WINDOW_START: &str = "ws";
    pub const WINDOW_APPLIED: &str = "wa";
    /// `tc` as the client's rollover fan-out saw it, millitokens.
    pub const WINDOW_CONSUMED: &str = "wtc";
    /// How many shards a quota's allowance was split into when granted.
    pub const GRANT_COUNT: &str = "gc";
    /// Allowance topped up in this period, millitokens.
    pub const TOPPED_UP: &str = "tu";
    /// A quota's operator-reset count (ADR-149); a credit pins it.
    pub const RESET_NUMBER: &str = "rn";
    /// Every per-limit field the client writes, for stripping a stale limit.
    pub const ALL: [&str; 15] = [
        "tk", "cp", "ra", "rp", "tc", "sched", "rsched", "soft", "rsa", "ws", "wa", "wtc", "gc",
        "tu", "rn",
    ];
}

/// `b_{limit}_{field}`.
pub fn limit_attr(limit: &str, field: &str) -> String {
    format!("{BUCKET_ATTR_PREFIX}{limit}_{field}")
}

/// What one image says about one limit, in millitokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitState {
    /// `b_{n}_tc`: cumulative net consumption.
    pub consumed: Option<i64>,
    /// `b_{n}_tk`: balance; negative when a soft limit is overdrawn.
    pub balance: Option<i64>,
    /// `b_{n}_cp`: undivided base capacity.
    pub capacity: Option<i64>,
    /// `b_{n}_soft` present, in any form: the limit is soft.
    pub soft: bool,
}

/// The limits of one bucket image, by name, in name order, read in one pass
/// over its attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketImage<'i> {
    pub limits: BTreeMap<&'i str, LimitState>,
    pub shard_count: Option<i64>,
    /// `rf`; `None` also when not a number.
    pub refilled_at: Option<i64>,
    /// What only the demand reading uses, per limit: kept apart from
    /// `limits`, whose entries are the limits that count.
    refills: BTreeMap<&'i str, Refill>,
}

/// A limit's refill and its adaptive stamp record, as an image has them;
/// `None` also when not a number (the demand reading then skips the limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Refill {
    /// `b_{n}_ra`, `b_{n}_rp`.
    amount: Option<i64>,
    period: Option<i64>,
    /// In the order of `Record::names`.
    record: [Option<i64>; 3],
}

/// Splits `b_{name}_{field}` on the last `_`; names may contain `_` themselves.
pub fn split_bucket_attr(attr: &str) -> Option<(&str, &str)> {
    let rest = attr.strip_prefix(BUCKET_ATTR_PREFIX)?;
    let (name, field) = rest.rsplit_once('_')?;
    is_limit_name(name).then_some((name, field))
}

impl<'i> BucketImage<'i> {
    pub fn read(image: &'i Image<'_>) -> Result<BucketImage<'i>, AttrError> {
        let mut bucket = BucketImage {
            shard_count: image
                .int(SHARD_COUNT)?
                .map(|n| range::checked(SHARD_COUNT, n, range::of_attr(SHARD_COUNT)))
                .transpose()?,
            ..BucketImage::default()
        };
        for (attr, value) in image.entries() {
            // Outside its range is as unreadable as not a number.
            let lenient = |range| value.int(attr).ok().filter(|n| range::holds(range, *n));
            let Some((name, field)) = split_bucket_attr(attr) else {
                if attr == REFILLED_AT {
                    bucket.refilled_at = lenient(range::of_attr(REFILLED_AT));
                } else if let Some((limit, place)) = split_record_attr(attr) {
                    bucket.refills.entry(limit).or_default().record[place] = lenient(None);
                }
                continue;
            };
            let number = || {
                let n = value.int(attr)?;
                range::checked(attr, n, range::of_field(field)).map(Some)
            };
            let slot = match field {
                field::CONSUMED | field::TOKENS | field::CAPACITY | field::SOFT => {
                    bucket.limits.entry(name).or_default()
                }
                field::REFILL_AMOUNT => {
                    bucket.refills.entry(name).or_default().amount =
                        lenient(range::of_field(field));
                    continue;
                }
                field::REFILL_PERIOD => {
                    bucket.refills.entry(name).or_default().period =
                        lenient(range::of_field(field));
                    continue;
                }
                _ => continue,
            };
            match field {
                field::CONSUMED => slot.consumed = number()?,
                field::TOKENS => slot.balance = number()?,
                field::CAPACITY => slot.capacity = number()?,
                _ => slot.soft = true,
            }
        }
        Ok(bucket)
    }

    /// `limit`'s refill amount and period, when both are numbers.
    pub fn refill(&self, limit: &str) -> Option<(i64, i64)> {
        let refill = self.refills.get(limit)?;
        Some((refill.amount?, refill.period?))
    }

    /// The adaptive stamp record of `limit`, when the image has a whole one.
    pub fn record(&self, limit: &str) -> Option<Record> {
        match self.refills.get(limit)?.record {
            [Some(generation), Some(stamped), Some(before)] => Some(Record {
                generation,
                stamped,
                before,
            }),
            _ => None,
        }
    }

    pub fn limit(&self, name: &str) -> Option<&LimitState> {
        self.limits.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(json: &str) -> Image<'_> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn reads_limits_split_on_the_last_underscore() {
        let img = image(
            r##"{"b_tok_in_tc":{"N":"7"},"b_tok_in_tk":{"N":"-3"},"b_tpm_soft":{"BOOL":true},
                "b_tpm_cp":{"N":"50000"},"b_tpm_rn":{"S":"x"},"shard_count":{"N":"2"},"rf":{"N":"1"}}"##,
        );
        let b = BucketImage::read(&img).unwrap();
        assert_eq!(b.shard_count, Some(2));
        assert_eq!(
            b.limit("tok_in"),
            Some(&LimitState {
                consumed: Some(7),
                balance: Some(-3),
                ..Default::default()
            })
        );
        let tpm = b.limit("tpm").unwrap();
        assert!(tpm.soft);
        assert_eq!(tpm.capacity, Some(50_000));
        assert_eq!(b.limits.len(), 2);
    }

    #[test]
    fn the_refill_rf_and_a_whole_stamp_record_are_read_in_the_same_pass() {
        let img = image(
            r##"{"b_tpm_ra":{"N":"5000"},"b_tpm_rp":{"N":"60000"},"rf":{"N":"9"},
                "ad_g_tpm":{"N":"7"},"ad_ra_tpm":{"N":"5000"},"ad_pre_tpm":{"N":"1000"},
                "ad_g_rpm":{"N":"7"},"ad_ra_rpm":{"N":"5000"}}"##,
        );
        let b = BucketImage::read(&img).unwrap();
        assert_eq!(
            (b.refill("tpm"), b.refilled_at),
            (Some((5_000, 60_000)), Some(9))
        );
        assert!(b.limits.is_empty(), "a refill alone is no counted limit");
        let record = b.record("tpm").unwrap();
        assert_eq!(
            (record.generation, record.stamped, record.before),
            (7, 5_000, 1_000)
        );
        assert_eq!(b.record("rpm"), None, "a partial record is none");
    }

    #[test]
    fn a_refill_that_is_not_a_number_is_absent_not_an_error() {
        let img = image(r##"{"b_tpm_ra":{"S":"x"},"b_tpm_rp":{"N":"1e400"},"rf":{"S":"y"}}"##);
        let b = BucketImage::read(&img).unwrap();
        assert_eq!((b.refill("tpm"), b.refilled_at), (None, None));
    }

    #[test]
    fn names_outside_the_client_grammar_are_not_limits() {
        let img = image(r##"{"b_a#od_tc":{"N":"1"},"b__tc":{"N":"1"}}"##);
        assert!(BucketImage::read(&img).unwrap().limits.is_empty());
    }

    #[test]
    fn a_number_outside_the_clients_range_is_an_error_naming_it() {
        for (attr, value) in [
            ("b_tpm_cp", "0"),
            ("b_tpm_cp", "-9223372036854775808"),
            ("shard_count", "0"),
            ("shard_count", "33"),
        ] {
            let text = format!(r#"{{"{attr}":{{"N":"{value}"}},"b_tpm_tc":{{"N":"1"}}}}"#);
            let err = BucketImage::read(&image(&text)).unwrap_err();
            assert!(
                matches!(err, AttrError::OutOfRange { .. }),
                "{attr}={value}: {err}"
            );
            assert!(err.to_string().contains(attr), "{err}");
        }
        // What only the demand reading uses is left out, not refused.
        let img = image(r#"{"b_tpm_ra":{"N":"-1"},"b_tpm_rp":{"N":"0"},"rf":{"N":"-5"}}"#);
        let b = BucketImage::read(&img).unwrap();
        assert_eq!((b.refill("tpm"), b.refilled_at), (None, None));
    }

    #[test]
    fn a_non_numeric_counter_is_an_error_naming_the_attribute() {
        let img = image(r##"{"b_tpm_tc":{"N":"12x"}}"##);
        let err = BucketImage::read(&img).unwrap_err();
        assert!(err.to_string().contains("b_tpm_tc"), "{err}");
    }
}
