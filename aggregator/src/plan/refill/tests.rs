//! The refill decision, branch by branch (§5.1–§5.6 of the reference), and
//! where it deliberately does better: no write without a reason, no
//! forfeited accrual, every parameter pinned.

use super::*;
use zae_table::bucket::SCHED_NONE;
use zae_table::bucket::refill::LimitChange;

const NOW: i64 = 1_780_000_000_000; // 2026-05-28 20:26:40 UTC

/// 10 tokens of burst refilling 1 token a second.
fn limit(tokens: i64) -> LimitParams<'static> {
    LimitParams {
        consumed: Some(0),
        tokens: Some(tokens),
        capacity: Some(10_000),
        refill_amount: Some(1_000),
        refill_period: Some(1_000),
        ..Default::default()
    }
}

fn bucket(rf: i64, limits: Vec<(&'static str, LimitParams<'static>)>) -> BucketState<'static> {
    BucketState {
        refilled_at: Some(rf),
        limits: limits.into_iter().collect(),
        ..Default::default()
    }
}

fn decide(state: &BucketState<'_>, consumed: &[(&str, i64)]) -> Result<Option<Materialise>, Skip> {
    let consumed = consumed.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    Pass {
        pk: "ns/BUCKET#e#r#0",
        state,
        consumed: &consumed,
        now: NOW,
    }
    .decide()
}

fn change<'m>(write: &'m Materialise, name: &str) -> &'m LimitChange {
    write.limits.iter().find(|l| l.name == name).unwrap()
}

#[test]
fn a_top_up_is_written_when_the_stored_balance_is_short_of_two_batches_consumption() {
    let state = bucket(NOW - 5_000, vec![("rps", limit(1_000))]);
    // 1 token stored, 6 after the refill; the batch consumed 7.
    let write = decide(&state, &[("rps", 7_000)]).unwrap().expect("a write");
    let rps = change(&write, "rps");
    assert_eq!(
        (rps.delta, rps.tokens_read),
        (5_000, 1_000),
        "raised, and pinned on the balance read"
    );
    assert_eq!(
        (write.refilled_at_read, write.refilled_at),
        (NOW - 5_000, NOW)
    );
    assert_eq!(rps.params_read, [Some(10_000), Some(1_000), Some(1_000)]);
    // The refilled 6 would cover a batch of 5, but the fast path sees only
    // the stored 1: the reference skips this write, and the client's next
    // fast writes fail over to the slow path.
    assert!(decide(&state, &[("rps", 5_000)]).unwrap().is_some());
    assert_eq!(
        decide(&state, &[("rps", 500)]).unwrap(),
        None,
        "1 stored covers two batches of half a token"
    );
    assert!(
        decide(&state, &[("rps", 600)]).unwrap().is_some(),
        "but not two of 0.6"
    );
    assert_eq!(
        decide(&state, &[]).unwrap(),
        None,
        "no consumption, no top-up"
    );
}

#[test]
fn a_debt_is_topped_up_only_once_the_refill_has_paid_it_off() {
    // The reference re-tops a bucket in debt on every batch, its own refill
    // records included; here a debt alone is no reason until it is cleared.
    let in_debt = bucket(NOW - 1_000, vec![("tpm", limit(-3_000))]);
    assert_eq!(decide(&in_debt, &[]).unwrap(), None);
    let paid_off = bucket(NOW - 5_000, vec![("tpm", limit(-3_000))]);
    let write = decide(&paid_off, &[]).unwrap().expect("recovered: written");
    assert_eq!(change(&write, "tpm").delta, 5_000);
}

#[test]
fn a_balance_above_a_shrunken_ceiling_is_clamped_without_consumption() {
    let mut rps = limit(20_000);
    rps.capacity = Some(8_000);
    let write = decide(&bucket(NOW - 1, vec![("rps", rps)]), &[])
        .unwrap()
        .expect("a clamp");
    assert_eq!(change(&write, "rps").delta, -12_000);
    // Shares: two shards split the capacity.
    let mut state = bucket(NOW - 1, vec![("rps", limit(9_000))]);
    state.shard_count = Some(2);
    let write = decide(&state, &[]).unwrap().expect("clamped to the share");
    assert_eq!(change(&write, "rps").delta, -4_000);
    assert_eq!(
        write.shard_count_read,
        Some(2),
        "pinned: a doubling since would shrink the share"
    );
}

#[test]
fn once_a_write_is_justified_every_limits_accrual_rides_along() {
    let state = bucket(
        NOW - 3_000,
        vec![("rps", limit(0)), ("tpm", limit(0)), ("wcu", limit(5_000))],
    );
    let write = decide(&state, &[("rps", 4_000)])
        .unwrap()
        .expect("rps justifies it");
    // The reference would land only rps and the wcu credit, and forfeit tpm's
    // three tokens when rf moves.
    for (name, delta) in [("rps", 3_000), ("tpm", 3_000), ("wcu", 3_000)] {
        assert_eq!(change(&write, name).delta, delta, "{name}");
    }
    let wcu_only = bucket(NOW - 3_000, vec![("rps", limit(9_000)), ("wcu", limit(0))]);
    assert_eq!(
        decide(&wcu_only, &[("rps", 1_000)]).unwrap(),
        None,
        "a wcu credit is never a reason alone"
    );
}

