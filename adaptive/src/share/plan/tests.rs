//! A tick's plan alone, without a table: levels of 1,000 tokens a minute
//! (burst 10,000) on limit `tpm` of resource `r` unless a test says
//! otherwise; uses in tokens (the plan reads millitokens).

use super::*;
use proptest::prelude::*;
use zae_table::adaptive::demand::EntityMinute;

const MINUTE: i64 = 1_796_032_800_000;

/// A level of `per_minute` tokens a minute, opted in up to `max`x.
fn level(per_minute: i64, max: i64) -> Governed {
    Governed {
        base: LimitConfig::drip("tpm", 10 * per_minute, per_minute, 60),
        max_factor: Factor::from_ppm(max * 1_000_000),
        max_scale: None,
        shadow: false,
    }
}

fn governed(max: i64) -> Option<Governed> {
    Some(level(1_000, max))
}

/// An allocation in force at `ppm` parts per million of base.
fn raised(entity: &str, ppm: i64) -> Option<Allocated> {
    Some(Allocated {
        resource: "r".into(),
        limit: "tpm".into(),
        entity: entity.into(),
        factor: Factor::from_ppm(ppm),
        generation: 9,
        used: 0,
        saturated: true,
        why: "share".into(),
        at_ms: 0,
        pending: false,
    })
}

/// The minute's listing: (entity, tokens used, saturated).
fn listed(entities: &[(&str, i64, bool)]) -> Demand {
    let entities = entities.iter().map(|&(e, used, saturated)| {
        let minute = EntityMinute {
            used: used * 1_000,
            saturated,
        };
        (e.to_owned(), minute)
    });
    Demand {
        entities: entities.collect(),
        overflow: 0,
    }
}

type Entity<'a> = (&'a str, Option<Governed>, Option<Allocated>);

