//! Materialising a bucket: the token arithmetic of a refill, and the one
//! conditional UpdateItem that lands a refill pass's changes on a bucket
//! only if nothing it read has moved since.

use super::{REFILLED_AT, RSCHED, SCHED, SCHED_TZ, SHARD_COUNT, VALID_UNTIL, field, limit_attr};
use crate::keys::SK_STATE;
use crate::store::{Update, UpdateBuilder};
use crate::value::Attr;

/// The balance after refilling from `refilled_at` to `now` at `amount` per
/// `period`, capped at `ceiling` (a cap, never a floor: debt stays debt).
/// Whole increments only, as the client computes them.
pub fn refill_tokens(
    tokens: i64,
    refilled_at: i64,
    now: i64,
    ceiling: i64,
    amount: i64,
    period: i64,
) -> i64 {
    let elapsed = i128::from(now) - i128::from(refilled_at);
    let add = if elapsed <= 0 || period <= 0 {
        0
    } else {
        elapsed * i128::from(amount) / i128::from(period)
    };
    let refilled = (i128::from(tokens) + add).min(i128::from(ceiling));
    // At most `ceiling`, and at least `tokens` when the rate is not negative.
    i64::try_from(refilled).unwrap_or(tokens.min(ceiling))
}

/// What one limit's part of the write changes and pins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitChange {
    pub name: String,
    /// `b_{n}_tk` as read; a raise is pinned on the balance not having grown.
    pub tokens_read: i64,
    /// Added to `b_{n}_tk`; 0 for none.
    pub delta: i64,
    /// A rolled window is pinned on its start (`b_{n}_ws`).
    pub window_pin: Option<i64>,
    /// `SET b_{n}_wa`: the window start now applied.
    pub set_applied: Option<i64>,
    /// `SET b_{n}_gc`: the shard count a reset or roll was sized at.
    pub set_grant: Option<i64>,
    /// `REMOVE b_{n}_tu`: a top-up belongs to the period it was bought in.
    pub remove_topped_up: bool,
    /// With a `vu` re-stamp, the balance must still be at most this.
    pub ceiling_pin: Option<i64>,
    /// `cp`, `ra`, `rp` as read: a parameter change since makes the write lose.
    pub params_read: [Option<i64>; 3],
    /// `b_{n}_sched`, `b_{n}_rsched` and `b_{n}_rsa` as read: the schedules
    /// and window the decision rests on (a sync that changes only them since
    /// makes the write lose).
    pub sched_read: Option<String>,
    pub rsched_read: Option<String>,
    pub reset_after_read: Option<i64>,
}

/// A refill pass's write to one bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Materialise {
    pub pk: String,
    pub refilled_at_read: i64,
    pub refilled_at: i64,
    pub valid_until_read: Option<i64>,
    /// A new `vu`, reopening the client's fast path until the next boundary.
    pub valid_until: Option<i64>,
    /// The item's `sched`, `rsched` and `sched_tz` as read: every write pins
    /// them, since resets, rolls and boundaries are decided from them.
    pub sched_read: Option<String>,
    pub rsched_read: Option<String>,
    pub tz_read: Option<String>,
    pub shard_count_read: Option<i64>,
    pub limits: Vec<LimitChange>,
}

/// `attr = value`, or its absence when it was absent.
fn pinned(b: &mut UpdateBuilder, attr: &str, read: Option<i64>) -> String {
    pinned_attr(b, attr, read.map(Attr::n))
}

fn pinned_text(b: &mut UpdateBuilder, attr: &str, read: Option<&str>) -> String {
    pinned_attr(b, attr, read.map(Attr::s))
}

fn pinned_attr(b: &mut UpdateBuilder, attr: &str, read: Option<Attr>) -> String {
    let name = b.name(attr);
    match read {
        Some(v) => format!("{name} = {}", b.value(v)),
        None => format!("attribute_not_exists({name})"),
    }
}

impl Materialise {
    pub fn update(&self) -> Update {
        let mut b = UpdateBuilder::new();
        let mut conditions = Vec::new();
        b.set(REFILLED_AT, Attr::n(self.refilled_at));
        conditions.push(pinned(&mut b, REFILLED_AT, Some(self.refilled_at_read)));
        conditions.push(pinned(&mut b, VALID_UNTIL, self.valid_until_read));
        // A doubling since the read shrinks every share: lose the race.
        let sc = b.name(SHARD_COUNT);
        let count = b.value(Attr::n(self.shard_count_read.unwrap_or(1)));
        conditions.push(format!("(attribute_not_exists({sc}) OR {sc} <= {count})"));
        if let Some(vu) = self.valid_until {
            b.set(VALID_UNTIL, Attr::n(vu));
        }
        for (attr, read) in [
            (SCHED, &self.sched_read),
            (RSCHED, &self.rsched_read),
            (SCHED_TZ, &self.tz_read),
        ] {
            conditions.push(pinned_text(&mut b, attr, read.as_deref()));
        }
        for limit in &self.limits {
            limit.compose(&mut b, &mut conditions);
        }
        b.build(&self.pk, SK_STATE, Some(conditions.join(" AND ")))
    }
}

