//! Schedules against the clock: the parameters in force at an instant, the
//! latest reset edge before it, and the next instant a bucket must be
//! re-materialised. Answers agree with the 0.17.0 client's, horizons
//! included, because the refill pass and the client's slow path must reach
//! the same verdict on the same bucket.
//!
//! The searches walk a grid of local calendar-unit starts (minutes, hours
//! or days, from the finest field any entry restricts): a pattern's match
//! state is constant within one such unit, so no change can fall between
//! two probes, whatever daylight saving does to the length of a unit.

use super::{CompactEntry, Pattern, pattern::Block};
use chrono::offset::LocalResult;
use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Timelike};
use chrono_tz::Tz;

const MINUTE: i64 = 60_000;
const DAY: i64 = 86_400_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Minute,
    Hour,
    Day,
}

impl Unit {
    /// The unit of a search over `patterns`, and how far it looks.
    fn of<'p>(patterns: impl IntoIterator<Item = &'p Pattern>) -> (Unit, i64) {
        let mut unit = Unit::Day;
        for p in patterns {
            if p.minutes.count_ones() < 60 {
                return (Unit::Minute, 7 * DAY);
            }
            if p.hours.count_ones() < 24 {
                unit = Unit::Hour;
            }
        }
        match unit {
            Unit::Hour => (Unit::Hour, 31 * DAY),
            _ => (Unit::Day, 366 * DAY),
        }
    }

    fn block(block: Block) -> Unit {
        match block {
            Block::Day => Unit::Day,
            Block::Hour => Unit::Hour,
        }
    }
}

fn floor_minute(t: i64) -> i64 {
    t.div_euclid(MINUTE) * MINUTE
}

/// The wall-clock time at `t`, and whether it is the second of two equal
/// wall-clock times (the repeated hour when clocks go back).
fn local(tz: Tz, t: i64) -> (NaiveDateTime, bool) {
    let at = DateTime::from_timestamp_millis(t)
        .unwrap_or_default()
        .with_timezone(&tz);
    let naive = at.naive_local();
    let fold =
        matches!(tz.from_local_datetime(&naive), LocalResult::Ambiguous(_, later) if later == at);
    (naive, fold)
}

/// The instant of a wall-clock time: in a repeated hour, the first or (with
/// `fold`) the second; in a skipped one, read with the offset from before
/// the jump or (with `fold`) after it, as Python's `timestamp()` reads it.
fn instant(tz: Tz, naive: NaiveDateTime, fold: bool) -> i64 {
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(at) => at.timestamp_millis(),
        LocalResult::Ambiguous(first, second) => {
            if fold { second } else { first }.timestamp_millis()
        }
        LocalResult::None => {
            let utc = naive.and_utc();
            let side = if fold {
                Duration::days(1)
            } else {
                -Duration::days(1)
            };
            let offset = tz.offset_from_utc_datetime(&(utc + side).naive_utc());
            utc.timestamp_millis() - i64::from(offset.fix().local_minus_utc()) * 1000
        }
    }
}

fn truncate(naive: NaiveDateTime, unit: Unit) -> NaiveDateTime {
    let hour = match unit {
        Unit::Day => 0,
        _ => naive.hour(),
    };
    naive.date().and_hms_opt(hour, 0, 0).unwrap_or(naive)
}

/// When the local `unit` holding `t` began.
fn unit_start(tz: Tz, t: i64, unit: Unit) -> i64 {
    let (naive, fold) = local(tz, t);
    instant(tz, truncate(naive, unit), fold)
}

/// When the local `unit` after the one holding `t` begins.
fn unit_after(tz: Tz, t: i64, unit: Unit) -> i64 {
    let step = match unit {
        Unit::Day => Duration::days(1),
        _ => Duration::hours(1),
    };
    let (naive, _) = local(tz, t);
    instant(tz, truncate(naive + step, unit), false)
}

/// The first unit start strictly after `t` (a whole minute).
fn next_probe(tz: Tz, t: i64, unit: Unit) -> i64 {
    let t0 = floor_minute(t);
    if unit == Unit::Minute {
        return t0 + MINUTE;
    }
    floor_minute(unit_after(tz, t, unit)).max(t0 + MINUTE)
}

/// The last unit start strictly before `t` (a whole minute).
fn prev_probe(tz: Tz, t: i64, unit: Unit) -> i64 {
    let t0 = floor_minute(t);
    if unit == Unit::Minute {
        return t0 - MINUTE;
    }
    let mut start = unit_start(tz, t0, unit);
    if start >= t0 {
        start = unit_start(tz, t0 - MINUTE, unit);
    }
    floor_minute(start).min(t0 - MINUTE)
}

