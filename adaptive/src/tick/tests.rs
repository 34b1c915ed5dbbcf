use super::*;
use crate::estimator::WRITE_BAND;
use proptest::prelude::*;
use zae_table::adaptive::factor::PPM;

fn factor(x: f64) -> Factor {
    Factor::from_f64(x)
}

/// A target at `x`, set long ago.
fn at(x: f64) -> Target {
    let mut target = Target::base("r", "tpm");
    target.factor = factor(x);
    target
}

/// The estimator after one decision, with that decision.
fn deciding(factor: f64, reason: Reason) -> Estimator {
    Estimator {
        factor,
        reason,
        ..Estimator::default()
    }
}

const MOVE: Decision = Decision::Move(0.0);

#[test]
fn the_law_aims_at_the_declared_target_utilization_and_scales_to_the_given_max() {
    let mut declaration = Declaration::default();
    let max = factor(4.0);
    let law_of = |d: &Declaration, limit| law(d, "r", limit, max);
    assert_eq!(law_of(&declaration, "tpm"), Law::full(4.0));
    declaration
        .target
        .entry("r".into())
        .or_default()
        .insert("tpm".into(), 800_000);
    assert_eq!(law_of(&declaration, "tpm").target, 0.8);
    assert_eq!(law_of(&declaration, "tpm").max_factor, 4.0);
    assert_eq!(law_of(&declaration, "rpm").target, 1.0, "another limit: 1");
}

#[test]
fn a_capacity_undeclared_zero_or_negative_counts_as_one_token_a_minute() {
    let mut declaration = Declaration::default();
    assert_eq!(capacity(&declaration, "r", "tpm"), 1);
    for (declared, counted) in [(0, 1), (-600, 1), (1, 1), (600, 600)] {
        declaration
            .capacity
            .entry("r".into())
            .or_default()
            .insert("tpm".into(), declared);
        assert_eq!(capacity(&declaration, "r", "tpm"), counted, "{declared}");
    }
    // Use over a zero capacity is a number the estimator can read.
    declaration.capacity.clear();
    let zero = capacity(&declaration, "r", "tpm");
    assert_eq!(utilization(2_000, zero), 2.0);
}

#[test]
fn utilization_is_the_millitokens_used_over_the_capacity_in_tokens() {
    assert_eq!(utilization(600_000, 600), 1.0);
    assert_eq!(utilization(120_000, 600), 0.2);
    assert_eq!(utilization(0, 600), 0.0);
    assert!(utilization(i64::MAX, 1).is_finite());
}

#[test]
fn a_minute_is_observed_at_the_factor_in_force_and_one_straddling_a_move_is_mixed() {
    let mut target = at(3.0);
    target.set_at_ms = 10 * MINUTE_MS;
    let seen = |t: &Target, minute: i64| {
        let o = observation(t, minute * MINUTE_MS, 0.5, None, 600);
        assert_eq!(o.utilization, 0.5);
        (o.factor, o.mixed)
    };
    // The minute that ends as the move is made never saw it.
    assert_eq!(seen(&target, 9), (1.0, false));
    // The minute that starts with it saw nothing else.
    assert_eq!(seen(&target, 10), (3.0, false));
    // A third of the minute at 1, two thirds at 3: time-weighted.
    target.set_at_ms = 10 * MINUTE_MS + 20_000;
    let (f, mixed) = seen(&target, 10);
    assert!(mixed);
    assert!((f - 7.0 / 3.0).abs() < 1e-9, "{f}");
    assert_eq!(seen(&target, 11), (3.0, false));
}

#[test]
fn a_minutes_last_third_is_read_as_a_rate_per_minute_of_capacity() {
    let target = at(1.0);
    // 100 tokens in the last 20 s of a 600-a-minute resource: half of it.
    let tail = observation(&target, 0, 0.3, Some(100_000), 600).tail;
    assert_eq!(TAILS_PER_MINUTE, 3);
    assert_eq!(tail, Some(0.5));
    assert_eq!(observation(&target, 0, 0.3, None, 600).tail, None);
    let huge = observation(&target, 0, 0.3, Some(i64::MAX), 1).tail;
    assert!(huge.is_some_and(f64::is_finite), "saturates: {huge:?}");
}

#[test]
fn a_hold_moves_nothing_whatever_the_estimator_says() {
    let estimator = deciding(5.0, Reason::Hold);
    let target = at(1.0);
    let max = factor(10.0);
    assert_eq!(
        moves_to(&estimator, &Decision::Hold, max, &target, false),
        None
    );
    assert_eq!(
        moves_to(&estimator, &Decision::Move(5.0), max, &target, false),
        Some(factor(5.0))
    );
}

