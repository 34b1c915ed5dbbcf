//! A bucket item as the acquire path reads it: each limit's balance and
//! parameters (millitokens, ms), the item's stamps, and the refill
//! projection of §3.2 of the protocol (integers, per shard).

use crate::error::Feature;
use std::collections::BTreeMap;
use std::sync::Arc;
use zae_table::bucket::refill::refill_tokens;
use zae_table::bucket::{
    BYPASS, CASCADE, DISABLED, PARENT_GENERATION, PARENT_ID, PARENT_INCARNATION, REFILLED_AT,
    RSCHED, SCHED, SCHED_NONE, SCHED_TZ, SHARD_COUNT, TTL, VALID_UNTIL, field, split_bucket_attr,
};
use zae_table::names::WCU_LIMIT;
use zae_table::schedule::LimitSchedule;
use zae_table::store::UpdateBuilder;
use zae_table::{Attr, Item};

/// The reserved write-budget limit: 1000 WCU a second, never divided.
pub const WCU_CAPACITY: i64 = 1_000_000;
pub const WCU_PERIOD_MS: i64 = 1000;
/// One write's cost against it.
pub const WCU_COST: i64 = 1000;

/// The `vu` pin, the one rule both a slow pass and a lease credit write
/// by: the write holds only while `vu` is as read (absent when it was).
/// A balance computed against a ceiling is valid only for that `vu`.
pub fn pin_valid_until(b: &mut UpdateBuilder, conditions: &mut Vec<String>, read: Option<i64>) {
    pin_as_read(b, conditions, VALID_UNTIL, read.map(Attr::n));
}

/// A condition that `attr` is still as read: equal to it, or absent when
/// it was (`None`).
pub fn pin_as_read(
    b: &mut UpdateBuilder,
    conditions: &mut Vec<String>,
    attr: &str,
    read: Option<Attr>,
) {
    let alias = b.name(attr);
    conditions.push(match read {
        Some(read) => format!("{alias} = {}", b.value(read)),
        None => format!("attribute_not_exists({alias})"),
    });
}

/// One limit on the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitView {
    pub tk: i64,
    pub cp: i64,
    pub ra: i64,
    pub rp: i64,
    pub tc: i64,
    /// `b_{n}_soft` as a deadline (epoch ms); `None` when absent or not a number.
    pub soft: Option<i64>,
    pub soft_present: bool,
    /// A quota's grant count (`gc`); a duration window's start, the start
    /// already applied, and its length in seconds (`ws`, `wa`, `rsa`).
    pub gc: Option<i64>,
    pub ws: Option<i64>,
    pub wa: Option<i64>,
    pub rsa: Option<i64>,
}