fn matches(p: &Pattern, tz: Tz, t: i64) -> bool {
    p.matches_local(&local(tz, t).0)
}

fn blocked(p: &Pattern, tz: Tz, t: i64) -> Option<Unit> {
    p.blocked(&local(tz, t).0).map(Unit::block)
}

/// The earliest whole minute from `start` to `horizon` whose match state is
/// `want`. Looking for a match skips whole days and hours that cannot hold one.
fn earliest(p: &Pattern, tz: Tz, want: bool, start: i64, horizon: i64, unit: Unit) -> Option<i64> {
    let t = -(-start).div_euclid(MINUTE) * MINUTE;
    if t <= horizon && matches(p, tz, t) == want {
        return Some(t);
    }
    let mut probe = next_probe(tz, t, unit);
    while probe <= horizon {
        if matches(p, tz, probe) == want {
            return Some(probe);
        }
        probe = match blocked(p, tz, probe).filter(|_| want) {
            None => next_probe(tz, probe, unit),
            Some(block) => floor_minute(unit_after(tz, probe, block)).max(probe + MINUTE),
        };
    }
    None
}

/// The latest whole minute at or before `start` whose match state is
/// `want`, among units that begin at or after `floor`. A unit found by its
/// start answers with its last minute.
fn latest(p: &Pattern, tz: Tz, want: bool, start: i64, floor: i64, unit: Unit) -> Option<i64> {
    let t = floor_minute(start);
    if t < floor {
        return None;
    }
    if matches(p, tz, t) == want {
        return Some(t);
    }
    let mut hi = t;
    let mut probe = prev_probe(tz, t, unit);
    while probe >= floor {
        if matches(p, tz, probe) == want {
            return Some(hi - MINUTE);
        }
        hi = match blocked(p, tz, probe).filter(|_| want) {
            None => probe,
            Some(block) => hi.min(floor_minute(unit_start(tz, probe, block))),
        };
        probe = prev_probe(tz, hi, unit);
    }
    None
}

/// A reset pattern's search unit and horizon: the unit from its finest
/// restricted field, the horizon at least its own cycle.
fn reset_scan(p: &Pattern) -> (Unit, i64) {
    let (unit, cap) = Unit::of([p]);
    (unit, cap.max(p.cycle_seconds() * 1000))
}

fn prev_rising_edge(p: &Pattern, tz: Tz, now: i64) -> Option<i64> {
    let (unit, cap) = reset_scan(p);
    let floor = now - cap;
    let on = latest(p, tz, true, now, floor, unit)?;
    let off = latest(p, tz, false, on - MINUTE, floor, unit)?;
    Some(off + MINUTE)
}

/// The first rising edge after `now`, or `now` plus the horizon when none
/// is in reach (a `vu` stamp must still force a pass per horizon).
fn next_rising_edge_or_horizon(p: &Pattern, tz: Tz, now: i64) -> i64 {
    let (unit, cap) = reset_scan(p);
    let horizon = now + cap;
    let mut start = (now.div_euclid(MINUTE) + 1) * MINUTE;
    if matches(p, tz, now) {
        match earliest(p, tz, false, start, horizon, unit) {
            Some(gap) => start = gap,
            None => return horizon,
        }
    }
    earliest(p, tz, true, start, horizon, unit).unwrap_or(horizon)
}

/// The most recent reset edge at or before `now`, over every entry.
pub fn prev_reset_edge(resets: &[Pattern], tz: Tz, now: i64) -> Option<i64> {
    resets
        .iter()
        .filter_map(|p| prev_rising_edge(p, tz, now))
        .max()
}

fn active(entries: &[CompactEntry], tz: Tz, t: i64) -> Option<usize> {
    let (naive, _) = local(tz, t);
    entries.iter().position(|e| e.pattern.matches_local(&naive))
}

/// The (capacity, refill amount, refill period) in force at `now`: the
/// first entry that matches, or the base.
pub fn effective_params(
    (cp, ra, rp): (i64, i64, i64),
    entries: &[CompactEntry],
    tz: Tz,
    now: i64,
) -> (i64, i64, i64) {
    match active(entries, tz, now) {
        Some(i) => entries[i].params(cp, ra, rp),
        None => (cp, ra, rp),
    }
}