#[test]
fn a_move_to_the_factor_already_in_force_writes_nothing() {
    let target = at(2.0);
    let max = factor(10.0);
    for same in [2.0, 2.000_000_1, 1.999_999_9] {
        let estimator = deciding(same, Reason::Raise);
        assert_eq!(moves_to(&estimator, &MOVE, max, &target, false), None);
    }
    let next = deciding(2.000_001, Reason::Raise);
    assert_eq!(
        moves_to(&next, &MOVE, max, &target, false).map(Factor::ppm),
        Some(2_000_001),
        "one part per million is a move"
    );
}

#[test]
fn a_move_past_max_stops_at_max_and_a_target_at_max_stays() {
    let max = factor(10.0);
    let estimator = deciding(12.0, Reason::Raise);
    assert_eq!(moves_to(&estimator, &MOVE, max, &at(1.0), false), Some(max));
    assert_eq!(moves_to(&estimator, &MOVE, max, &at(10.0), false), None);
    // A max lowered under a raised target (a new `max_scale`) cuts it.
    assert_eq!(
        moves_to(&estimator, &MOVE, factor(3.0), &at(10.0), false),
        Some(factor(3.0))
    );
}

#[test]
fn under_share_demand_the_targets_own_factor_never_moves() {
    let estimator = deciding(5.0, Reason::Raise);
    let max = factor(10.0);
    assert_eq!(moves_to(&estimator, &MOVE, max, &at(1.0), true), None);
    assert_eq!(moves_to(&estimator, &MOVE, max, &at(4.0), true), None);
}

#[test]
fn a_blind_tick_takes_a_raised_target_to_base_and_names_it_blind() {
    let raised = at(4.0);
    let mut estimator = estimator_of(&raised);
    let decision = estimator.blind();
    let max = factor(10.0);
    let to = moves_to(&estimator, &decision, max, &raised, false);
    assert_eq!(to, Some(Factor::ONE));
    assert_eq!(move_reason(&estimator, Factor::ONE, &raised), "blind");
    // At base, blindness has nothing to write.
    let base = at(1.0);
    let mut estimator = estimator_of(&base);
    let decision = estimator.blind();
    assert_eq!(moves_to(&estimator, &decision, max, &base, false), None);
}

/// The tick of a target at base that observes one complete minute at
/// utilization `u`: where it moves the target, and why.
fn first_tick(u: f64) -> (Option<Factor>, &'static str) {
    let target = at(1.0);
    let max = factor(10.0);
    let mut estimator = estimator_of(&target);
    let obs = observation(&target, 0, u, None, 600);
    let decision = estimator.observe(obs, Law::full(max.as_f64()));
    let to = moves_to(&estimator, &decision, max, &target, false);
    let reason = to.map_or("hold", |to| move_reason(&estimator, to, &target));
    (to, reason)
}

#[test]
fn a_first_minute_just_inside_the_write_band_holds_and_just_outside_raises() {
    // The band a first observation must clear: the write band, or wider
    // while the noise is the prior's.
    let mut probe = Estimator::default();
    probe.observe(observation(&at(1.0), 0, 0.9, None, 600), Law::full(10.0));
    let band = probe.reading(Law::full(10.0)).band;
    assert!(band >= WRITE_BAND, "{band}");
    let inside = 1.0 / ((1.0 + band) * (1.0 - 1e-6));
    let outside = 1.0 / ((1.0 + band) * (1.0 + 1e-6));
    assert_eq!(first_tick(inside), (None, "hold"));
    let (to, reason) = first_tick(outside);
    assert_eq!(reason, "raise");
    assert_eq!(to, Some(factor(1.0 / outside)));
    // Use at the target, and above it at base, never moves the factor.
    assert_eq!(first_tick(1.0), (None, "hold"));
    assert_eq!(first_tick(1.5), (None, "hold"));
}

#[test]
fn minutes_caught_up_on_that_cross_are_named_by_where_the_move_goes() {
    // Three minutes caught up on: the first cut the estimator from 3 to
    // 1.5, the last raised it to 2. The target, still at 3, is cut.
    let target = at(3.0);
    assert_eq!(
        move_reason(&deciding(2.0, Reason::Raise), factor(2.0), &target),
        "cut"
    );
    assert_eq!(
        move_reason(&deciding(4.0, Reason::Cut), factor(4.0), &target),
        "raise"
    );
    // A surge, a spike and blindness keep their own names either way.
    for (reason, name) in [
        (Reason::Surge, "surge"),
        (Reason::Spike, "spike"),
        (Reason::Blind, "blind"),
    ] {
        for to in [2.0, 4.0] {
            let estimator = deciding(to, reason);
            assert_eq!(move_reason(&estimator, factor(to), &target), name);
        }
    }
}

