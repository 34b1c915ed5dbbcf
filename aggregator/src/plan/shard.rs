//! Shard decisions (§6 and §7 of the reference): doubling a bucket whose
//! write-capacity limit (`wcu`) runs low, and what a raised shard count
//! calls for elsewhere: the other existing shards raised to it, and each new
//! shard pre-created from shard 0, its quotas funded by moving allowance off
//! a shard that holds it, never by minting any. Pure: the reads and writes
//! are `write::shard`'s.

use std::collections::BTreeMap;
use zae_table::bucket::BucketState;
use zae_table::bucket::refill::refill_tokens;
use zae_table::bucket::shard::{Debit, MAX_SHARD_COUNT};
use zae_table::names::WCU_LIMIT;
use zae_table::schedule::{
    Pattern, ScheduleError, Tz, decode_params, decode_resets, effective_params, prev_reset_edge,
};

/// Shard 0's count went from `from` to `to` (a MODIFY record's images).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raise {
    pub key: zae_table::BucketKey,
    pub from: i64,
    pub to: i64,
    /// The record that raised it: a propagation that must be tried again
    /// fails the batch from here.
    pub sequence: zae_table::SequenceNumber,
}

/// `wcu` projected to now below this share of its capacity: double.
const HOT_SHARE_PER_MILLE: i128 = 200;

/// A doubling of shard 0 (`count_read` to `to`), when its `wcu` runs low
/// while the batch wrote to it (`wcu_consumed`). Without that, a doubling's
/// own stream record, which consumes nothing and still shows the low `wcu`,
/// would double again, and again, up to the ceiling.
pub fn proactive(
    state: &BucketState<'_>,
    wcu_consumed: i64,
    now: i64,
) -> Option<(Option<i64>, i64)> {
    if wcu_consumed <= 0 {
        return None;
    }
    let count = state.shard_count.unwrap_or(1);
    let wcu = state.limits.get(WCU_LIMIT)?;
    let (cp, tk) = (wcu.capacity?, wcu.tokens?);
    if cp <= 0 || !(1..MAX_SHARD_COUNT).contains(&count) {
        return None;
    }
    let (ra, rp) = (
        wcu.refill_amount.unwrap_or(0),
        wcu.refill_period.unwrap_or(0),
    );
    let projected = match state.refilled_at {
        Some(rf) if ra > 0 && rp > 0 => refill_tokens(tk, rf, now, cp, ra, rp),
        _ => tk,
    };
    let hot = i128::from(projected) * 1000 < i128::from(cp) * HOT_SHARE_PER_MILLE;
    hot.then(|| (state.shard_count, (count * 2).min(MAX_SHARD_COUNT)))
}

/// How a quota resets: on calendar edges, or by a window of `rsa` seconds.
#[derive(Debug, Clone)]
pub struct Rule {
    pub resets: Vec<Pattern>,
    pub window: Option<i64>,
    pub tz: Tz,
    /// Shard 0's schedule-effective capacity, undivided.
    pub capacity: i64,
}

impl Rule {
    /// Whether a shard's grant belongs to the period in force at `now`.
    pub fn current(&self, shard: &BucketState<'_>, quota: &str, now: i64) -> bool {
        let rf = shard.refilled_at.unwrap_or(0);
        let limit = shard.limits.get(quota);
        if self.resets.is_empty()
            && let Some(rsa) = self.window
        {
            let ws = limit.and_then(|l| l.window_start);
            let applied = limit.and_then(|l| l.window_applied).unwrap_or(rf);
            return ws.is_some_and(|ws| {
                ws.saturating_add(rsa.saturating_mul(1000)) > now && ws <= applied
            });
        }
        prev_reset_edge(&self.resets, self.tz, now).is_none_or(|edge| edge <= rf)
    }

    /// The edge a calendar quota's donor must have been refilled since.
    pub fn edge(&self, now: i64) -> Option<i64> {
        prev_reset_edge(&self.resets, self.tz, now)
    }
}

/// A limit as a new shard starts it: a share, or for a quota, a grant.
#[derive(Debug, Clone)]
pub struct CloneLimit {
    pub name: String,
    /// The scheduled capacity the share is cut from.
    pub capacity: i64,
    pub share: i64,
    pub quota: Option<Rule>,
}

impl CloneLimit {
    /// Tokens a clone of a non-quota limit, started at the share of
    /// `count` shards, holds above the share of `current` shards. `wcu` is
    /// per shard, never split, and a quota's grant is frozen instead.
    pub fn excess(&self, count: i64, current: i64) -> i64 {
        if self.quota.is_some() || self.name == WCU_LIMIT || count <= 0 || current <= count {
            return 0;
        }
        self.capacity.div_euclid(count) - self.capacity.div_euclid(current)
    }
}