/// The first minute after `now` where a different entry (or none) is in
/// force, or `now` plus the horizon.
fn next_param_change(entries: &[CompactEntry], tz: Tz, now: i64) -> i64 {
    let (unit, cap) = Unit::of(entries.iter().map(|e| &e.pattern));
    let current = active(entries, tz, now);
    let horizon = now + cap;
    let mut lo = floor_minute(now);
    let mut probe = next_probe(tz, now, unit);
    while probe <= horizon {
        if active(entries, tz, probe) != current {
            // The change lies in (lo, probe]; walk it minute by minute, in
            // case a unit start was placed late.
            let mut fine = lo + MINUTE;
            while fine < probe {
                if active(entries, tz, fine) != current {
                    return fine;
                }
                fine += MINUTE;
            }
            return probe;
        }
        lo = probe;
        probe = next_probe(tz, probe, unit);
    }
    horizon
}

/// The earliest instant after `now` at which a bucket with these schedules
/// must be re-materialised: the parameters change or a reset fires.
/// `None` only when there is no schedule at all.
pub fn next_boundary(params: &[CompactEntry], resets: &[Pattern], tz: Tz, now: i64) -> Option<i64> {
    let param = (!params.is_empty()).then(|| next_param_change(params, tz, now));
    let reset = resets
        .iter()
        .map(|p| next_rising_edge_or_horizon(p, tz, now))
        .min();
    param.into_iter().chain(reset).min()
}

/// The first reset edge after `now` over every entry, or `None` when none is
/// in reach: a wait must not quote an instant at which nothing happens.
pub fn next_reset_edge(resets: &[Pattern], tz: Tz, now: i64) -> Option<i64> {
    resets
        .iter()
        .filter_map(|p| {
            let (unit, cap) = reset_scan(p);
            let horizon = now + cap;
            let mut start = (now.div_euclid(MINUTE) + 1) * MINUTE;
            if matches(p, tz, now) {
                start = earliest(p, tz, false, start, horizon, unit)?;
            }
            earliest(p, tz, true, start, horizon, unit)
        })
        .min()
}

/// How many windows a wait walks before it falls back to the base rate.
const WAIT_WINDOWS: usize = 8;

/// Milliseconds (plus one) until `deficit` millitokens are back on one of
/// `shards` shards, walking window by window across the parameter schedule:
/// each window refills at its own rate, and a reset edge that comes first
/// answers outright. `base` is the undivided (cp, ra, rp) the item stores;
/// each window's rate is scaled first, then shared. 0 when nothing can
/// refill it. The 0.17.0 client's arithmetic, in integers.
pub fn retry_after_ms(
    deficit: i64,
    base: (i64, i64, i64),
    (params, resets): (&[CompactEntry], &[Pattern]),
    tz: Tz,
    now: i64,
    shards: i64,
) -> i64 {
    if deficit <= 0 {
        return 0;
    }
    let divisor = i128::from(shards.max(1));
    // A share that floors to 0 waits at the undivided scheduled rate.
    let rate = |ra: i64| {
        let share = i128::from(ra) / divisor;
        if share == 0 { i128::from(ra) } else { share }
    };
    let wait = |until: i128| i64::try_from(until - i128::from(now) + 1).unwrap_or(i64::MAX);
    let mut remaining = i128::from(deficit);
    let mut cursor = i128::from(now);
    for _ in 0..WAIT_WINDOWS {
        let at = i64::try_from(cursor).unwrap_or(i64::MAX);
        let (_, ra, rp) = effective_params(base, params, tz, at);
        let per = rate(ra);
        let edge = next_reset_edge(resets, tz, at).map(i128::from);
        let boundary = next_boundary(params, resets, tz, at).map(i128::from);
        if per <= 0 {
            if let Some(edge) = edge.filter(|e| boundary.is_none_or(|b| *e <= b)) {
                return wait(edge);
            }
            let Some(boundary) = boundary else { break };
            cursor = boundary;
            continue;
        }
        let need = remaining * i128::from(rp) / per;
        let window_end = boundary.unwrap_or(cursor + need);
        if let Some(edge) = edge.filter(|e| *e <= window_end.min(cursor + need)) {
            return wait(edge);
        }
        if cursor + need <= window_end {
            return wait(cursor + need);
        }
        remaining -= (window_end - cursor) * per / i128::from(rp);
        cursor = window_end;
    }
    let flat = rate(base.1);
    if flat <= 0 {
        return next_reset_edge(resets, tz, now).map_or(0, |e| wait(i128::from(e)));
    }
    let need = i128::from(deficit) * i128::from(base.2) / flat;
    wait(i128::from(now) + need)
}
