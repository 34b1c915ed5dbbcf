//! One bucket's parameter stamp, in the client's own encoding of limits on
//! buckets: millitokens and milliseconds, soft deadlines, schedule defaults
//! and overrides, the TTL of fallback buckets, and stale limits stripped.

use super::deadline;
use std::collections::BTreeSet;
use zae_table::Attr;
use zae_table::bucket::{RSCHED, SCHED, SCHED_NONE, SCHED_TZ, TTL, VALID_UNTIL, field, limit_attr};
use zae_table::config::{LevelConfig, LimitConfig};
use zae_table::schedule;
use zae_table::store::UpdateBuilder;

/// Per limit: the override it needs under the bucket's default, if any.
type Overrides = Vec<(String, Option<String>)>;

/// The bucket's item-level schedule default for one tuple, and the
/// per-limit overrides: the client's own encoding of schedules on buckets.
fn schedule_parts(
    limits: &[LimitConfig],
    pick: fn(&LimitConfig) -> Option<&String>,
) -> Option<(String, Overrides)> {
    let default = limits.iter().find_map(pick)?.clone();
    let overrides = limits
        .iter()
        .map(|l| {
            let compact = pick(l).cloned().unwrap_or_else(|| SCHED_NONE.into());
            (l.name.clone(), (compact != default).then_some(compact))
        })
        .collect();
    Some((default, overrides))
}

/// One bucket's parameter update: millitokens and milliseconds, soft
/// deadlines, schedules, TTL, and stale limits stripped.
pub fn param_update(
    config: &LevelConfig,
    entity_decided: bool,
    stale: &BTreeSet<String>,
    t_ms: i64,
) -> UpdateBuilder {
    let mut update = UpdateBuilder::new();
    for limit in &config.limits {
        let attr = |field: &str| limit_attr(&limit.name, field);
        update.set(&attr(field::CAPACITY), Attr::n(limit.capacity * 1000));
        update.set(
            &attr(field::REFILL_AMOUNT),
            Attr::n(limit.refill_amount * 1000),
        );
        update.set(
            &attr(field::REFILL_PERIOD),
            Attr::n(limit.refill_period * 1000),
        );
        match limit.reset_after_seconds {
            Some(seconds) => update.set(&attr(field::RESET_AFTER), Attr::n(seconds)),
            None => update.remove(&attr(field::RESET_AFTER)),
        };
        if limit.soft {
            update.set(&attr(field::SOFT), Attr::n(deadline(t_ms)));
        } else {
            update.remove(&attr(field::SOFT));
        }
    }
    set_schedules(&mut update, config);
    // Forces the client's one materialising pass for the new parameters.
    update.set(VALID_UNTIL, Attr::n(0));
    // Entity-configured buckets persist; buckets on fallback limits expire
    // after seven recovery horizons, which is how later default changes reach them.
    if entity_decided {
        update.remove(TTL);
    } else if let Some(horizon) = recovery_seconds(&config.limits) {
        update.set(TTL, Attr::n(t_ms / 1000 + (horizon * 7.0) as i64));
    }
    for name in stale {
        for stale_field in field::ALL {
            update.remove(&limit_attr(name, stale_field));
        }
    }
    update
}

/// A bucket's schedules: the time zone, and each kind's default on the item
/// with the limits that differ from it; removed where no limit has one.
fn set_schedules(update: &mut UpdateBuilder, config: &LevelConfig) {
    let scheduled = config
        .limits
        .iter()
        .any(|l| l.sched.is_some() || l.rsched.is_some());
    match (&config.sched_tz, scheduled) {
        (Some(tz), true) => update.set(SCHED_TZ, Attr::s(tz)),
        (None, true) => update.set(SCHED_TZ, Attr::s("UTC")),
        _ => update.remove(SCHED_TZ),
    };
    for (item_attr, limit_field, pick) in [
        (
            SCHED,
            field::SCHED,
            (|l: &LimitConfig| l.sched.as_ref()) as fn(&LimitConfig) -> Option<&String>,
        ),
        (RSCHED, field::RSCHED, |l: &LimitConfig| l.rsched.as_ref()),
    ] {
        match schedule_parts(&config.limits, pick) {
            Some((default, overrides)) => {
                update.set(item_attr, Attr::s(default));
                for (name, compact) in overrides {
                    match compact {
                        Some(compact) => {
                            update.set(&limit_attr(&name, limit_field), Attr::s(compact))
                        }
                        None => update.remove(&limit_attr(&name, limit_field)),
                    };
                }
            }
            None => {
                update.remove(item_attr);
                for limit in &config.limits {
                    update.remove(&limit_attr(&limit.name, limit_field));
                }
            }
        }
    }
}