impl LimitChange {
    fn compose(&self, b: &mut UpdateBuilder, conditions: &mut Vec<String>) {
        let attr = |f: &str| limit_attr(&self.name, f);
        let tokens = attr(field::TOKENS);
        if self.delta != 0 {
            b.add(&tokens, Attr::n(self.delta));
        }
        if self.delta > 0 {
            let name = b.name(&tokens);
            conditions.push(format!("{name} <= {}", b.value(Attr::n(self.tokens_read))));
        }
        if let Some(ceiling) = self.ceiling_pin {
            let name = b.name(&tokens);
            conditions.push(format!("{name} <= {}", b.value(Attr::n(ceiling))));
        }
        if let Some(ws) = self.window_pin {
            conditions.push(pinned(b, &attr(field::WINDOW_START), Some(ws)));
        }
        if let Some(wa) = self.set_applied {
            b.set(&attr(field::WINDOW_APPLIED), Attr::n(wa));
        }
        if let Some(gc) = self.set_grant {
            b.set(&attr(field::GRANT_COUNT), Attr::n(gc));
        }
        if self.remove_topped_up {
            b.remove(&attr(field::TOPPED_UP));
        }
        let params = [field::CAPACITY, field::REFILL_AMOUNT, field::REFILL_PERIOD];
        for (f, read) in params.iter().zip(self.params_read) {
            conditions.push(pinned(b, &attr(f), read));
        }
        conditions.push(pinned(b, &attr(field::RESET_AFTER), self.reset_after_read));
        for (f, read) in [
            (field::SCHED, &self.sched_read),
            (field::RSCHED, &self.rsched_read),
        ] {
            conditions.push(pinned_text(b, &attr(f), read.as_deref()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refill_adds_whole_increments_and_caps_but_never_lifts_debt_by_the_cap() {
        assert_eq!(refill_tokens(0, 0, 1_500, 10_000, 1_000, 1_000), 1_500);
        assert_eq!(refill_tokens(9_000, 0, 5_000, 10_000, 1_000, 1_000), 10_000);
        assert_eq!(
            refill_tokens(-5_000, 0, 1_000, 10_000, 1_000, 1_000),
            -4_000
        );
        assert_eq!(
            refill_tokens(20_000, 0, 1_000, 10_000, 1_000, 1_000),
            10_000,
            "a shrunken ceiling clamps"
        );
        assert_eq!(
            refill_tokens(5, 10, 5, 100, 1_000, 1_000),
            5,
            "no time, no refill"
        );
        assert_eq!(
            refill_tokens(i64::MIN, 0, i64::MAX, i64::MAX, i64::MAX, 1),
            i64::MAX,
            "no overflow"
        );
    }

    #[test]
    fn the_write_pins_everything_it_read() {
        let write = Materialise {
            pk: "ns/BUCKET#e#r#0".into(),
            refilled_at_read: 10,
            refilled_at: 20,
            valid_until_read: None,
            valid_until: Some(30),
            sched_read: None,
            rsched_read: Some("-".into()),
            tz_read: None,
            shard_count_read: Some(2),
            limits: vec![LimitChange {
                name: "tpm".into(),
                tokens_read: 5,
                delta: 7,
                params_read: [Some(100), Some(10), None],
                sched_read: Some("c1".into()),
                reset_after_read: Some(3_600),
                ..Default::default()
            }],
        };
        let update = write.update();
        let text = |s: &str| {
            let mut out = s.to_owned();
            for (alias, name) in update.names.iter().rev() {
                out = out.replace(alias, name);
            }
            for (placeholder, value) in update.values.iter().rev() {
                out = out.replace(placeholder, &format!("{value:?}"));
            }
            out
        };
        assert_eq!(
            text(&update.expression),
            r#"SET rf = N("20"), vu = N("30") ADD b_tpm_tk N("7")"#
        );
        assert_eq!(
            text(update.condition.as_deref().unwrap()),
            concat!(
                r#"rf = N("10") AND attribute_not_exists(vu) AND (attribute_not_exists(shard_count) OR shard_count <= N("2")) "#,
                r#"AND attribute_not_exists(sched) AND rsched = S("-") AND attribute_not_exists(sched_tz) "#,
                r#"AND b_tpm_tk <= N("5") AND b_tpm_cp = N("100") AND b_tpm_ra = N("10") AND attribute_not_exists(b_tpm_rp) "#,
                r#"AND b_tpm_rsa = N("3600") AND b_tpm_sched = S("c1") AND attribute_not_exists(b_tpm_rsched)"#
            )
        );
    }
}