/// The plan of `MINUTE`, whose whole use of the resource is `used` tokens.
fn plan(to_share: f64, used: i64, demand: &Demand, entities: &[Entity<'_>]) -> Plan {
    let names: Vec<String> = entities.iter().map(|(e, ..)| e.to_string()).collect();
    let entities = names
        .iter()
        .zip(entities)
        .map(|(name, (_, g, old))| (name, g.clone(), old.clone()))
        .collect();
    decide((MINUTE, used * 1_000), to_share, demand, entities)
}

fn names(plan: &Plan) -> Vec<&str> {
    plan.decided
        .iter()
        .map(|d| d.report.entity.as_str())
        .collect()
}

fn declaration(capacity: Option<i64>, target_ppm: Option<i64>) -> Declaration {
    let of_r = |v: Option<i64>| {
        v.map(|v| BTreeMap::from([("r".into(), BTreeMap::from([("tpm".into(), v)]))]))
            .unwrap_or_default()
    };
    Declaration {
        capacity: of_r(capacity),
        target: of_r(target_ppm),
        ..Declaration::default()
    }
}

#[test]
fn the_share_is_the_target_utilization_of_the_estimated_capacity() {
    let d = declaration(Some(100_000), Some(800_000));
    assert_eq!(to_share(&d, "r", "tpm"), 80_000.0);
    let d = declaration(Some(100_000), None);
    assert_eq!(to_share(&d, "r", "tpm"), 100_000.0, "t is 1 undeclared");
}

/// Nothing to share is one token a minute, not zero or a division by zero:
/// the bases win.
#[test]
fn a_missing_or_zero_capacity_shares_one_token_and_the_bases_win() {
    for d in [declaration(None, None), declaration(Some(0), None)] {
        assert_eq!(to_share(&d, "r", "tpm"), 1.0);
    }
    let demand = listed(&[("heavy", 1_000, true)]);
    let p = plan(
        1.0,
        1_000,
        &demand,
        &[("heavy", governed(10), raised("heavy", 5_000_000))],
    );
    assert_eq!(p.decided[0].factor, Factor::ONE);
    assert_eq!(p.decided[0].report.why, "base wins");
}

#[test]
fn a_saturated_entity_is_raised_to_what_the_others_leave() {
    // 5,000 to share; the light one (at base, asking for nothing) and
    // unmanaged buckets use 1,000: 4,000 left for the heavy one.
    let mut demand = listed(&[("heavy", 1_000, true), ("light", 500, false)]);
    demand.overflow = 7;
    let entities = [("heavy", governed(10), None), ("light", governed(10), None)];
    let p = plan(5_000.0, 2_000, &demand, &entities);
    assert_eq!((p.tick.minute_ms, p.tick.overflow), (MINUTE, 7));
    assert_eq!(
        (p.tick.to_share, p.tick.others, p.tick.left, p.tick.lambda),
        (5_000.0, 1_000.0, 4_000.0, 4.0)
    );
    assert_eq!(
        names(&p),
        ["heavy"],
        "the light one stays at base unreported"
    );
    let heavy = &p.decided[0];
    assert!(heavy.moved && heavy.old.is_none());
    assert_eq!(heavy.factor, Factor::from_ppm(4_000_000));
    let r = &heavy.report;
    assert_eq!(
        (r.used, r.saturated, r.base, r.allocation),
        (1_000.0, true, 1_000.0, 4_000.0)
    );
    assert_eq!((r.factor, r.why.as_str(), r.stamped), (4.0, "share", false));
    assert_eq!(p.tick.entities, vec![heavy.report.clone()]);
}

#[test]
fn an_entity_at_base_that_stays_there_is_neither_decided_nor_reported() {
    let demand = listed(&[("light", 500, false)]);
    let entities = [("light", governed(10), None), ("idle", governed(10), None)];
    let p = plan(50_000.0, 500, &demand, &entities);
    assert!(p.decided.is_empty() && p.tick.entities.is_empty(), "{p:?}");
}

#[test]
fn a_move_smaller_than_the_band_keeps_the_factor_in_force_unstamped() {
    // At 5x; the share would be 5.2x: 3.8% away.
    let demand = listed(&[("heavy", 5_000, true)]);
    let p = plan(
        5_200.0,
        5_000,
        &demand,
        &[("heavy", governed(10), raised("heavy", 5_000_000))],
    );
    let d = &p.decided[0];
    assert!(!d.moved);
    assert_eq!(d.factor, Factor::from_ppm(5_000_000));
    assert_eq!((d.report.factor, d.report.allocation), (5.0, 5_200.0));
}

#[test]
fn a_move_of_exactly_the_band_is_stamped_and_one_a_part_per_million_less_is_not() {
    // 1.9x to 2x: 5% of the larger.
    let demand = listed(&[("heavy", 1_900, true)]);
    let at = |ppm| {
        plan(
            2_000.0,
            1_900,
            &demand,
            &[("heavy", governed(10), raised("heavy", ppm))],
        )
    };
    let p = at(1_900_000);
    assert!(p.decided[0].moved);
    assert_eq!(p.decided[0].factor, Factor::from_ppm(2_000_000));
    let p = at(1_900_001);
    assert!(!p.decided[0].moved);
    assert_eq!(p.decided[0].factor, Factor::from_ppm(1_900_001));
}

/// A tick cut short left it pending: the next one stamps it again, moved or not.
#[test]
fn a_pending_allocation_is_stamped_again_though_it_did_not_move() {
    let demand = listed(&[("heavy", 5_000, true)]);
    let mut old = raised("heavy", 5_000_000);
    old.as_mut().unwrap().pending = true;
    let p = plan(5_000.0, 5_000, &demand, &[("heavy", governed(10), old)]);
    assert!(p.decided[0].moved);
    assert_eq!(p.decided[0].factor, Factor::from_ppm(5_000_000));
}

#[test]
fn an_allocation_within_the_band_of_base_is_decided_at_base() {
    // At 1.2x; the share is 1.03x, within 5% of base.
    let demand = listed(&[("heavy", 1_030, true)]);
    let p = plan(
        1_030.0,
        1_030,
        &demand,
        &[("heavy", governed(10), raised("heavy", 1_200_000))],
    );
    assert!(p.decided[0].moved);
    assert_eq!(p.decided[0].factor, Factor::ONE);
}

#[test]
fn base_wins_when_the_bases_alone_fill_what_is_left() {
    // 9,000 used by others of 10,000: 1,000 left for bases of 2,000.
    let demand = listed(&[("a", 1_000, true), ("b", 1_000, true)]);
    let entities = [
        ("a", governed(10), raised("a", 5_000_000)),
        ("b", governed(10), raised("b", 5_000_000)),
    ];
    let p = plan(10_000.0, 11_000, &demand, &entities);
    assert_eq!(p.tick.lambda, 1.0);
    for d in &p.decided {
        assert!(d.moved && d.factor == Factor::ONE, "{d:?}");
        assert_eq!(
            (d.report.allocation, d.report.why.as_str()),
            (1_000.0, "base wins")
        );
    }
}

/// A raised entity is listed whenever it is used: one missing from the
/// minute used nothing, and comes down halfway towards base.
#[test]
fn an_unlisted_raised_entity_is_idle_and_eases_down() {
    let p = plan(
        50_000.0,
        0,
        &listed(&[]),
        &[("idle", governed(10), raised("idle", 10_000_000))],
    );
    let d = &p.decided[0];
    assert!(d.moved);
    assert_eq!(d.factor, Factor::from_ppm(5_500_000));
    assert_eq!((d.report.used, d.report.why.as_str()), (0.0, "easing"));
}

#[test]
fn an_entity_no_longer_opted_in_goes_back_to_base_and_one_never_raised_is_left_out() {
    let demand = listed(&[("gone", 1_000, true), ("never", 1_000, true)]);
    let entities = [
        ("gone", None, raised("gone", 5_000_000)),
        ("never", None, None),
    ];
    let p = plan(50_000.0, 2_000, &demand, &entities);
    assert_eq!(names(&p), ["gone"]);
    let d = &p.decided[0];
    assert!(d.moved && d.factor == Factor::ONE && !d.shadow);
    assert_eq!(d.report.why, "not opted in");
    // A base no bucket carries: the stamp returns ours to what it had.
    assert_eq!((d.base.name.as_str(), d.base.refill_amount), ("tpm", 0));
    assert_eq!(d.max_scale, None);
    assert_eq!(d.old.as_ref().unwrap().factor, Factor::from_ppm(5_000_000));
    assert_eq!(p.tick.entities.len(), 1);
}

#[test]
fn a_decision_carries_its_governing_levels_base_max_scale_and_shadow() {
    let mut g = level(2_000, 10);
    g.max_scale = Some(Factor::from_ppm(3_000_000));
    g.shadow = true;
    let demand = listed(&[("heavy", 2_000, true)]);
    let p = plan(8_000.0, 2_000, &demand, &[("heavy", Some(g.clone()), None)]);
    let d = &p.decided[0];
    assert_eq!(
        (&d.base, d.max_scale, d.shadow),
        (&g.base, g.max_scale, true)
    );
    assert_eq!((d.report.base, d.report.shadow), (2_000.0, true));
    assert_eq!(d.factor, Factor::from_ppm(4_000_000));
}

#[test]
fn blind_sends_every_raised_entity_back_to_base_under_its_governing_level() {
    let mut g = level(2_000, 10);
    g.max_scale = Some(Factor::from_ppm(3_000_000));
    let allocated = BTreeMap::from([
        ("a".to_owned(), raised("a", 5_000_000).unwrap()),
        ("b".to_owned(), raised("b", 3_000_000).unwrap()),
    ]);
    let mut p = Plan::default();
    to_base(allocated, [Some(g.clone()), None], &mut p);
    assert_eq!(names(&p), ["a", "b"]);
    for d in &p.decided {
        assert!(d.moved && d.factor == Factor::ONE, "{d:?}");
        assert_eq!(d.report.why, BLIND);
    }
    assert_eq!(
        (&p.decided[0].base, p.decided[0].max_scale),
        (&g.base, g.max_scale)
    );
    // Its level unread: the placeholder base, which no bucket carries.
    assert_eq!(
        (p.decided[1].base.refill_amount, p.decided[1].max_scale),
        (0, None)
    );
    assert_eq!(p.tick.entities.len(), 2);
}

/// Out of time before any level was read, the blind tick still sends
/// every raised entity back, under the placeholder base.
#[test]
fn blind_with_no_level_read_still_sends_every_raised_entity_back_to_base() {
    let allocated = BTreeMap::from([("a".to_owned(), raised("a", 5_000_000).unwrap())]);
    let mut p = Plan::default();
    to_base(allocated, Vec::new(), &mut p);
    assert_eq!(names(&p), ["a"]);
    assert!(p.decided[0].moved && p.decided[0].factor == Factor::ONE);
    assert_eq!(p.decided[0].base.refill_amount, 0);
}

/// One entity of a generated tick: its level (base a minute, max factor)
/// if opted in, its allocation in force (ppm, pending) and its minute
/// (tokens, saturated) if listed.
type Generated = (Option<(i64, i64)>, Option<(i64, bool)>, Option<(i64, bool)>);

fn generated() -> impl Strategy<Value = Generated> {
    let level = (
        prop::sample::select(vec![100, 1_000, 2_500]),
        prop::sample::select(vec![1, 2, 10, 50]),
    );
    let old = (1_000_000..50_000_000i64, any::<bool>());
    let seen = (0..20_000i64, any::<bool>());
    (
        prop::option::of(level),
        prop::option::of(old),
        prop::option::of(seen),
    )
}

/// The plan of generated entities `e0`, `e1`, ...
fn generated_plan(entities: &[Generated], to_share: f64, others: i64) -> Plan {
    let named: Vec<(String, &Generated)> = entities
        .iter()
        .enumerate()
        .map(|(i, e)| (format!("e{i}"), e))
        .collect();
    let seen: Vec<(&str, i64, bool)> = named
        .iter()
        .filter_map(|(n, (_, _, s))| s.map(|(u, sat)| (n.as_str(), u, sat)))
        .collect();
    let used = others + seen.iter().map(|s| s.1).sum::<i64>();
    let list: Vec<Entity<'_>> = named
        .iter()
        .map(|(n, (g, old, _))| {
            let g = g.map(|(base, max)| level(base, max));
            let old =
                old.and_then(|(ppm, pending)| raised(n, ppm).map(|a| Allocated { pending, ..a }));
            (n.as_str(), g, old)
        })
        .collect();
    plan(to_share, used, &listed(&seen), &list)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(zae_test_support::fuzz_cases(256)))]

    /// Whatever the minute: no allocation below base, no move above the
    /// level's ceiling, every raised entity decided once (back to base if
    /// its level no longer opts in), and nobody else unless it moved.
    #[test]
    fn no_allocation_is_below_base_and_every_raised_entity_is_decided_once(
        entities in prop::collection::vec(generated(), 1..20),
        to_share in 0.0..200_000.0f64,
        others in 0..100_000i64,
    ) {
        let p = generated_plan(&entities, to_share, others);
        let decided: BTreeMap<&str, &Decided> = p.decided.iter().map(|d| (d.report.entity.as_str(), d)).collect();
        prop_assert_eq!(decided.len(), p.decided.len(), "decided twice");
        prop_assert_eq!(&p.tick.entities, &p.decided.iter().map(|d| d.report.clone()).collect::<Vec<_>>());
        for (i, (g, old, _)) in entities.iter().enumerate() {
            let d = decided.get(format!("e{i}").as_str());
            prop_assert!(old.is_none() || d.is_some(), "e{} raised and not decided", i);
            let Some(d) = d else { continue };
            let Some((_, max)) = g else {
                prop_assert!(d.moved && d.factor == Factor::ONE && d.report.why == "not opted in");
                continue;
            };
            prop_assert!(d.report.allocation >= d.report.base, "{:?}", d);
            prop_assert!(old.is_some() || (d.moved && d.factor != Factor::ONE), "{:?}", d);
            // Raised above a ceiling since lowered too: no move above it.
            let ceiling = Factor::from_ppm(max * 1_000_000);
            prop_assert!(!d.moved || d.factor <= ceiling, "{:?}", d);
        }
    }

    /// Blind, every raised entity goes back to base, whatever was read of
    /// their levels.
    #[test]
    fn a_blind_plan_sends_every_raised_entity_back_to_base(
        raised_ppm in prop::collection::btree_map("[a-z]{1,6}", (1_000_000..50_000_000i64, any::<bool>()), 1..30),
        levels in prop::collection::vec(prop::option::of(Just(level(1_000, 10))), 0..30),
    ) {
        let allocated: BTreeMap<String, Allocated> = raised_ppm.iter().map(|(e, &(ppm, pending))| {
            (e.clone(), Allocated { pending, ..raised(e, ppm).unwrap() })
        }).collect();
        let mut p = Plan::default();
        to_base(allocated, levels, &mut p);
        prop_assert_eq!(names(&p), raised_ppm.keys().map(String::as_str).collect::<Vec<_>>());
        for d in &p.decided {
            prop_assert!(d.moved && d.factor == Factor::ONE && d.report.why == BLIND, "{:?}", d);
        }
        prop_assert_eq!(p.tick.entities.len(), raised_ppm.len());
    }
}

