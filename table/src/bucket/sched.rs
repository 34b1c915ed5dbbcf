//! How a bucket item spells its limits' schedules, as the 0.17.0 client
//! writes them: one item-level default per kind (`sched`, `rsched`), the
//! first scheduled limit's; a per-limit override (`b_{n}_sched`,
//! `b_{n}_rsched`) where a limit differs, `-` for a limit with none; one
//! zone for the item (`sched_tz`).

use super::{RSCHED, SCHED, SCHED_NONE, SCHED_TZ, field, limit_attr};
use crate::{Attr, Item};

/// One limit's compact schedules (`None`: none of that kind).
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub name: &'a str,
    pub sched: Option<&'a str>,
    pub rsched: Option<&'a str>,
}

/// The attributes a new item carries for `limits` (in the order they are
/// written, which picks the defaults), read in `tz`. Nothing when no limit
/// is scheduled.
pub fn new_item_attrs<'a>(limits: &[Named<'a>], tz: &str) -> Vec<(String, Attr)> {
    let mut out = Vec::new();
    for reset in [false, true] {
        let (item_attr, field) = if reset {
            (RSCHED, field::RSCHED)
        } else {
            (SCHED, field::SCHED)
        };
        let pick = |n: &Named<'a>| if reset { n.rsched } else { n.sched };
        let Some(default) = limits.iter().find_map(pick) else {
            continue;
        };
        out.push((item_attr.to_owned(), Attr::s(default)));
        for limit in limits {
            let own = pick(limit).unwrap_or(SCHED_NONE);
            if own != default {
                out.push((limit_attr(limit.name, field), Attr::s(own)));
            }
        }
    }
    if !out.is_empty() {
        out.push((SCHED_TZ.to_owned(), Attr::s(tz)));
    }
    out
}

/// Writes [`new_item_attrs`] into a new item.
pub fn stamp_new_item(item: &mut Item, limits: &[Named<'_>], tz: &str) {
    item.extend(new_item_attrs(limits, tz));
}

/// A limit seeded onto an existing item spells both overrides out, so the
/// item's defaults never leak onto it; and the zone, when it has a schedule.
pub fn seed_attrs(limit: Named<'_>, tz: &str) -> Vec<(String, Attr)> {
    let mut out = vec![
        (
            limit_attr(limit.name, field::SCHED),
            Attr::s(limit.sched.unwrap_or(SCHED_NONE)),
        ),
        (
            limit_attr(limit.name, field::RSCHED),
            Attr::s(limit.rsched.unwrap_or(SCHED_NONE)),
        ),
    ];
    if limit.sched.is_some() || limit.rsched.is_some() {
        out.push((SCHED_TZ.to_owned(), Attr::s(tz)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named<'a>(name: &'a str, sched: Option<&'a str>) -> Named<'a> {
        Named {
            name,
            sched,
            rsched: None,
        }
    }

    #[test]
    fn the_first_scheduled_limit_sets_the_default_and_the_others_override() {
        let attrs = new_item_attrs(
            &[
                named("a", None),
                named("rpm", Some("1h9-17s2500")),
                named("rps", Some("1h9-17s2500")),
                named("tpm", Some("1w6,7s500")),
            ],
            "Europe/Paris",
        );
        let get = |k: &str| attrs.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        assert_eq!(get("sched"), Some(Attr::s("1h9-17s2500")));
        assert_eq!(get("b_a_sched"), Some(Attr::s("-")));
        assert_eq!(get("b_rpm_sched"), None);
        assert_eq!(get("b_rps_sched"), None);
        assert_eq!(get("b_tpm_sched"), Some(Attr::s("1w6,7s500")));
        assert_eq!(get("sched_tz"), Some(Attr::s("Europe/Paris")));
        assert_eq!(get("rsched"), None, "no limit resets");
    }

    #[test]
    fn nothing_scheduled_writes_nothing_and_a_seed_spells_both_overrides() {
        assert!(new_item_attrs(&[named("a", None)], "UTC").is_empty());
        let seed = seed_attrs(named("a", None), "UTC");
        assert_eq!(seed.len(), 2);
        assert!(seed.iter().all(|(_, v)| *v == Attr::s("-")));
        assert_eq!(seed_attrs(named("a", Some("1h0")), "UTC").len(), 3);
    }
}
