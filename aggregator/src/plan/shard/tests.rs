//! Shard decisions: when to double, who funds a new shard's quota, and
//! which limits are quotas (§6, §7.2, §8.6 of the reference).

use super::*;
use zae_table::bucket::LimitParams;
use zae_table::bucket::SCHED_NONE;

const NOW: i64 = 1_780_000_000_000;

fn wcu(tokens: i64, rf: i64, count: i64) -> BucketState<'static> {
    let limit = LimitParams {
        tokens: Some(tokens),
        capacity: Some(1_000_000),
        refill_amount: Some(1_000_000),
        refill_period: Some(1_000),
        ..Default::default()
    };
    BucketState {
        refilled_at: Some(rf),
        shard_count: Some(count),
        limits: [(WCU_LIMIT, limit)].into(),
        ..Default::default()
    }
}

#[test]
fn a_shard_doubles_when_its_wcu_projected_to_now_is_below_a_fifth() {
    let written = 1_000;
    let double = |state: BucketState<'static>| proactive(&state, written, NOW);
    assert_eq!(double(wcu(100_000, NOW, 1)), Some((Some(1), 2)));
    assert_eq!(double(wcu(300_000, NOW, 1)), None);
    assert_eq!(
        double(wcu(100_000, NOW - 1_000, 1)),
        None,
        "a second refills it"
    );
    assert_eq!(double(wcu(0, NOW, 32)), None, "at the ceiling");
    assert_eq!(
        double(wcu(0, NOW, 20)),
        Some((Some(20), 32)),
        "capped at 32"
    );
    // A doubling's own record: nothing written, the same low wcu.
    assert_eq!(proactive(&wcu(100_000, NOW, 2), 0, NOW), None);
}

fn holding(shard: u32, grants: i64, tokens: i64, current: bool) -> Holding {
    Holding {
        shard,
        current,
        grants,
        stored_count: grants,
        stamped: true,
        tokens,
        window_applied: None,
    }
}

#[test]
fn a_new_shards_quota_moves_from_the_widest_current_grant_covering_its_slot() {
    let held = [holding(0, 1, 10_000, true)];
    assert_eq!(plan_grant(&held, 1, 5_000), (5_000, Some(0)));
    let poor = [holding(0, 1, 3_000, true)];
    assert_eq!(
        plan_grant(&poor, 1, 5_000),
        (3_000, Some(0)),
        "never more than the donor holds"
    );
    let stale = [holding(0, 1, 10_000, false)];
    assert_eq!(
        plan_grant(&stale, 1, 5_000),
        (5_000, None),
        "a stale grant covers nothing: fresh"
    );
    let split = [holding(0, 2, 4_000, true), holding(1, 2, 4_000, true)];
    assert_eq!(plan_grant(&split, 2, 2_000), (2_000, Some(0)));
    assert_eq!(plan_grant(&split, 3, 2_000), (2_000, Some(1)));
    let wider = [holding(0, 1, 9_000, true), holding(1, 2, 9_000, true)];
    assert_eq!(
        plan_grant(&wider, 3, 2_000).1,
        Some(1),
        "the widest split that covers the slot"
    );
}

#[test]
fn a_clone_whose_quota_has_a_donor_waits_while_shard_0s_grant_is_stale() {
    let rule = Rule {
        resets: Vec::new(),
        window: Some(3_600),
        tz: Tz::UTC,
        capacity: 10_000,
    };
    let limits = [CloneLimit {
        name: "q".into(),
        capacity: 10_000,
        share: 5_000,
        quota: Some(rule),
    }];
    let mut held = BTreeMap::from([(
        "q".to_owned(),
        vec![holding(0, 1, 10_000, false), holding(1, 1, 10_000, true)],
    )]);
    assert!(plan_clone(&limits, &held, 2, NOW).is_none());
    held.get_mut("q").unwrap()[0].current = true;
    let plan = plan_clone(&limits, &held, 2, NOW).expect("funded");
    assert_eq!(plan.tokens["q"], 5_000);
    let debit = &plan.debits[&0][0];
    assert_eq!((debit.amount, debit.grant_count), (5_000, 1));
}

#[test]
fn quotas_are_the_limits_without_a_drip_that_reset() {
    let mut state = BucketState {
        rsched: Some("1m0h0"),
        ..Default::default()
    };
    let limit = |ra: i64, rsched: Option<&'static str>, rsa: Option<i64>| LimitParams {
        capacity: Some(10_000),
        refill_amount: Some(ra),
        refill_period: Some(1_000),
        rsched,
        reset_after: rsa,
        ..Default::default()
    };
    state.limits.insert("daily", limit(0, None, None));
    state
        .limits
        .insert("plain", limit(0, Some(SCHED_NONE), None));
    state
        .limits
        .insert("session", limit(0, Some(SCHED_NONE), Some(60)));
    state.limits.insert("rps", limit(1_000, None, None));
    let limits = clone_limits(&state, 2, NOW).unwrap();
    let quota = |n: &str| limits.iter().find(|l| l.name == n).unwrap().quota.is_some();
    assert!(quota("daily") && quota("session"));
    assert!(!quota("plain"), "its own `-` blocks the item's reset");
    assert!(!quota("rps"), "it drips");
    assert!(limits.iter().all(|l| l.share == 5_000));
    state.rsched = Some("9m0");
    assert!(clone_limits(&state, 2, NOW).is_err());
}