#[test]
fn a_calendar_reset_edge_since_rf_grants_the_capacity_and_stamps_the_count() {
    let mut quota = limit(1_000);
    quota.refill_amount = Some(0);
    quota.rsched = Some("1m0h0");
    quota.topped_up = Some(0);
    quota.grant_count = Some(1);
    let midnight = NOW - NOW.rem_euclid(86_400_000);
    let mut state = bucket(midnight - 60_000, vec![("daily", quota.clone())]);
    state.shard_count = Some(2);
    let write = decide(&state, &[]).unwrap().expect("the reset lands");
    let daily = change(&write, "daily");
    assert_eq!(daily.delta, 4_000, "back to the share of 10 over 2 shards");
    assert_eq!(daily.set_grant, Some(2));
    assert!(daily.remove_topped_up, "a top-up belongs to its period");
    let after = bucket(midnight + 60_000, vec![("daily", quota)]);
    assert_eq!(
        decide(&after, &[]).unwrap(),
        None,
        "no edge since rf, and a quota does not drip"
    );
}

#[test]
fn a_window_roll_targets_the_capacity_less_what_the_new_window_spent() {
    let mut session = limit(500);
    session.refill_amount = Some(0);
    session.reset_after = Some(3_600);
    session.window_start = Some(NOW - 60_000);
    session.window_applied = Some(NOW - 4_000_000);
    session.consumed = Some(9_000);
    session.window_consumed = Some(7_000);
    let write = decide(&bucket(NOW - 120_000, vec![("s", session.clone())]), &[])
        .unwrap()
        .expect("rolled");
    let s = change(&write, "s");
    assert_eq!(s.delta, 10_000 - 2_000 - 500);
    assert_eq!(s.window_pin, Some(NOW - 60_000));
    assert_eq!(s.set_applied, Some(NOW - 60_000));
    // rf never goes back before the window start (a lagging clock).
    let mut early = session.clone();
    early.window_start = Some(NOW + 5_000);
    let write = decide(&bucket(NOW - 120_000, vec![("s", early)]), &[])
        .unwrap()
        .expect("rolled");
    assert_eq!(write.refilled_at, NOW + 5_000);
    // An unapplied window that has already ended: the client opens the next.
    session.window_start = Some(NOW - 3_700_000);
    assert_eq!(
        decide(&bucket(NOW - 120_000, vec![("s", session)]), &[]).unwrap(),
        None
    );
}

#[test]
fn the_fast_path_reopens_until_the_next_boundary_unless_a_quota_is_over_its_ceiling() {
    let mut state = bucket(NOW - 5_000, vec![("rps", limit(0))]);
    state.valid_until = Some(0);
    state.sched = Some("1h9-17s2000");
    let write = decide(&state, &[("rps", 6_000)]).unwrap().expect("a write");
    let vu = write.valid_until.expect("re-stamped");
    assert!(vu > NOW && vu <= NOW + 86_400_000, "{vu}");
    assert_eq!(
        write.sched_read.as_deref(),
        Some("1h9-17s2000"),
        "pinned on the schedule read"
    );
    let mut quota = limit(50_000);
    quota.refill_amount = Some(0);
    quota.reset_after = Some(60);
    state.limits.insert("q", quota);
    let write = decide(&state, &[("rps", 6_000)]).unwrap().expect("a write");
    assert_eq!(
        write.valid_until, None,
        "a quota above its ceiling keeps the fast path shut"
    );
}

#[test]
fn an_unreadable_schedule_skips_the_bucket() {
    let mut state = bucket(NOW - 5_000, vec![("rps", limit(0))]);
    state.sched = Some("9h1s1");
    assert!(matches!(
        decide(&state, &[("rps", 9_000)]),
        Err(Skip::Schedule(_))
    ));
    state.sched = Some("1h1s1");
    state.sched_tz = Some("Mars/Olympus");
    assert!(matches!(
        decide(&state, &[("rps", 9_000)]),
        Err(Skip::Schedule(_))
    ));
    let mut rps = limit(0);
    rps.sched = Some(SCHED_NONE);
    let write = decide(&bucket(NOW - 5_000, vec![("rps", rps)]), &[("rps", 9_000)]).unwrap();
    assert!(write.is_some(), "`-` is no schedule");
}

#[test]
fn a_scheduled_scale_applies_before_the_shard_split() {
    let mut state = bucket(NOW - 60_000, vec![("rps", limit(0))]);
    state.sched = Some("1s3000"); // every minute, three times the base
    state.shard_count = Some(2);
    let write = decide(&state, &[("rps", 20_000)])
        .unwrap()
        .expect("a write");
    // Capacity 30 over 2 shards is 15; 1.5 tokens a second for a minute.
    assert_eq!(change(&write, "rps").delta, 15_000);
}