/// The share's own claim (docs/adaptive.md): every allocation within
/// [base, ceiling]. A level lowered under a raised entity (max 2x, the
/// entity at 10x, idle) should bring its allocation to the ceiling at once.
#[test]
fn an_entity_raised_above_a_lowered_ceiling_is_allocated_at_most_its_ceiling() {
    let p = plan(
        50_000.0,
        0,
        &listed(&[]),
        &[("idle", governed(2), raised("idle", 10_000_000))],
    );
    let d = &p.decided[0];
    assert!(d.factor <= Factor::from_ppm(2_000_000), "{d:?}");
    assert!(d.report.allocation <= 2_000.0, "{d:?}");
}

/// `EntityShare::factor`: "the factor its buckets carry after the tick".
#[test]
fn a_return_to_base_reports_the_factor_of_one_its_buckets_carry_after_the_tick() {
    let allocated = BTreeMap::from([("a".to_owned(), raised("a", 5_000_000).unwrap())]);
    let mut p = Plan::default();
    to_base(allocated, [governed(10)], &mut p);
    assert_eq!(p.tick.entities[0].factor, 1.0, "{:?}", p.tick.entities[0]);
    let demand = listed(&[]);
    let p = plan(
        50_000.0,
        0,
        &demand,
        &[("gone", None, raised("gone", 5_000_000))],
    );
    assert_eq!(p.tick.entities[0].factor, 1.0, "{:?}", p.tick.entities[0]);
}