#[test]
fn a_target_reset_elsewhere_restarts_its_estimator_from_the_targets_factor() {
    let mut learnt = deciding(4.0, Reason::Raise);
    learnt.points = vec![(1.0, 0.25), (4.0, 0.25)];
    let mut target = at(1.0);
    target.state = serde_json::to_string(&learnt).ok();
    let restarted = estimator_of(&target);
    assert_eq!(restarted.factor, 1.0);
    assert_eq!(restarted.reason, Reason::Start);
    assert!(restarted.points.is_empty());
}

#[test]
fn a_state_that_does_not_read_back_starts_from_the_targets_factor() {
    for state in [Some("not json"), Some("[1, 2]"), None] {
        let mut target = at(3.0);
        target.state = state.map(str::to_owned);
        let estimator = estimator_of(&target);
        assert_eq!(estimator.factor, 3.0, "{state:?}");
        assert_eq!(estimator.reason, Reason::Start);
    }
}

#[test]
fn a_state_that_agrees_with_the_target_is_carried_over_whole() {
    let mut learnt = deciding(2.5, Reason::Raise);
    learnt.points = vec![(1.0, 0.4), (2.5, 0.4)];
    learnt.quiet = 4;
    let mut target = at(2.5);
    target.state = serde_json::to_string(&learnt).ok();
    assert_eq!(estimator_of(&target), learnt);
}

#[test]
fn a_new_targets_first_minute_starts_after_every_aggregator_read_its_declaration() {
    let now = 10 * MINUTE_MS + 30_000;
    let target = first_target("r", "tpm", now, 60_000);
    assert_eq!(target.minute_ms, 11 * MINUTE_MS);
    assert_eq!(target.factor, Factor::ONE);
    assert_eq!((target.generation, target.ticked_at_ms), (0, None));
    assert_eq!(
        (target.resource.as_str(), target.limit.as_str()),
        ("r", "tpm")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(zae_test_support::fuzz_cases(256)))]

    /// The first minute a new target evaluates (the one after `minute_ms`)
    /// starts once every aggregator's cache has the declaration.
    #[test]
    fn a_new_target_evaluates_no_minute_its_declaration_may_have_missed(
        now in 0i64..1 << 50,
        ttl in 0i64..3_600_000,
    ) {
        let target = first_target("r", "tpm", now, ttl);
        prop_assert!(target.minute_ms <= now + ttl);
        prop_assert!(target.minute_ms + MINUTE_MS > now + ttl);
    }

    /// Whatever the estimator says, a move lands in `[1, max]`.
    #[test]
    fn a_move_is_never_below_one_nor_above_max(
        wished in prop_oneof![any::<f64>(), -5.0f64..50.0],
        max in PPM..50 * PPM,
        at_ppm in PPM..50 * PPM,
    ) {
        let max = Factor::from_ppm(max);
        let target = {
            let mut t = Target::base("r", "tpm");
            t.factor = Factor::from_ppm(at_ppm);
            t
        };
        let estimator = deciding(wished, Reason::Raise);
        if let Some(to) = moves_to(&estimator, &MOVE, max, &target, false) {
            prop_assert!(to >= Factor::ONE && to <= max, "{to:?} over {max:?}");
        }
    }

    /// A target ticked through any minutes (any use, tails, blind spells)
    /// keeps its factor in `[1, max]`.
    #[test]
    fn a_ticked_factor_stays_between_one_and_max(
        max in PPM..20 * PPM,
        minutes in proptest::collection::vec(
            (prop_oneof![0.0f64..3.0, any::<f64>()],
             proptest::option::of(0i64..2_000_000),
             proptest::bool::weighted(0.1)),
            1..40,
        ),
    ) {
        let max = Factor::from_ppm(max);
        let law = Law::full(max.as_f64());
        let mut target = Target::base("r", "tpm");
        for (i, (u, tail, blind)) in minutes.into_iter().enumerate() {
            let minute = i as i64 * MINUTE_MS;
            let mut estimator = estimator_of(&target);
            let decision = match blind {
                true => estimator.blind(),
                false => estimator.observe(observation(&target, minute, u, tail, 600), law),
            };
            if let Some(to) = moves_to(&estimator, &decision, max, &target, false) {
                prop_assert!(to >= Factor::ONE && to <= max, "{to:?} over {max:?}");
                let reason = move_reason(&estimator, to, &target);
                target.moved(to, minute + MINUTE_MS, reason, minute, i as i64 + 1);
            }
            target.state = serde_json::to_string(&estimator).ok();
        }
    }
}
