//! The refill pass's decision for one bucket (§5 of the reference): from the
//! bucket as the batch's last record shows it and the consumption the batch
//! carried, the one conditional write that tops it up, clamps it, applies a
//! reset edge or a window roll, and reopens the client's fast path; or none.
//!
//! Every write is justified by consumption, a clamp, an edge or roll, or a
//! debt the refill since `rf` has paid off. A write of our own comes back on
//! the stream with no consumption and none of those, so it never triggers
//! another (the reference re-tops a bucket in debt on every batch). Once a
//! write is justified, every limit's accrual since `rf` goes into it, since
//! moving `rf` without it would forfeit it.

use std::collections::{BTreeMap, BTreeSet};
use zae_table::bucket::refill::{LimitChange, Materialise, refill_tokens};
use zae_table::bucket::{BucketState, LimitParams};
use zae_table::names::WCU_LIMIT;
use zae_table::schedule::{
    self, CompactEntry, Pattern, ScheduleError, Tz, effective_params, next_boundary,
    prev_reset_edge,
};

/// Why a bucket was passed over without a write.
#[derive(Debug, thiserror::Error)]
pub enum Skip {
    /// A refill at the base rate would undo a scheduled change: skip it.
    #[error("stored schedule cannot be read, refill skipped: {0}")]
    Schedule(#[from] ScheduleError),
    #[error("the bucket has no `rf`")]
    NoRefillInstant,
    #[error("`shard_count` {0} is not a positive count")]
    ShardCount(i64),
}

/// A limit's schedules, after the item's defaults and the `-` overrides.
#[derive(Default)]
struct Schedules {
    params: Vec<CompactEntry>,
    resets: Vec<Pattern>,
}

/// Decodes each distinct stored string once.
struct Resolver<'s> {
    tz: Tz,
    state: &'s BucketState<'s>,
    decoded: BTreeMap<(&'s str, &'s str), std::rc::Rc<Schedules>>,
}

impl<'s> Resolver<'s> {
    fn new(state: &'s BucketState<'s>) -> Result<Resolver<'s>, ScheduleError> {
        Ok(Resolver {
            tz: state.timezone()?,
            state,
            decoded: BTreeMap::new(),
        })
    }

    /// The strings in force for a limit (`None`: the item's own).
    fn strings(&self, limit: Option<&LimitParams<'s>>) -> (&'s str, &'s str) {
        self.state.schedule_strings(limit)
    }

    fn resolve(
        &mut self,
        key: (&'s str, &'s str),
    ) -> Result<std::rc::Rc<Schedules>, ScheduleError> {
        if let Some(done) = self.decoded.get(&key) {
            return Ok(done.clone());
        }
        let resolved = std::rc::Rc::new(Schedules {
            params: schedule::decode_params(key.0)?,
            resets: schedule::decode_resets(key.1)?,
        });
        self.decoded.insert(key, resolved.clone());
        Ok(resolved)
    }
}

/// One limit, its parameters in force, and what the pass decided for it.
struct Limit<'s> {
    name: &'s str,
    read: &'s LimitParams<'s>,
    tokens: i64,
    /// What a reset or roll sets the balance to (sized at the item's count).
    target: i64,
    /// What clamps and refills cap at (sized at the grant count, plus top-ups).
    ceiling: i64,
    rate: (i64, i64),
    schedules: std::rc::Rc<Schedules>,
    /// `(ws, rsa)` of a duration window in force.
    window: Option<(Option<i64>, i64)>,
}

enum Verdict {
    Nothing,
    /// A reset edge or window roll: applied whatever its delta.
    Granted {
        delta: i64,
        rolled: bool,
    },
    /// No drip (a quota): left alone; `over` when above its ceiling.
    Unclamped {
        over: bool,
    },
    Drip {
        delta: i64,
        justified: bool,
    },
}

pub struct Pass<'s> {
    pub pk: &'s str,
    pub state: &'s BucketState<'s>,
    /// Net consumption per limit over the batch, millitokens.
    pub consumed: &'s BTreeMap<String, i64>,
    pub now: i64,
}

