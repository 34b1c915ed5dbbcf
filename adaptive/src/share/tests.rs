use super::*;
use proptest::prelude::*;

fn claimant(entity: &str, base: f64, max_factor: f64, used: f64, saturated: bool) -> Claimant {
    Claimant {
        entity: entity.to_owned(),
        base,
        max_factor,
        used,
        saturated,
        current: base,
    }
}

#[test]
fn one_heavy_entity_gets_what_the_light_ones_leave() {
    // Ten light entities use half their base of 1,000; the heavy one, base
    // 1,000 and up to 50x, is saturated at base. The resource holds 30,000.
    let mut claimants: Vec<Claimant> = (0..10)
        .map(|i| claimant(&format!("light{i}"), 1_000.0, 50.0, 500.0, false))
        .collect();
    claimants.push(claimant("heavy", 1_000.0, 50.0, 1_000.0, true));
    let s = share(30_000.0, 6_000.0, &claimants);
    assert_eq!((s.others, s.left), (5_000.0, 25_000.0));
    let heavy = s.allocations.last().unwrap();
    assert_eq!((heavy.allocation, heavy.why), (25_000.0, Why::Share));
    // Under the same factor for everyone, 30,000 / (11 x 1,000 x 0.5...) the
    // light ones hold what they do not use; here they keep base.
    assert!(s.allocations[..10].iter().all(|a| a.allocation == 1_000.0));
}

#[test]
fn what_a_capped_entity_cannot_take_goes_to_the_others_by_base() {
    let claimants = [
        claimant("a", 1_000.0, 2.0, 1_000.0, true),
        claimant("b", 1_000.0, 50.0, 1_000.0, true),
        claimant("c", 2_000.0, 50.0, 2_000.0, true),
    ];
    let s = share(20_000.0, 4_000.0, &claimants);
    // a takes its ceiling, 2,000; b and c share 18,000 as 1:2.
    assert_eq!(s.lambda, 6.0);
    let got: Vec<f64> = s.allocations.iter().map(|a| a.allocation).collect();
    assert_eq!(got, vec![2_000.0, 6_000.0, 12_000.0]);
    assert_eq!(s.allocations[0].why, Why::Ceiling);
}

#[test]
fn base_always_wins() {
    let claimants = [
        claimant("a", 1_000.0, 10.0, 1_000.0, true),
        claimant("b", 1_000.0, 10.0, 1_000.0, true),
    ];
    // 9,000 used by others of 10,000: 1,000 left for bases of 2,000.
    let s = share(10_000.0, 11_000.0, &claimants);
    assert_eq!(s.lambda, 1.0);
    assert!(
        s.allocations
            .iter()
            .all(|a| a.allocation == 1_000.0 && a.why == Why::BaseWins)
    );
    assert_eq!(s.allocations[0].factor(), Factor::ONE);
}

#[test]
fn an_entity_whose_demand_fell_eases_to_its_use_plus_headroom() {
    let mut c = claimant("a", 1_000.0, 20.0, 2_000.0, false);
    c.current = 10_000.0;
    let s = share(50_000.0, 2_000.0, std::slice::from_ref(&c));
    assert_eq!(s.allocations[0].allocation, 6_200.0);
    assert_eq!(s.allocations[0].why, Why::Easing);
    // Unsaturated and holding less than its use plus headroom: it holds.
    c.current = 2_300.0;
    let s = share(50_000.0, 2_000.0, std::slice::from_ref(&c));
    assert_eq!(
        (s.allocations[0].allocation, s.allocations[0].why),
        (2_300.0, Why::Use)
    );
}

