//! A bucket image read whole, as the refill pass needs it: the item's
//! refill instant, validity stamp, shard count and schedules, and every
//! field of every limit.

use super::range::{of_attr, of_field};
use super::{
    PARENT_GENERATION, PARENT_INCARNATION, REFILLED_AT, RSCHED, SCHED, SCHED_TZ, SHARD_COUNT,
    VALID_UNTIL, field, split_bucket_attr,
};
use crate::stream::{AttrError, Image};
use crate::value::{Attr, Item};
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
    /// The owner stamps a cascade was made under (`pgen`, `pinc`).
    pub parent_generation: Option<i64>,
    pub parent_incarnation: Option<&'i str>,
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

/// One attribute as the reader sees it, from a stream image or an item.
enum Field<'i> {
    N(&'i str),
    S(&'i str),
    Other,
}

impl Field<'_> {
    /// The number, when it is one within `range` (`None`: any `i64`).
    fn int(&self, attr: &str, range: Option<(i64, i64)>) -> Result<Option<i64>, AttrError> {
        let n = match self {
            Field::N(n) => crate::milli::parse_int(n).map_err(|source| AttrError::Number {
                name: attr.to_owned(),
                source,
            })?,
            _ => return Err(AttrError::WrongType(attr.to_owned(), "N")),
        };
        super::range::checked(attr, n, range).map(Some)
    }
}

impl<'i> Field<'i> {
    fn text(&self, attr: &str) -> Result<Option<&'i str>, AttrError> {
        match self {
            Field::S(s) => Ok(Some(s)),
            _ => Err(AttrError::WrongType(attr.to_owned(), "S")),
        }
    }
}

impl<'i> BucketState<'i> {
    /// The timezone its schedules are read in (`sched_tz`), needed only when
    /// it has one: an unknown zone on a bucket without schedules is no error.
    pub fn timezone(&self) -> Result<crate::schedule::Tz, crate::schedule::ScheduleError> {
        let scheduled = [self.sched, self.rsched]
            .into_iter()
            .chain(self.limits.values().flat_map(|l| [l.sched, l.rsched]))
            .any(|s| s.is_some_and(|s| !s.is_empty() && s != super::SCHED_NONE));
        if scheduled {
            crate::schedule::timezone(self.sched_tz)
        } else {
            Ok(crate::schedule::Tz::UTC)
        }
    }

    /// The compact parameter and reset schedules in force for a limit: its
    /// own override (`-` for none), else the item's; `None` for the item's.
    pub fn schedule_strings(&self, limit: Option<&LimitParams<'i>>) -> (&'i str, &'i str) {
        let pick = |own: Option<&'i str>, item: Option<&'i str>| match own {
            Some(super::SCHED_NONE) => "",
            Some(own) => own,
            None => item.unwrap_or(""),
        };
        (
            pick(limit.and_then(|l| l.sched), self.sched),
            pick(limit.and_then(|l| l.rsched), self.rsched),
        )
    }

    /// From a stream image.
    pub fn read(image: &'i Image<'_>) -> Result<BucketState<'i>, AttrError> {
        Self::from_fields(image.entries().map(|(name, value)| {
            let field = match (&value.n, &value.s) {
                (Some(n), _) => Field::N(n),
                (_, Some(s)) => Field::S(s),
                _ => Field::Other,
            };
            (name, field)
        }))
    }

    /// From an item read from the table.
    pub fn from_item(item: &'i Item) -> Result<BucketState<'i>, AttrError> {
        Self::from_fields(item.iter().map(|(name, value)| {
            let field = match value {
                Attr::N(n) => Field::N(n),
                Attr::S(s) => Field::S(s),
                _ => Field::Other,
            };
            (name.as_str(), field)
        }))
    }

    fn from_fields(
        fields: impl Iterator<Item = (&'i str, Field<'i>)>,
    ) -> Result<BucketState<'i>, AttrError> {
        let mut state = BucketState::default();
        for (attr, value) in fields {
            match attr {
                REFILLED_AT => state.refilled_at = value.int(attr, of_attr(attr))?,
                VALID_UNTIL => state.valid_until = value.int(attr, of_attr(attr))?,
                SHARD_COUNT => state.shard_count = value.int(attr, of_attr(attr))?,
                SCHED => state.sched = value.text(attr)?,
                RSCHED => state.rsched = value.text(attr)?,
                SCHED_TZ => state.sched_tz = value.text(attr)?,
                PARENT_GENERATION => state.parent_generation = value.int(attr, None)?,
                PARENT_INCARNATION => state.parent_incarnation = value.text(attr)?,
                _ => state.limit_field(attr, &value)?,
            }
        }
        Ok(state)
    }

    fn limit_field(&mut self, attr: &'i str, value: &Field<'i>) -> Result<(), AttrError> {
        let Some((name, f)) = split_bucket_attr(attr) else {
            return Ok(());
        };
        if !READ.contains(&f) {
            return Ok(());
        }
        let limit = self.limits.entry(name).or_default();
        let int = || value.int(attr, of_field(f));
        match f {
            field::CONSUMED => limit.consumed = int()?,
            field::TOKENS => limit.tokens = int()?,
            field::CAPACITY => limit.capacity = int()?,
            field::REFILL_AMOUNT => limit.refill_amount = int()?,
            field::REFILL_PERIOD => limit.refill_period = int()?,
            field::SCHED => limit.sched = value.text(attr)?,
            field::RSCHED => limit.rsched = value.text(attr)?,
            field::WINDOW_START => limit.window_start = int()?,
            field::RESET_AFTER => limit.reset_after = int()?,
            field::WINDOW_APPLIED => limit.window_applied = int()?,
            field::WINDOW_CONSUMED => limit.window_consumed = int()?,
            field::GRANT_COUNT => limit.grant_count = int()?,
            _ => limit.topped_up = int()?,
        }
        Ok(())
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

    /// Any principal with the acquire policy may write these on its own
    /// bucket; the refill pass, the doubling and the propagation divide by
    /// periods and counts and multiply capacities.
    #[test]
    fn a_number_outside_the_clients_range_is_an_error_naming_it() {
        for (attr, value) in [
            ("b_q_cp", "0"),
            ("b_q_cp", "-9223372036854775808"),
            ("b_q_ra", "-1"),
            ("b_q_rp", "0"),
            ("b_q_rp", "1000000000001"),
            ("b_q_rsa", "0"),
            ("b_q_ws", "-1"),
            ("rf", "-1"),
            ("vu", "253402300800000"),
            ("shard_count", "-1"),
        ] {
            let text = format!(r#"{{"{attr}":{{"N":"{value}"}}}}"#);
            let image: Image<'_> = serde_json::from_str(&text).unwrap();
            let err = BucketState::read(&image).unwrap_err();
            assert!(
                matches!(err, AttrError::OutOfRange { .. }),
                "{attr}={value}: {err}"
            );
            assert!(err.to_string().contains(attr), "{err}");
        }
        let image: Image<'_> = serde_json::from_str(
            r#"{"b_q_tk":{"N":"-9223372036854775808"},"b_q_tc":{"N":"9223372036854775807"},"pgen":{"N":"-1"}}"#,
        )
        .unwrap();
        assert!(
            BucketState::read(&image).is_ok(),
            "balances and counters take any i64"
        );
    }

    #[test]
    fn a_schedule_that_is_not_a_string_is_an_error_naming_it() {
        let image: Image<'_> = serde_json::from_str(r##"{"b_q_sched":{"N":"1"}}"##).unwrap();
        let err = BucketState::read(&image).unwrap_err();
        assert!(err.to_string().contains("b_q_sched"), "{err}");
    }
}
