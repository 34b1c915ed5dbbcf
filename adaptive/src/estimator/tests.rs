use super::*;

/// Ticks of the estimator on a demand `u(f)`, each minute observed at the
/// factor decided by the tick before: the factor after each tick.
fn run(demand: impl Fn(f64) -> f64, law: Law, ticks: usize) -> Vec<f64> {
    let mut e = Estimator::default();
    (0..ticks)
        .map(|_| {
            let f = e.factor;
            e.observe(obs(demand(f), f, false), law);
            e.factor
        })
        .collect()
}

/// Minute use at a factor, clean or mixed (a move part-way through it).
fn obs(utilization: f64, factor: f64, mixed: bool) -> Observation {
    Observation {
        utilization,
        factor,
        mixed,
        tail: None,
    }
}

fn close(a: f64, b: f64, within: f64) -> bool {
    (a - b).abs() <= within * b
}

#[test]
fn unresponsive_demand_at_a_fifth_settles_at_the_target_over_a_fifth() {
    for t in [1.0, 0.8] {
        let path = run(
            |_| 0.2,
            Law {
                target: t,
                max_factor: 10.0,
            },
            6,
        );
        assert!(close(path[0], t / 0.2, 0.01), "{t}: {path:?}");
        assert!(path.windows(2).all(|w| w[0] == w[1]), "{t}: {path:?}");
    }
}

#[test]
fn demand_that_takes_all_it_gets_settles_at_the_target_over_its_use_at_base() {
    for t in [1.0, 0.8] {
        let law = Law {
            target: t,
            max_factor: 10.0,
        };
        let path = run(|f| 0.2 * f, law, 8);
        let settled = *path.last().unwrap();
        assert!(
            close(path[0], t / 0.2, 0.01),
            "one step from base: {path:?}"
        );
        let used = 0.2 * settled;
        assert!(
            (0.9 * t..=1.05 * t).contains(&used),
            "{t}: use {used}, {path:?}"
        );
        assert_eq!(path[6], path[7], "{path:?}");
    }
}

#[test]
fn mixed_demand_settles_at_the_target_over_its_use_at_base_with_use_below_the_target() {
    // a = 0.1 does not respond, b = 0.1 takes what it is given: u1 = 0.2.
    let (a, b) = (0.1, 0.1);
    let law = Law::full(10.0);
    let path = run(|f| a + b * f, law, 8);
    let f = *path.last().unwrap();
    assert!(close(f, 1.0 / (a + b), 0.05), "{path:?}");
    let used = a + b * f;
    assert!(close(used, 1.0 - a * (f - 1.0), 0.01), "use {used} at {f}");
}

#[test]
fn from_a_raised_factor_a_fall_in_demand_is_learnt_without_overload() {
    // Settled at 5 on demand that takes all (0.2 at base), then half of it
    // leaves: the law's factor is 10, the first step is the safe reading.
    let law = Law::full(10.0);
    let mut e = Estimator::default();
    let mut path = Vec::new();
    for minute in 0..12 {
        let f = e.factor;
        let u = if minute < 5 { 0.2 * f } else { 0.1 * f };
        e.observe(obs(u, f, false), law);
        assert!(u <= 1.0 + 1e-9, "minute {minute}: use {u} at {f}");
        path.push(e.factor);
    }
    assert!(close(path[11], 10.0, 0.05), "{path:?}");
}

#[test]
fn a_surge_is_cut_at_once_and_idle_goes_to_the_maximum() {
    let law = Law::full(10.0);
    let mut e = Estimator::default();
    for _ in 0..3 {
        let f = e.factor;
        e.observe(obs(0.2, f, false), law);
    }
    assert!(close(e.factor, 5.0, 0.01));
    let decision = e.observe(obs(1.5, e.factor, false), law);
    assert_eq!(decision, Decision::Move(1.0));
    assert_eq!(e.reason, Reason::Surge);
    assert_eq!(run(|_| 0.0, law, 1), vec![10.0]);
    assert_eq!(run(|_| 1.5, law, 1), vec![1.0]);
}

