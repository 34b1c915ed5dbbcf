//! A bucket image read whole, as the refill pass needs it: the item's
//! refill instant, validity stamp, shard count and schedules, and every
//! field of every limit.

use super::{
    REFILLED_AT, RSCHED, SCHED, SCHED_TZ, SHARD_COUNT, VALID_UNTIL, field, split_bucket_attr,
};
use crate::stream::{AttrError, Image};
use std::collections::BTreeMap;

/// One limit's fields; millitokens, milliseconds, epoch ms, seconds (`rsa`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitParams<'i> {
    pub consumed: Option<i64>,
    pub tokens: Option<i64>,
    pub capacity: Option<i64>,
    pub refill_amount: Option<i64>,
    pub refill_period: Option<i64>,
    /// Overrides of the item's schedules; `"-"` is "none".
    pub sched: Option<&'i str>,
    pub rsched: Option<&'i str>,
    pub window_start: Option<i64>,
    pub reset_after: Option<i64>,
    pub window_applied: Option<i64>,
    pub window_consumed: Option<i64>,
    pub grant_count: Option<i64>,
    pub topped_up: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketState<'i> {
    pub refilled_at: Option<i64>,
    pub valid_until: Option<i64>,
    pub shard_count: Option<i64>,
    pub sched: Option<&'i str>,
    pub rsched: Option<&'i str>,
    pub sched_tz: Option<&'i str>,
    pub limits: BTreeMap<&'i str, LimitParams<'i>>,
}

/// The per-limit fields the refill pass reads (`soft`, `rn` are not).
const READ: [&str; 13] = [
    field::CONSUMED,
    field::TOKENS,
    field::CAPACITY,
    field::REFILL_AMOUNT,
    field::REFILL_PERIOD,
    field::SCHED,
    field::RSCHED,
    field::WINDOW_START,
    field::RESET_AFTER,
    field::WINDOW_APPLIED,
    field::WINDOW_CONSUMED,
    field::GRANT_COUNT,
    field::TOPPED_UP,
];

impl<'i> BucketState<'i> {
    pub fn read(image: &'i Image<'_>) -> Result<BucketState<'i>, AttrError> {
        let mut state = BucketState {
            refilled_at: image.int(REFILLED_AT)?,
            valid_until: image.int(VALID_UNTIL)?,
            shard_count: image.int(SHARD_COUNT)?,
            sched: image.string(SCHED)?,
            rsched: image.string(RSCHED)?,
            sched_tz: image.string(SCHED_TZ)?,
            limits: BTreeMap::new(),
        };
        for (attr, value) in image.entries() {
            let Some((name, f)) = split_bucket_attr(attr) else {
                continue;
            };
            let number = || value.int(attr).map(Some);
            let text = || match value.s.as_deref() {
                Some(s) => Ok(Some(s)),
                None => Err(AttrError::WrongType(attr.to_owned(), "S")),
            };
            if !READ.contains(&f) {
                continue;
            }
            let limit = state.limits.entry(name).or_default();
            match f {
                field::CONSUMED => limit.consumed = number()?,
                field::TOKENS => limit.tokens = number()?,
                field::CAPACITY => limit.capacity = number()?,
                field::REFILL_AMOUNT => limit.refill_amount = number()?,
                field::REFILL_PERIOD => limit.refill_period = number()?,
                field::SCHED => limit.sched = text()?,
                field::RSCHED => limit.rsched = text()?,
                field::WINDOW_START => limit.window_start = number()?,
                field::RESET_AFTER => limit.reset_after = number()?,
                field::WINDOW_APPLIED => limit.window_applied = number()?,
                field::WINDOW_CONSUMED => limit.window_consumed = number()?,
                field::GRANT_COUNT => limit.grant_count = number()?,
                _ => limit.topped_up = number()?,
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_every_limit_is_read() {
        let image: Image<'_> = serde_json::from_str(
            r##"{"rf":{"N":"10"},"vu":{"N":"20"},"sched_tz":{"S":"Europe/Berlin"},"rsched":{"S":"1m0h0"},
                "b_tok_in_tk":{"N":"-5"},"b_tok_in_ra":{"N":"1000"},"b_tok_in_rp":{"N":"60000"},
                "b_q_rsched":{"S":"-"},"b_q_ws":{"N":"7"},"b_q_rsa":{"N":"3600"},"b_q_gc":{"N":"2"},
                "b_q_tu":{"N":"0"},"b_q_wtc":{"N":"4"},"b_q_wa":{"N":"6"},"b_q_soft":{"BOOL":true}}"##,
        )
        .unwrap();
        let state = BucketState::read(&image).unwrap();
        assert_eq!((state.refilled_at, state.valid_until), (Some(10), Some(20)));
        assert_eq!(state.rsched, Some("1m0h0"));
        let tok = &state.limits["tok_in"];
        assert_eq!(
            (tok.tokens, tok.refill_amount, tok.refill_period),
            (Some(-5), Some(1000), Some(60_000))
        );
        let q = &state.limits["q"];
        assert_eq!(q.rsched, Some("-"));
        assert_eq!(
            (
                q.window_start,
                q.reset_after,
                q.grant_count,
                q.topped_up,
                q.window_consumed,
                q.window_applied
            ),
            (Some(7), Some(3600), Some(2), Some(0), Some(4), Some(6))
        );
    }

    #[test]
    fn a_schedule_that_is_not_a_string_is_an_error_naming_it() {
        let image: Image<'_> = serde_json::from_str(r##"{"b_q_sched":{"N":"1"}}"##).unwrap();
        let err = BucketState::read(&image).unwrap_err();
        assert!(err.to_string().contains("b_q_sched"), "{err}");
    }
}
