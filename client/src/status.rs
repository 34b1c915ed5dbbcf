//! Statuses of a judged bucket: what each limit has, what was asked, and
//! how long until it would admit (§7 of the protocol).

use crate::bucket::{BucketView, LimitView};
use crate::error::LimitStatus;
use std::collections::BTreeMap;
use zae_table::config::LimitConfig;
use zae_table::milli::MILLI;
use zae_table::schedule::LimitSchedule;

/// The amounts one acquire asks of each limit, whole tokens.
pub type Consume = BTreeMap<String, i64>;

/// A limit as a status quotes it, whole tokens: the undivided limit the
/// judge went by (the config on a slow pass, the bucket otherwise), then
/// one shard's share of it, each figure at least 1, as the Python client's
/// `Limit.per_shard` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quoted {
    pub capacity: i64,
    pub refill_amount: i64,
    pub refill_period_s: i64,
}

impl Quoted {
    pub fn of_config(limit: &LimitConfig) -> Quoted {
        Quoted {
            capacity: limit.capacity,
            refill_amount: limit.refill_amount,
            refill_period_s: limit.refill_period,
        }
    }

    /// `config` when a slow pass judged by it, else the bucket's.
    pub fn of(config: Option<&Quoted>, bucket: &LimitView) -> Quoted {
        config.copied().unwrap_or_else(|| Quoted::of_bucket(bucket))
    }

    /// The undivided limit a bucket stores, floored to whole tokens.
    fn of_bucket(limit: &LimitView) -> Quoted {
        Quoted {
            capacity: (limit.cp / MILLI).max(1),
            // A quota has no drip.
            refill_amount: if limit.ra == 0 {
                0
            } else {
                (limit.ra / MILLI).max(1)
            },
            refill_period_s: (limit.rp / MILLI).max(1),
        }
    }

    /// One shard's share; unsharded, the limit itself.
    pub fn per_shard(self, shards: i64) -> Quoted {
        if shards <= 1 {
            return self;
        }
        let share = |whole: i64| (whole.saturating_mul(MILLI) / shards / MILLI).max(1);
        Quoted {
            capacity: share(self.capacity),
            refill_amount: if self.refill_amount == 0 {
                0
            } else {
                share(self.refill_amount)
            },
            refill_period_s: self.refill_period_s.max(1),
        }
    }
}

impl Quoted {
    /// One shard's share of the parameters `schedule` puts in force at
    /// `now`: scaled first (in millitokens), then divided.
    pub fn scheduled(self, schedule: &LimitSchedule, shards: i64, now: i64) -> Quoted {
        let milli = |v: i64| v.saturating_mul(MILLI);
        let base = (
            milli(self.capacity),
            milli(self.refill_amount),
            milli(self.refill_period_s),
        );
        let (cp, ra, rp) = schedule.params_at(base, now);
        let share = |v: i64| (v / shards.max(1) / MILLI).max(1);
        Quoted {
            capacity: share(cp),
            // A quota has no drip, however scaled or shared.
            refill_amount: if ra == 0 { 0 } else { share(ra) },
            refill_period_s: (rp / MILLI).max(1),
        }
    }
}

/// Limits by name, as statuses quote them.
pub type Quotes = BTreeMap<String, Quoted>;

/// The configured limits of a slow pass, by name, as statuses quote them.
pub fn quoted_config(limits: &[LimitConfig]) -> Quotes {
    limits
        .iter()
        .map(|l| (l.name.clone(), Quoted::of_config(l)))
        .collect()
}

/// An acquire's statuses: those of the limits it names (0.17.0's
/// "declared": named in `consume`, whatever the amount, 0 included); a
/// bucket limit it does not name is carried, never reported. When it names
/// none of them (a cascade parent whose limits share no name with the
/// request) every one is reported, as 0.17.0's contended 429 does, rather
/// than an empty rejection.
pub fn declared(mut statuses: Vec<LimitStatus>, consume: &Consume) -> Vec<LimitStatus> {
    if statuses.iter().any(|s| consume.contains_key(&s.limit)) {
        statuses.retain(|s| consume.contains_key(&s.limit));
    }
    statuses
}

/// One status per limit on the bucket (`wcu` never), judged at `now`.
/// `soft` names the limits that are soft; `bypassed` waives every test.
/// `quoted` has the configured limits a slow pass judged by; the others
/// are quoted from the bucket.
pub fn statuses(
    (entity, resource): (&str, &str),
    view: &BucketView,
    consume: &Consume,
    (soft, quoted): (&dyn Fn(&str) -> bool, &Quotes),
    now: i64,
) -> Vec<LimitStatus> {
    let bypassed = view.bypassed(now);
    view.limits
        .iter()
        .map(|(name, limit)| {
            let shards = view.shard_count;
            let projected = view.balance(name, limit, now);
            let requested = consume.get(name).copied().unwrap_or_default();
            let wanted = requested.saturating_mul(MILLI);
            let is_soft = soft(name);
            let exceeded = !is_soft && !bypassed && projected < wanted;
            let base = Quoted::of(quoted.get(name), limit);
            let quote = match view.schedules.get(name) {
                Some(schedule) => base.scheduled(schedule, shards, now),
                None => base.per_shard(shards),
            };
            let resets_at = view.resets_at_ms(name, limit, now);
            LimitStatus {
                entity: entity.to_owned(),
                resource: resource.to_owned(),
                limit: name.clone(),
                available: projected.div_euclid(MILLI),
                requested,
                exceeded,
                retry_after_ms: if exceeded {
                    view.retry_after_ms(name, limit, wanted.saturating_sub(projected), now)
                } else {
                    0
                },
                soft: is_soft,
                capacity: quote.capacity,
                refill_amount: quote.refill_amount,
                refill_period_s: quote.refill_period_s,
                quota: resets_at.is_some(),
                resets_at_ms: resets_at.flatten(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::bucket::retry_after_ms;

    #[test]
    fn the_protocols_worked_example_waits_14762_ms() {
        // tpm 1000/min, 653983 millitokens after the refill, 900 requested.
        assert_eq!(
            retry_after_ms(900_000 - 653_983, 1_000_000, 60_000, 1),
            14_762
        );
        // A share that rounds to 0 waits at the undivided rate.
        assert_eq!(retry_after_ms(1000, 3, 1000, 4), 333_334);
    }
}