#[test]
fn a_raised_entity_that_is_not_saturated_gives_its_allocation_back_under_overload() {
    // Capacity 12,000. One entity at 7x uses 6,000 of its 7,000 and is not
    // saturated; ten saturated at base use 10,000: 133% of the capacity.
    let mut raised = claimant("raised", 1_000.0, 10.0, 6_000.0, false);
    raised.current = 7_000.0;
    let mut claimants: Vec<Claimant> = (0..10)
        .map(|i| claimant(&format!("s{i}"), 1_000.0, 10.0, 1_000.0, true))
        .collect();
    claimants.push(raised);
    let s = share(12_000.0, 16_000.0, &claimants);
    let total: f64 = s.allocations.iter().map(|a| a.allocation).sum();
    assert!(total <= 12_000.0 + 1e-6, "{total}: {s:?}");
    // Max-min fair over all eleven: 12,000 over bases of 11,000.
    assert!((s.lambda - 12.0 / 11.0).abs() < 1e-9, "{s:?}");
    let last = s.allocations.last().unwrap();
    assert_eq!(last.why, Why::Share);
    assert!((last.allocation - 12_000.0 / 11.0).abs() < 1e-6);
    // With the bases alone over the capacity, everyone is at base.
    let s = share(10_500.0, 16_000.0, &claimants);
    assert!(
        s.allocations.iter().all(|a| a.allocation == 1_000.0),
        "{s:?}"
    );
}

/// One tick of a closed loop: each entity uses what it wants, at most its
/// allocation, and is saturated when it wants more.
fn tick(wants: &[(f64, f64, f64)], current: &mut [f64], to_share: f64, other: f64) -> Share {
    let claimants: Vec<Claimant> = wants
        .iter()
        .zip(current.iter())
        .enumerate()
        .map(|(i, (&(base, max_factor, want), &current))| Claimant {
            entity: format!("e{i}"),
            base,
            max_factor,
            used: want.min(current),
            saturated: want > current * (1.0 + 1e-9),
            current,
        })
        .collect();
    let used: f64 = other + claimants.iter().map(|c| c.used).sum::<f64>();
    let s = share(to_share, used, &claimants);
    // What is stamped: only moves of 5% or more.
    for (cur, a) in current.iter_mut().zip(&s.allocations) {
        let stamped = a.factor().as_f64() * a.base;
        if Factor::from_f64(*cur / a.base).differs(a.factor(), BAND) {
            *cur = stamped;
        }
    }
    s
}