/// A surge that began 20 s before the minute's end: the whole minute reads
/// 0.83 (below the surge line: a jump, cut only to `t / 0.83` before), its
/// last third 1.9. The last third cuts to base at once, in a clean minute
/// and in a mixed one; a last third within the noise moves nothing by
/// itself, nor does one at base.
#[test]
fn a_surge_in_a_minutes_last_third_is_cut_at_once() {
    let law = Law::full(10.0);
    let at_five = || {
        let mut e = Estimator::default();
        e.observe(obs(0.2, 1.0, false), law);
        e.observe(obs(0.2, e.factor, false), law);
        assert!(close(e.factor, 5.0, 0.01));
        e
    };
    let tail = |u: f64, f: f64, mixed: bool, tail: f64| Observation {
        tail: Some(tail),
        ..obs(u, f, mixed)
    };
    let mut e = at_five();
    assert_eq!(
        e.observe(tail(0.83, 5.0, false, 1.9), law),
        Decision::Move(1.0)
    );
    assert_eq!(e.reason, Reason::Surge);
    let mut e = at_five();
    assert_eq!(
        e.observe(tail(0.83, 4.0, true, 1.9), law),
        Decision::Move(1.0)
    );
    let mut e = at_five();
    assert_eq!(e.observe(tail(0.2, 5.0, false, 0.21), law), Decision::Hold);
    let mut e = Estimator::default();
    assert_eq!(e.observe(tail(1.5, 1.0, false, 1.9), law), Decision::Hold);
}

#[test]
fn a_surge_in_a_mixed_minute_is_cut_too_and_nothing_else_moves_it() {
    let law = Law::full(10.0);
    let mut e = Estimator::default();
    e.observe(obs(0.2, 1.0, false), law);
    assert!(close(e.factor, 5.0, 0.01));
    let calm = e.observe(obs(0.5, 3.0, true), law);
    assert_eq!(calm, Decision::Hold);
    let surge = e.observe(obs(2.0, 3.0, true), law);
    assert_eq!(surge, Decision::Move(1.0));
}

#[test]
fn blind_goes_to_base_and_forgets() {
    let law = Law::full(10.0);
    let mut e = Estimator::default();
    e.observe(obs(0.2, 1.0, false), law);
    assert_eq!(e.blind(), Decision::Move(1.0));
    assert_eq!(
        (e.factor, e.reason, e.points.len()),
        (1.0, Reason::Blind, 0)
    );
    assert_eq!(e.blind(), Decision::Hold);
}

#[test]
fn the_reading_names_the_response_and_use_at_base() {
    let law = Law::full(10.0);
    let mut e = Estimator::default();
    for _ in 0..4 {
        let f = e.factor;
        e.observe(obs(0.2 * f, f, false), law);
    }
    let reading = e.reading(law);
    let (a, b) = reading.response.expect("two factors observed");
    assert!(a < 0.02 && close(b, 0.2, 0.05), "{reading:?}");
    assert!(close(reading.at_base.unwrap(), 0.2, 0.05), "{reading:?}");
    assert!(reading.surge_above > 1.0 && reading.band >= WRITE_BAND);
}

#[test]
fn state_written_by_the_earlier_estimator_reads_back() {
    // Fields the earlier estimator kept and this one does not are ignored.
    let old = r#"{"factor":2.2,"points":[[1.0,0.2],[2.2,0.44]],"model":[0.0,0.2],
        "noise":0.02,"surprise":0.0,"fell":false,"cautious":false,"moved":true,
        "turns":0,"quiet":3,"since_surge":4294967295,"provisional":false}"#;
    let mut e: Estimator = serde_json::from_str(old).unwrap();
    assert_eq!(e.factor, 2.2);
    // Its observations say 0.2 at base: the law on use at base wants 5.
    e.observe(obs(0.44, 2.2, false), Law::full(10.0));
    assert!(close(e.factor, 5.0, 0.05), "{e:?}");
}