/// Shard 0's limits, by `cp`, for shards of `to`; `Err` for a schedule the
/// clones could not be sized from.
pub fn clone_limits(
    state: &BucketState<'_>,
    to: i64,
    now: i64,
) -> Result<Vec<CloneLimit>, ScheduleError> {
    let tz = state.timezone()?;
    let mut out = Vec::new();
    for (&name, l) in &state.limits {
        let Some(cp) = l.capacity else { continue };
        if name == WCU_LIMIT {
            out.push(CloneLimit {
                name: name.into(),
                capacity: cp,
                share: cp,
                quota: None,
            });
            continue;
        }
        let (sched, rsched) = state.schedule_strings(Some(l));
        let (ra, rp) = (l.refill_amount.unwrap_or(0), l.refill_period.unwrap_or(0));
        let (scp, _, _) = effective_params((cp, ra, rp), &decode_params(sched)?, tz, now);
        let resets = decode_resets(rsched)?;
        let quota = (ra == 0 && (l.reset_after.is_some() || !resets.is_empty())).then(|| Rule {
            window: l.reset_after.filter(|_| resets.is_empty()),
            resets,
            tz,
            capacity: scp,
        });
        out.push(CloneLimit {
            name: name.into(),
            capacity: scp,
            share: scp.div_euclid(to),
            quota,
        });
    }
    Ok(out)
}

/// What one existing shard holds of one quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub shard: u32,
    pub current: bool,
    /// How many shards its allowance was split into.
    pub grants: i64,
    pub stored_count: i64,
    /// `gc` was stored; without it `grants` was inferred from the balance,
    /// and a debit is pinned on the stored count instead.
    pub stamped: bool,
    pub tokens: i64,
    pub window_applied: Option<i64>,
}

/// The grant count a shard's quota was sized at, and whether it was stamped
/// (`gc`); a legacy grant is the largest power-of-two split its balance fits.
pub fn grant_count(state: &BucketState<'_>, quota: &str, capacity: i64) -> (i64, bool) {
    let limit = state.limits.get(quota);
    let stored = state.shard_count.unwrap_or(1).max(1);
    match limit.and_then(|l| l.grant_count) {
        Some(gc) if gc >= 1 => (gc, true),
        Some(_) => (stored, true),
        None => {
            let tokens = limit.and_then(|l| l.tokens).unwrap_or(0);
            let mut g = stored;
            while g > 1 && tokens > capacity.div_euclid(g) {
                g /= 2;
            }
            (g, false)
        }
    }
}

impl Holding {
    pub fn read(
        shard: u32,
        state: &BucketState<'_>,
        quota: &str,
        rule: &Rule,
        now: i64,
    ) -> Holding {
        let limit = state.limits.get(quota);
        let (grants, stamped) = grant_count(state, quota, rule.capacity);
        Holding {
            shard,
            current: rule.current(state, quota, now),
            grants,
            stored_count: state.shard_count.unwrap_or(1).max(1),
            stamped,
            tokens: limit.and_then(|l| l.tokens).unwrap_or(0),
            window_applied: limit.and_then(|l| l.window_applied),
        }
    }
}

/// Shard `t`'s grant of a quota of `share`: moved from the current shard
/// whose grant covers slot `t` (the widest split, then the lowest shard), or
/// a fresh share when none does.
pub fn plan_grant(holdings: &[Holding], t: u32, share: i64) -> (i64, Option<usize>) {
    let covers = |h: &Holding| {
        h.current
            && h.shard != t
            && i64::from(t).rem_euclid(h.grants) == i64::from(h.shard).rem_euclid(h.grants)
    };
    let donor = holdings
        .iter()
        .enumerate()
        .filter(|(_, h)| covers(h))
        .max_by_key(|(_, h)| (h.grants, std::cmp::Reverse(h.shard)))
        .map(|(i, _)| i);
    match donor {
        None => (share, None),
        Some(i) => (share.min(holdings[i].tokens).max(0), Some(i)),
    }
}

/// A new shard's starting balances, and the debits that fund its quotas,
/// by donor shard; `None` when a quota's donor exists but shard 0's own
/// grant is stale (the clone would inherit a pending reset): the client
/// creates that shard itself.
pub struct ClonePlan {
    pub tokens: BTreeMap<String, i64>,
    pub quotas: Vec<String>,
    pub debits: BTreeMap<u32, Vec<Debit>>,
}

pub fn plan_clone(
    limits: &[CloneLimit],
    holdings: &BTreeMap<String, Vec<Holding>>,
    t: u32,
    now: i64,
) -> Option<ClonePlan> {
    let mut plan = ClonePlan {
        tokens: BTreeMap::new(),
        quotas: Vec::new(),
        debits: BTreeMap::new(),
    };
    for limit in limits {
        let Some(rule) = &limit.quota else {
            plan.tokens.insert(limit.name.clone(), limit.share);
            continue;
        };
        let held = holdings
            .get(&limit.name)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let (grant, donor) = plan_grant(held, t, limit.share);
        if donor.is_some() && !held.iter().any(|h| h.shard == 0 && h.current) {
            return None;
        }
        plan.tokens.insert(limit.name.clone(), grant);
        plan.quotas.push(limit.name.clone());
        if let (Some(i), true) = (donor, grant > 0) {
            let h = &held[i];
            plan.debits.entry(h.shard).or_default().push(Debit {
                limit: limit.name.clone(),
                amount: grant,
                grant_count: h.grants,
                stored_count: if h.stamped { h.grants } else { h.stored_count },
                edge: rule.edge(now).filter(|_| !rule.resets.is_empty()),
                window_applied: h.window_applied.filter(|_| rule.window.is_some()),
            });
        }
    }
    Some(plan)
}

#[cfg(test)]
mod tests;