fn entity() -> impl Strategy<Value = (f64, f64, f64)> {
    // base, max factor, want (0: idle; huge: takes all it gets).
    (
        prop::sample::select(vec![100.0, 1_000.0, 2_500.0]),
        prop::sample::select(vec![1.0, 2.0, 10.0, 50.0]),
        prop_oneof![Just(0.0), 0.0..3_000.0f64, Just(f64::INFINITY)],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("ZAE_FUZZ_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512)
    ))]

    /// The sum bound over every entity raised or asking, at one common
    /// lambda, max-min fair, every allocation within [base, ceiling], for
    /// any mix of claimants, raised ones among them (saturated or not).
    #[test]
    fn allocations_with_the_use_at_base_never_exceed_the_capacity_unless_the_bases_do(
        entities in prop::collection::vec(entity(), 1..30),
        saturated in prop::collection::vec(any::<bool>(), 30),
        raised in prop::collection::vec(0.0..1.0f64, 30),
        to_share in 1_000.0..200_000.0f64,
        other in 0.0..100_000.0f64,
    ) {
        let claimants: Vec<Claimant> = entities.iter().enumerate().map(|(i, &(base, m, want))| {
            let mut c = claimant(&format!("e{i}"), base, m, 0.0, saturated[i]);
            c.current = base + raised[i] * (c.ceiling() - base);
            c.used = if want.is_finite() { want.min(c.current) } else { c.current };
            c
        }).collect();
        let used = other + claimants.iter().map(|c| c.used).sum::<f64>();
        let s = share(to_share, used, &claimants);
        let wants: Vec<Want> = claimants.iter().map(want).collect();
        let asking: Vec<(&Claimant, &Allocation, &Want)> = claimants.iter().zip(&s.allocations)
            .zip(&wants).map(|((c, a), w)| (c, a, w)).filter(|(c, _, w)| w.level > c.base).collect();
        let others = other + claimants.iter().zip(&wants)
            .filter(|(c, w)| w.level <= c.base).map(|(c, _)| c.used).sum::<f64>();
        prop_assert!((s.others - others).abs() <= 1e-6 * others.max(1.0), "{} != {others}", s.others);
        let bases: f64 = asking.iter().map(|(c, _, _)| c.base).sum();
        let given: f64 = asking.iter().map(|(_, a, _)| a.allocation).sum();
        for (c, a) in claimants.iter().zip(&s.allocations) {
            prop_assert!(a.allocation >= c.base - 1e-9 && a.allocation <= c.ceiling() + 1e-9);
        }
        if bases + s.others >= s.to_share {
            prop_assert!(asking.iter().all(|(c, a, _)| a.allocation == c.base), "base wins");
        } else {
            prop_assert!(given + s.others <= s.to_share * (1.0 + 1e-9), "{given} + {} > {}", s.others, s.to_share);
            let all_met = asking.iter().all(|(_, a, w)| (a.allocation - w.level).abs() < 1e-6 * w.level);
            prop_assert!(all_met || (given - s.left).abs() <= 1e-6 * s.left.max(1.0));
        }
        for (c, a, w) in &asking {
            let fair = (s.lambda * c.base).min(w.level).max(c.base);
            prop_assert!((a.allocation - fair).abs() <= 1e-6 * fair, "{} != min({}, {} x {})", a.allocation, w.level, s.lambda, c.base);
        }
    }

    /// In a closed loop, an entity that starts taking all it gets has its
    /// share within two ticks, and one whose demand then falls settles at
    /// its use plus headroom (or base) without ever being saturated again
    /// or moving back up.
    #[test]
    fn a_new_demand_is_served_within_two_ticks_and_a_fallen_one_settles_without_flipping(
        entities in prop::collection::vec(entity(), 1..12),
        to_share in 10_000.0..100_000.0f64,
        other in 0.0..5_000.0f64,
        base in prop::sample::select(vec![100.0, 1_000.0]),
        max_factor in prop::sample::select(vec![2.0, 10.0, 50.0]),
        fallen in 0.0..2_000.0f64,
    ) {
        let mut wants = entities.clone();
        wants.push((base, max_factor, 0.0));
        let mut current: Vec<f64> = wants.iter().map(|w| w.0).collect();
        for _ in 0..6 {
            tick(&wants, &mut current, to_share, other);
        }
        let n = wants.len() - 1;
        wants[n].2 = f64::INFINITY;
        let mut lambdas = Vec::new();
        for _ in 0..2 {
            lambdas.push(tick(&wants, &mut current, to_share, other).lambda);
        }
        // Its share at the last tick's lambda, within the write band.
        let last = tick(&wants, &mut current, to_share, other);
        let want = (last.lambda * base).min(base * max_factor).max(base);
        prop_assert!((current[n] - want).abs() <= BAND * want + 1e-6 || last.lambda != lambdas[1],
            "{} vs {want}", current[n]);
        // Its demand falls below what it holds.
        let fallen = fallen.min(current[n] / (1.0 + HEADROOM));
        wants[n].2 = fallen;
        let mut previous = current[n];
        for _ in 0..12 {
            let s = tick(&wants, &mut current, to_share, other);
            prop_assert!(!s.allocations[n].saturated, "saturated again");
            prop_assert!(current[n] <= previous + 1e-9, "moved back up: {} -> {}", previous, current[n]);
            previous = current[n];
        }
        let settle = (fallen * (1.0 + HEADROOM)).clamp(base, base * max_factor);
        prop_assert!(current[n] >= settle * (1.0 - BAND) * (1.0 - 1e-6) && current[n] <= settle / (1.0 - BAND) + 1e-6,
            "settled at {} for {settle}", current[n]);
    }
}

/// Found by the property above: a claimant easing down from a factor of
/// 2.439022 towards 2.195119 (base 1000). Half the way is a step a hair over
/// 5% in floats and a hair under it in parts per million, so the step was
/// planned but never stamped, and the holding stayed above its level.
#[test]
fn an_easing_step_on_the_edge_of_the_band_is_stamped_or_goes_the_whole_way() {
    let used = 1_829.265_977_441_610_2;
    let wants = [(1_000.0, 10.0, used)];
    let mut current = [2_439.022];
    for _ in 0..12 {
        tick(&wants, &mut current, 51_039.778_078_547_635, 0.0);
    }
    let settle = used * (1.0 + HEADROOM);
    assert!(
        current[0] <= settle / (1.0 - BAND) + 1e-6,
        "held at {} for {settle}",
        current[0]
    );
}