impl LimitView {
    /// The five fields every limit on a bucket carries, as stored.
    pub fn fields(&self) -> [(&'static str, i64); 5] {
        [
            (field::TOKENS, self.tk),
            (field::CAPACITY, self.cp),
            (field::REFILL_AMOUNT, self.ra),
            (field::REFILL_PERIOD, self.rp),
            (field::CONSUMED, self.tc),
        ]
    }

    /// The shard's ceiling, `cp // shards`.
    pub fn ceiling(&self, shards: i64) -> i64 {
        self.cp.div_euclid(shards.max(1))
    }
    /// The shard's refill amount, `ra // shards`.
    pub fn share(&self, shards: i64) -> i64 {
        self.ra.div_euclid(shards.max(1))
    }
    /// The balance refilled from `rf` to `now`, capped at the shard's ceiling.
    pub fn project(&self, rf: i64, now: i64, shards: i64) -> i64 {
        refill_tokens(
            self.tk,
            rf,
            now,
            self.ceiling(shards),
            self.share(shards),
            self.rp,
        )
    }
    /// The balance refilled to `now` and the instant the refill reached,
    /// keeping the fraction of a millitoken not yet earned (the Python
    /// lease's in-memory refill): `(tokens, refilled_at)`.
    pub fn refill_to(&self, rf: i64, now: i64, shards: i64) -> (i64, i64) {
        let ceiling = self.ceiling(shards);
        let share = self.share(shards);
        let elapsed = i128::from(now) - i128::from(rf);
        if elapsed <= 0 || share <= 0 || self.rp <= 0 {
            return (self.tk.min(ceiling), rf);
        }
        let add = elapsed * i128::from(share) / i128::from(self.rp);
        if add == 0 {
            return (self.tk.min(ceiling), rf);
        }
        let used = add * i128::from(self.rp) / i128::from(share);
        let tokens = (i128::from(self.tk) + add).min(i128::from(ceiling));
        let to_i64 = |v: i128, or: i64| i64::try_from(v).unwrap_or(or);
        (to_i64(tokens, ceiling), to_i64(i128::from(rf) + used, now))
    }

    /// This limit with the parameters `schedule` puts in force at `now`;
    /// as stored when it has none.
    pub fn under(&self, schedule: Option<&LimitSchedule>, now: i64) -> LimitView {
        let Some(schedule) = schedule else {
            return *self;
        };
        let (cp, ra, rp) = schedule.params_at((self.cp, self.ra, self.rp), now);
        LimitView {
            cp,
            ra,
            rp,
            ..*self
        }
    }

    /// The soft stamp waives the balance test until its deadline.
    pub fn soft_live(&self, now: i64) -> bool {
        self.soft.is_some_and(|d| d > now)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BucketView {
    pub rf: i64,
    pub shard_count: i64,
    pub ttl: Option<i64>,
    pub vu: Option<i64>,
    pub disabled: bool,
    pub bypass: Option<i64>,
    pub bypass_present: bool,
    pub cascade: bool,
    pub parent_id: Option<String>,
    pub pgen: Option<i64>,
    pub pinc: Option<String>,
    pub limits: BTreeMap<String, LimitView>,
    pub wcu: Option<LimitView>,
    /// A field of a feature this client refuses (quota, window, a
    /// schedule it cannot read).
    pub unsupported: Option<Feature>,
    /// Returned by a bypass-shaped write: it counted and debited nothing.
    pub counted_only: bool,
    /// Each scheduled limit's schedules: the item's (its default or the
    /// limit's override) as read; a slow pass puts its config's in place.
    pub schedules: BTreeMap<String, Arc<LimitSchedule>>,
    /// The schedule strings as stored, which a credit's ceiling pins.
    pub sched_strings: SchedStrings,
}

/// A bucket's schedule strings as stored (`None`: absent): the item's
/// `sched`, `rsched`, `sched_tz`, and each limit's `b_{n}_sched`,
/// `b_{n}_rsched`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedStrings {
    pub item: [Option<String>; 3],
    pub limits: BTreeMap<String, [Option<String>; 2]>,
}

impl SchedStrings {
    /// Conditions that each string is still as read.
    pub fn pin(&self, b: &mut UpdateBuilder, conditions: &mut Vec<String>, limit: Option<&str>) {
        let mut pin_one = |attr: String, read: &Option<String>| {
            pin_as_read(b, conditions, &attr, read.as_deref().map(Attr::s));
        };
        match limit {
            None => {
                for (attr, read) in [SCHED, RSCHED, SCHED_TZ].iter().zip(&self.item) {
                    pin_one((*attr).to_owned(), read);
                }
            }
            Some(name) => {
                let none = [None, None];
                let own = self.limits.get(name).unwrap_or(&none);
                for (f, read) in [field::SCHED, field::RSCHED].iter().zip(own) {
                    pin_one(zae_table::bucket::limit_attr(name, f), read);
                }
            }
        }
    }
}

fn int(item: &Item, name: &str) -> Option<i64> {
    item.get(name).and_then(Attr::as_int)
}

impl BucketView {
    pub fn read(item: &Item) -> BucketView {
        let mut fields: BTreeMap<&str, BTreeMap<&str, &Attr>> = BTreeMap::new();
        for (attr, value) in item {
            if let Some((limit, field)) = split_bucket_attr(attr) {
                fields.entry(limit).or_default().insert(field, value);
            }
        }
        let mut unsupported = None;
        let vu = int(item, VALID_UNTIL);
        let string = |a: &str| item.get(a).and_then(Attr::as_s).map(str::to_owned);
        let mut view = BucketView {
            rf: int(item, REFILLED_AT).unwrap_or_default(),
            shard_count: int(item, SHARD_COUNT).filter(|c| *c >= 1).unwrap_or(1),
            ttl: int(item, TTL),
            vu,
            disabled: matches!(item.get(DISABLED), Some(Attr::Bool(true))),
            bypass: int(item, BYPASS),
            bypass_present: item.contains_key(BYPASS),
            cascade: matches!(item.get(CASCADE), Some(Attr::Bool(true))),
            parent_id: item.get(PARENT_ID).and_then(Attr::as_s).map(str::to_owned),
            pgen: int(item, PARENT_GENERATION),
            pinc: item
                .get(PARENT_INCARNATION)
                .and_then(Attr::as_s)
                .map(str::to_owned),
            sched_strings: SchedStrings {
                item: [SCHED, RSCHED, SCHED_TZ].map(string),
                limits: BTreeMap::new(),
            },
            ..BucketView::default()
        };
        for (limit, f) in fields {
            let n = |name: &str| f.get(name).and_then(|v| v.as_int());
            // Top-ups (an operator's) and a quota's allowance moves between
            // shards are not built.
            let quota = [field::GRANT_COUNT, field::WINDOW_START, field::RESET_AFTER]
                .iter()
                .any(|x| f.contains_key(x));
            if f.contains_key(field::TOPPED_UP) || (quota && view.shard_count > 1) {
                unsupported = unsupported.or(Some(Feature::Quota));
            }
            let (Some(tk), Some(cp), Some(ra), Some(rp)) = (
                n(field::TOKENS),
                n(field::CAPACITY),
                n(field::REFILL_AMOUNT),
                n(field::REFILL_PERIOD),
            ) else {
                continue;
            };
            let limit_view = LimitView {
                tk,
                cp,
                ra,
                rp,
                tc: n(field::CONSUMED).unwrap_or_default(),
                soft: n(field::SOFT),
                soft_present: f.contains_key(field::SOFT),
                gc: n(field::GRANT_COUNT),
                ws: n(field::WINDOW_START),
                wa: n(field::WINDOW_APPLIED),
                rsa: n(field::RESET_AFTER),
            };
            if limit == WCU_LIMIT {
                view.wcu = Some(limit_view);
                continue;
            }
            let text = |name: &str| f.get(name).and_then(|v| v.as_s());
            view.sched_strings.limits.insert(
                limit.to_owned(),
                [field::SCHED, field::RSCHED].map(|x| text(x).map(str::to_owned)),
            );
            match item_schedule(item, text(field::SCHED), text(field::RSCHED)) {
                Ok(Some(schedule)) => {
                    view.schedules.insert(limit.to_owned(), Arc::new(schedule));
                }
                Ok(None) => {}
                Err(_) => unsupported = unsupported.or(Some(Feature::Schedule)),
            }
            view.limits.insert(limit.to_owned(), limit_view);
        }
        view.unsupported = unsupported;
        view
    }

    /// `limit` (named `name`) with the parameters its schedule puts in
    /// force at `now`; as stored when it has none. Refills and tests go by
    /// these; the stored ones stay what a write pins.
    pub fn effective(&self, name: &str, limit: &LimitView, now: i64) -> LimitView {
        limit.under(self.schedules.get(name).map(|s| &**s), now)
    }

    /// `limit` as a pass at `now` judges it, before its refill: the
    /// parameters its schedule puts in force, and a quota's balance restored
    /// to the shard's share when a reset edge passed since `rf`, its
    /// duration window ended (a new one anchored at `now`), or another
    /// writer opened one (`ws` past `wa`). Whether it was restored.
    pub fn materialise(&self, name: &str, limit: &LimitView, now: i64) -> (LimitView, bool) {
        let mut l = self.effective(name, limit, now);
        if l.ra != 0 {
            return (l, false);
        }
        let target = l.cp.div_euclid(self.shard_count.max(1));
        let mut restored = false;
        if let Some(rsa) = l.rsa {
            let end = |ws: i64| ws.saturating_add(rsa.saturating_mul(1000));
            let ended = l.ws.is_none_or(|ws| now >= end(ws));
            let rolled = match (l.ws, l.wa) {
                (Some(ws), Some(wa)) => ws > wa,
                (Some(ws), None) => ws > self.rf,
                _ => false,
            };
            if ended {
                l.ws = Some(now);
            }
            if ended || rolled {
                (l.tk, l.wa, restored) = (target, l.ws, true);
            }
        }
        if let Some(s) = self.schedules.get(name) {
            let edge = zae_table::schedule::prev_reset_edge(&s.resets, s.tz, now);
            if edge.is_some_and(|e| e > self.rf) {
                (l.tk, restored) = (target, true);
            }
        }
        (l, restored)
    }

    /// A limit's balance at `now`: materialised, then refilled.
    pub fn balance(&self, name: &str, limit: &LimitView, now: i64) -> i64 {
        let (l, _) = self.materialise(name, limit, now);
        l.project(self.rf, now, self.shard_count)
    }

    /// The end of the duration window in force on a quota limit.
    pub fn window_end(limit: &LimitView) -> Option<i64> {
        let (ws, rsa) = (limit.ws?, limit.rsa?);
        (limit.ra == 0).then(|| ws.saturating_add(rsa.saturating_mul(1000)))
    }

    /// For a quota (no drip, a reset), when it comes back: `Some(end)` of
    /// its duration window, or `Some(edge)` after `now` of its calendar
    /// reset (`Some(None)` past the scan's horizon); `None` for a rate.
    pub fn resets_at_ms(&self, name: &str, limit: &LimitView, now: i64) -> Option<Option<i64>> {
        let (materialised, _) = self.materialise(name, limit, now);
        reset_instant(&materialised, self.schedules.get(name).map(|s| &**s), now)
    }

    /// The wait (ms, plus one) until `deficit` millitokens are back on this
    /// shard: walked across the limit's schedule when it has one; a
    /// duration window's end (no plus one: the end is the next window's).
    pub fn retry_after_ms(&self, name: &str, limit: &LimitView, deficit: i64, now: i64) -> i64 {
        if deficit <= 0 {
            return 0;
        }
        let (materialised, _) = self.materialise(name, limit, now);
        if let Some(end) = Self::window_end(&materialised) {
            return end.saturating_sub(now).max(0);
        }
        let shards = self.shard_count;
        match self.schedules.get(name) {
            Some(s) => s.retry_after_ms(deficit, (limit.cp, limit.ra, limit.rp), shards, now),
            None => retry_after_ms(deficit, limit.ra, limit.rp, shards),
        }
    }

    /// `vu` passed: the image was materialised under parameters no longer
    /// in force, so only a slow pass can judge it (0 is no boundary).
    pub fn past_boundary(&self, now: i64) -> bool {
        self.vu.is_some_and(|vu| vu != 0 && vu <= now)
    }

    /// A live bypass stamp: admitted without the balance test.
    pub fn bypassed(&self, now: i64) -> bool {
        self.bypass.is_some_and(|b| b > now)
    }
}

/// Milliseconds until `deficit` millitokens are back at the shard's rate,
/// plus one (`(deficit · rp // ra_s) + 1`; the undivided rate when the
/// shard's share rounds to 0).
pub fn retry_after_ms(deficit: i64, ra: i64, rp: i64, shards: i64) -> i64 {
    let share = ra.div_euclid(shards.max(1));
    let rate = if share == 0 { ra } else { share };
    if rate <= 0 {
        return 0;
    }
    let wait = i128::from(deficit) * i128::from(rp) / i128::from(rate);
    i64::try_from(wait).unwrap_or(i64::MAX - 1) + 1
}

/// A quota limit's reset instant (see [`BucketView::resets_at_ms`]), on
/// a limit as materialised.
pub fn reset_instant(
    limit: &LimitView,
    schedule: Option<&LimitSchedule>,
    now: i64,
) -> Option<Option<i64>> {
    if limit.ra != 0 {
        return None;
    }
    if let Some(end) = BucketView::window_end(limit) {
        return Some(Some(end));
    }
    let schedule = schedule.filter(|s| !s.resets.is_empty())?;
    Some(zae_table::schedule::next_reset_edge(
        &schedule.resets,
        schedule.tz,
        now,
    ))
}

/// A limit's schedules on an item: its own override (`-` for none), else
/// the item's default, read in the item's zone. `None` when it has none.
fn item_schedule(
    item: &Item,
    own_sched: Option<&str>,
    own_rsched: Option<&str>,
) -> Result<Option<LimitSchedule>, zae_table::schedule::ScheduleError> {
    let text = |name: &str| item.get(name).and_then(Attr::as_s);
    let pick = |own: Option<&str>, default: &str| match own {
        Some(SCHED_NONE) => String::new(),
        Some(own) => own.to_owned(),
        None => text(default)
            .filter(|s| *s != SCHED_NONE)
            .unwrap_or("")
            .to_owned(),
    };
    let (sched, rsched) = (pick(own_sched, SCHED), pick(own_rsched, RSCHED));
    if sched.is_empty() && rsched.is_empty() {
        return Ok(None);
    }
    LimitSchedule::decode(&sched, &rsched, text(SCHED_TZ)).map(Some)
}