/// The slowest recovery among the limits: time to refill from empty for a
/// drip (over the base and every schedule window), the reset cycle for a
/// calendar quota, the window for a duration quota.
pub fn recovery_seconds(limits: &[LimitConfig]) -> Option<f64> {
    limits
        .iter()
        .filter_map(|limit| {
            if let Some(seconds) = limit.reset_after_seconds {
                return Some(seconds as f64);
            }
            if let Some(rsched) = &limit.rsched {
                let entries = schedule::decode_compact(rsched)?;
                return entries
                    .iter()
                    .map(schedule::CompactEntry::cycle_seconds)
                    .min()
                    .map(|s| s as f64);
            }
            let (cp, ra, rp) = (
                limit.capacity * 1000,
                limit.refill_amount * 1000,
                limit.refill_period * 1000,
            );
            let fill = |cp: i64, ra: i64, rp: i64| {
                (ra > 0).then(|| cp as f64 / ra as f64 * rp as f64 / 1000.0)
            };
            let mut worst = fill(cp, ra, rp)?;
            if let Some(sched) = &limit.sched {
                for entry in schedule::decode_compact(sched).unwrap_or_default() {
                    let (c, a, p) = entry.params(cp, ra, rp);
                    worst = worst.max(fill(c, a, p).unwrap_or(worst));
                }
            }
            Some(worst)
        })
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(name: &str, cp: i64, ra: i64) -> LimitConfig {
        LimitConfig {
            name: name.into(),
            capacity: cp,
            refill_amount: ra,
            refill_period: 60,
            sched: None,
            rsched: None,
            reset_after_seconds: None,
            soft: false,
        }
    }

    #[test]
    fn recovery_is_the_slowest_limit_and_window() {
        let mut night = limit("rpm", 60, 60);
        night.sched = Some("1h0-6a1".into());
        let mut daily = limit("day", 100, 0);
        daily.rsched = Some("1m0h0".into());
        assert_eq!(recovery_seconds(&[limit("rpm", 60, 60)]), Some(60.0));
        assert_eq!(recovery_seconds(&[night]), Some(3600.0));
        assert_eq!(recovery_seconds(&[daily.clone()]), Some(86_400.0));
        let mut session = limit("s", 5, 0);
        session.reset_after_seconds = Some(300);
        assert_eq!(recovery_seconds(&[session, daily]), Some(86_400.0));
    }

    #[test]
    fn a_param_update_scales_units_and_strips_stale_limits() {
        let mut soft = limit("tpm", 50_000, 50_000);
        soft.soft = true;
        let config = LevelConfig {
            limits: vec![soft, limit("rpm", 500, 500)],
            ..LevelConfig::default()
        };
        let stale = BTreeSet::from(["old".to_owned()]);
        let update = param_update(&config, true, &stale, 1_000_000).build("pk", "#STATE", None);
        let alias_of = |attr: &str| {
            update
                .names
                .iter()
                .find(|(_, a)| *a == attr)
                .map(|(k, _)| k.clone())
                .unwrap()
        };
        let value_of = |attr: &str| {
            let alias = alias_of(attr);
            let at = update.expression.find(&format!("{alias} = ")).unwrap();
            let placeholder = update.expression[at + alias.len() + 3..]
                .split([',', ' '])
                .next()
                .unwrap()
                .to_owned();
            update.values[&placeholder].clone()
        };
        assert_eq!(value_of("b_tpm_cp"), Attr::n(50_000_000));
        assert_eq!(value_of("b_rpm_rp"), Attr::n(60_000));
        let Attr::N(stamp) = value_of("b_tpm_soft") else {
            panic!()
        };
        let stamp: i64 = stamp.parse().unwrap();
        assert!((1_048_000..=1_060_000).contains(&stamp));
        assert_eq!(value_of("vu"), Attr::n(0));
        let removed = update.expression.split(" REMOVE ").nth(1).unwrap();
        for attr in [
            "b_rpm_soft",
            "ttl",
            "b_old_tk",
            "b_old_rn",
            "sched",
            "sched_tz",
        ] {
            let alias = alias_of(attr);
            assert!(removed.split(", ").any(|r| r == alias), "{attr} removed");
        }
    }
}
