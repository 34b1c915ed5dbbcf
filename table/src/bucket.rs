//! Bucket items (`#STATE`) and the per-limit attributes the server side reads.

use crate::stream::{AttrError, Image};
use std::collections::BTreeMap;

pub const BUCKET_ATTR_PREFIX: &str = "b_";
/// The infrastructure write-capacity limit; never reported as usage.
pub const WCU_LIMIT: &str = "wcu";
/// Suffix of the snapshot counter of records that left a soft limit in debt.
pub const OVERDRAWN_SUFFIX: &str = "#od";

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

/// The limits of one bucket image, by name, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketImage<'i> {
    pub limits: BTreeMap<&'i str, LimitState>,
    pub shard_count: Option<i64>,
}

/// Limit names as the client validates them: `^[a-zA-Z][a-zA-Z0-9_.\-]*$`.
pub fn is_limit_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
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
            limits: BTreeMap::new(),
            shard_count: image.int("shard_count")?,
        };
        for (attr, value) in image.entries() {
            let Some((name, field)) = split_bucket_attr(attr) else {
                continue;
            };
            let number = || value.int(attr).map(Some);
            let slot = match field {
                "tc" | "tk" | "cp" | "soft" => bucket.limits.entry(name).or_default(),
                _ => continue,
            };
            match field {
                "tc" => slot.consumed = number()?,
                "tk" => slot.balance = number()?,
                "cp" => slot.capacity = number()?,
                _ => slot.soft = true,
            }
        }
        Ok(bucket)
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
    fn names_outside_the_client_grammar_are_not_limits() {
        assert!(is_limit_name("gpt-4.turbo_x"));
        for bad in ["", "4x", "a#od", "a b", "_a"] {
            assert!(!is_limit_name(bad), "{bad}");
        }
        let img = image(r##"{"b_a#od_tc":{"N":"1"},"b__tc":{"N":"1"}}"##);
        assert!(BucketImage::read(&img).unwrap().limits.is_empty());
    }

    #[test]
    fn a_non_numeric_counter_is_an_error_naming_the_attribute() {
        let img = image(r##"{"b_tpm_tc":{"N":"12x"}}"##);
        let err = BucketImage::read(&img).unwrap_err();
        assert!(err.to_string().contains("b_tpm_tc"), "{err}");
    }
}