impl<'s> Pass<'s> {
    pub fn decide(&self) -> Result<Option<Materialise>, Skip> {
        let rf = self.state.refilled_at.ok_or(Skip::NoRefillInstant)?;
        let count = self.state.shard_count.unwrap_or(1);
        if count < 1 {
            return Err(Skip::ShardCount(count));
        }
        let mut resolver = Resolver::new(self.state)?;
        let limits = self.limits(&mut resolver, count)?;
        if limits.iter().any(|l| self.window_ended(l, rf)) {
            // The client opens the next window itself.
            return Ok(None);
        }
        let verdicts = self.verdicts(&limits, &resolver, rf);
        if !justified(&verdicts) {
            return Ok(None);
        }
        // A write moves `rf` for every limit, and each is credited whole
        // millitokens only: what a slow drip accrued past its last whole one
        // would be forfeited. So the write moves `rf` only as far as every
        // uncapped drip's whole millitokens reach, if that still credits a
        // limit the write is justified by; otherwise it is left to the
        // client, whose slow path would forfeit the same (no more).
        let (pass, verdicts) = match self.whole_reach(&limits, rf).filter(|r| *r < self.now) {
            Some(reach) => {
                let earlier = Pass {
                    now: reach,
                    ..*self
                };
                let verdicts = earlier.verdicts(&limits, &resolver, rf);
                if !justified(&verdicts) {
                    return Ok(None);
                }
                (earlier, verdicts)
            }
            None => (Pass { ..*self }, verdicts),
        };
        Ok(Some(pass.compose(
            &limits,
            &verdicts,
            &mut resolver,
            rf,
            count,
        )?))
    }

    fn verdicts(&self, limits: &[Limit<'s>], resolver: &Resolver<'s>, rf: i64) -> Vec<Verdict> {
        limits
            .iter()
            .map(|l| self.verdict(l, resolver, rf))
            .collect()
    }

    /// The latest instant up to which every uncapped drip limit's accrual
    /// since `rf` is whole millitokens; `None` when a limit has a schedule,
    /// a reset or a window (their instants decide `rf`), or nothing drips.
    fn whole_reach(&self, limits: &[Limit<'s>], rf: i64) -> Option<i64> {
        let plain = limits.iter().all(|l| {
            l.window.is_none() && l.schedules.resets.is_empty() && l.schedules.params.is_empty()
        });
        let elapsed = i128::from(self.now) - i128::from(rf);
        if !plain || elapsed <= 0 {
            return None;
        }
        limits
            .iter()
            .filter_map(|l| {
                let (amount, period) = (i128::from(l.rate.0), i128::from(l.rate.1));
                if amount <= 0 || period <= 0 {
                    return None;
                }
                let whole = elapsed * amount / period;
                // A limit the refill caps forfeits nothing by the move.
                if i128::from(l.tokens) + whole >= i128::from(l.ceiling) {
                    return None;
                }
                // The first instant its `whole` millitokens have accrued.
                let covered = (whole * period + amount - 1) / amount;
                i64::try_from(i128::from(rf) + covered).ok()
            })
            .min()
    }

    fn limits(
        &self,
        resolver: &mut Resolver<'s>,
        count: i64,
    ) -> Result<Vec<Limit<'s>>, ScheduleError> {
        let mut out = Vec::new();
        for (&name, read) in &self.state.limits {
            // Nothing to refill without a balance and a capacity.
            let (Some(tokens), Some(cp)) = (read.tokens, read.capacity) else {
                continue;
            };
            let (ra, rp) = (
                read.refill_amount.unwrap_or(0),
                read.refill_period.unwrap_or(0),
            );
            if name == WCU_LIMIT {
                // Never divided, never scheduled.
                out.push(Limit {
                    name,
                    read,
                    tokens,
                    target: cp,
                    ceiling: cp,
                    rate: (ra, rp),
                    schedules: Default::default(),
                    window: None,
                });
                continue;
            }
            let schedules = resolver.resolve(resolver.strings(Some(read)))?;
            let (scp, sra, srp) =
                effective_params((cp, ra, rp), &schedules.params, resolver.tz, self.now);
            let quota = !schedules.resets.is_empty() || read.reset_after.is_some();
            let grants = match read.grant_count {
                Some(g) if quota && g >= 1 => g,
                _ => count,
            };
            let target = scp.div_euclid(count);
            let ceiling = if quota {
                scp.div_euclid(grants)
                    .saturating_add(read.topped_up.unwrap_or(0))
            } else {
                target
            };
            // A calendar reset beside a window is corrupt: the calendar wins.
            let window = match read.reset_after {
                Some(rsa) if schedules.resets.is_empty() => Some((read.window_start, rsa)),
                _ => None,
            };
            out.push(Limit {
                name,
                read,
                tokens,
                target,
                ceiling,
                rate: (sra.div_euclid(count), srp),
                schedules,
                window,
            });
        }
        Ok(out)
    }

    fn applied(l: &Limit<'_>, rf: i64) -> i64 {
        l.read.window_applied.unwrap_or(rf)
    }

    fn window_ended(&self, l: &Limit<'_>, rf: i64) -> bool {
        matches!(l.window, Some((Some(ws), rsa))
            if ws > Self::applied(l, rf) && ws.saturating_add(rsa.saturating_mul(1000)) <= self.now)
    }

    fn verdict(&self, l: &Limit<'_>, resolver: &Resolver<'_>, rf: i64) -> Verdict {
        let delta = |to: i64| i64::try_from(i128::from(to) - i128::from(l.tokens)).ok();
        if let Some((Some(ws), _)) = l.window
            && ws > Self::applied(l, rf)
        {
            let spent = match l.read.window_consumed {
                Some(wtc) => l.read.consumed.unwrap_or(0).saturating_sub(wtc).max(0),
                None => 0,
            };
            return delta(l.target.saturating_sub(spent)).map_or(Verdict::Nothing, |delta| {
                Verdict::Granted {
                    delta,
                    rolled: true,
                }
            });
        }
        if prev_reset_edge(&l.schedules.resets, resolver.tz, self.now).is_some_and(|edge| edge > rf)
        {
            return delta(l.target).map_or(Verdict::Nothing, |delta| Verdict::Granted {
                delta,
                rolled: false,
            });
        }
        // The stored base rate decides whether the limit drips at all.
        if l.read.refill_period.unwrap_or(0) <= 0 || l.read.refill_amount.unwrap_or(0) <= 0 {
            return Verdict::Unclamped {
                over: l.tokens > l.ceiling,
            };
        }
        let (amount, period) = l.rate;
        let new = refill_tokens(l.tokens, rf, self.now, l.ceiling, amount, period);
        let Some(delta) = delta(new) else {
            return Verdict::Nothing;
        };
        let consumed = self.consumed.get(l.name).copied().unwrap_or(0);
        // Worth a write when the stored balance, which is all the fast path
        // sees, is short of two batches' consumption: the next top-up lands
        // only after the next batch has been read and processed. Or when the
        // refill clears a debt. The reference asks whether the *refilled*
        // balance is short of one batch, which leaves a bucket whose accrual
        // would cover it to run dry on the fast path and fall back to the
        // slow one (docs/benchmarks.md measures both).
        let justified =
            (consumed > 0 && l.tokens < consumed.saturating_mul(2)) || (l.tokens < 0 && new >= 0);
        if delta == 0 {
            Verdict::Nothing
        } else {
            Verdict::Drip { delta, justified }
        }
    }
}

/// Whether a write is justified: a reset or roll that changes a balance, a
/// clamp, or a drip the batch's consumption or a cleared debt asks for.
fn justified(verdicts: &[Verdict]) -> bool {
    verdicts.iter().any(|v| match v {
        Verdict::Granted { delta, .. } => *delta != 0,
        Verdict::Drip { delta, justified } => *delta < 0 || *justified,
        _ => false,
    })
}

impl<'s> Pass<'s> {
    fn compose(
        &self,
        limits: &[Limit<'s>],
        verdicts: &[Verdict],
        resolver: &mut Resolver<'s>,
        rf: i64,
        count: i64,
    ) -> Result<Materialise, ScheduleError> {
        let window_starts = limits
            .iter()
            .filter_map(|l| l.window.and_then(|(ws, _)| ws));
        let mut write = Materialise {
            pk: self.pk.to_owned(),
            refilled_at_read: rf,
            refilled_at: window_starts.fold(self.now.max(rf), i64::max),
            valid_until_read: self.state.valid_until,
            sched_read: self.state.sched.map(str::to_owned),
            rsched_read: self.state.rsched.map(str::to_owned),
            tz_read: self.state.sched_tz.map(str::to_owned),
            shard_count_read: self.state.shard_count,
            ..Default::default()
        };
        for (l, verdict) in limits.iter().zip(verdicts) {
            let mut change = LimitChange {
                name: l.name.to_owned(),
                tokens_read: l.tokens,
                params_read: [l.read.capacity, l.read.refill_amount, l.read.refill_period],
                sched_read: l.read.sched.map(str::to_owned),
                rsched_read: l.read.rsched.map(str::to_owned),
                reset_after_read: l.read.reset_after,
                ..Default::default()
            };
            if let Some((Some(ws), _)) = l.window
                && l.read.window_applied != Some(ws)
            {
                change.set_applied = Some(ws);
            }
            match *verdict {
                Verdict::Granted { delta, rolled } => {
                    change.delta = delta;
                    change.window_pin = l
                        .window
                        .and_then(|(ws, _)| ws)
                        .filter(|_| rolled && delta != 0);
                    change.set_grant = Some(count);
                    change.remove_topped_up = l.read.topped_up.is_some();
                }
                // Moving `rf` without a limit's accrual would forfeit it, so
                // every limit's drip rides along (the reference lands only
                // `wcu`'s and those past its threshold).
                Verdict::Drip { delta, .. } => change.delta = delta,
                _ => {}
            }
            write.limits.push(change);
        }
        self.restamp(&mut write, limits, verdicts, resolver)?;
        Ok(write)
    }

    /// Reopens the fast path until the next boundary, when it is closed and
    /// no quota sits above its ceiling; pins what the boundary rests on.
    fn restamp(
        &self,
        write: &mut Materialise,
        limits: &[Limit<'s>],
        verdicts: &[Verdict],
        resolver: &mut Resolver<'s>,
    ) -> Result<(), ScheduleError> {
        let over = verdicts
            .iter()
            .any(|v| matches!(v, Verdict::Unclamped { over: true }));
        if over || self.state.valid_until.is_none_or(|vu| vu > self.now) {
            return Ok(());
        }
        let mut pairs: BTreeSet<(&str, &str)> = BTreeSet::from([resolver.strings(None)]);
        pairs.extend(
            limits
                .iter()
                .filter(|l| l.name != WCU_LIMIT)
                .map(|l| resolver.strings(Some(l.read))),
        );
        let mut boundary: Option<i64> = None;
        for pair in pairs.into_iter().filter(|p| *p != ("", "")) {
            let s = resolver.resolve(pair)?;
            let next = next_boundary(&s.params, &s.resets, resolver.tz, self.now);
            boundary = boundary.into_iter().chain(next).min();
        }
        for l in limits {
            if let Some((ws, rsa)) = l.window {
                let end = ws.map_or(self.now, |ws| ws.saturating_add(rsa.saturating_mul(1000)));
                boundary = Some(boundary.map_or(end, |b| b.min(end)));
            }
        }
        let Some(boundary) = boundary.filter(|b| *b > self.now) else {
            return Ok(());
        };
        write.valid_until = Some(boundary);
        for ((l, verdict), change) in limits.iter().zip(verdicts).zip(&mut write.limits) {
            if matches!(verdict, Verdict::Unclamped { .. }) {
                change.ceiling_pin = Some(l.ceiling);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
