//! Property tests of the manifest parser and the CloudFormation coercion:
//! generated manifests (levels, limit names, numbers in and out of range,
//! floats, strings, recovery rules) go in through both doors, YAML and
//! CloudFormation properties (every scalar a string, as CloudFormation sends
//! them). Each must parse exactly when an independent oracle says it is
//! valid, to the same manifest through either door, and otherwise fail with
//! a problem at the path of every field the oracle finds wrong. Cases:
//! `ZAE_FUZZ_CASES`, as for the other properties (`scripts/fuzz.sh`).

use super::problem::{Path, Spelling};
use super::stack::{parse_properties, to_manifest_tree};
use super::{Manifest, Tree};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};
use zae_table::config::{MAX_PERIOD_SECONDS, MAX_TOKENS};

/// A generated field value and whether the field's own bounds admit it.
#[derive(Debug, Clone)]
struct Number {
    yaml: Value,
    /// The same value as CloudFormation sends it.
    cfn: String,
    whole: Option<i64>,
}

fn number(min: i64, max: i64) -> impl Strategy<Value = Number> {
    let whole = |n: i64| Number {
        yaml: json!(n),
        cfn: n.to_string(),
        whole: Some(n),
    };
    prop_oneof![
        4 => (min..=max).prop_map(whole),
        1 => Just(min.saturating_sub(1)).prop_map(whole),
        1 => Just(max.saturating_add(1)).prop_map(whole),
        1 => any::<i64>().prop_map(whole),
        1 => (1u32..1000).prop_map(|n| Number {
            yaml: json!(n as f64 + 0.5),
            cfn: format!("{n}.5"),
            whole: None,
        }),
        1 => "[a-z]{1,6}".prop_map(|s| Number {
            yaml: json!(s),
            cfn: s,
            whole: None,
        }),
        1 => Just(Number {
            yaml: json!("99999999999999999999999"),
            cfn: "99999999999999999999999".into(),
            whole: None,
        }),
    ]
}

#[derive(Debug, Clone)]
struct Limit {
    capacity: Number,
    refill_amount: Option<Number>,
    refill_period: Option<Number>,
    reset_after_seconds: Option<Number>,
    soft: Option<bool>,
}

fn limit() -> impl Strategy<Value = Limit> {
    (
        number(1, MAX_TOKENS),
        proptest::option::weighted(0.4, number(0, MAX_TOKENS)),
        proptest::option::weighted(0.4, number(1, MAX_PERIOD_SECONDS)),
        proptest::option::weighted(0.2, number(1, MAX_PERIOD_SECONDS)),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(
            |(capacity, refill_amount, refill_period, reset_after_seconds, soft)| Limit {
                capacity,
                refill_amount,
                refill_period,
                reset_after_seconds,
                soft,
            },
        )
}

/// Limit names the client accepts and the snapshot layout can record.
fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,6}".prop_filter("a snapshot attribute", |n| {
        !zae_table::snapshot::collides(n)
    })
}

type Limits = BTreeMap<String, Limit>;

#[derive(Debug, Clone)]
struct Generated {
    system: Option<Limits>,
    resources: BTreeMap<String, Limits>,
    entities: BTreeMap<String, BTreeMap<String, Limits>>,
}

fn limits() -> impl Strategy<Value = Limits> {
    proptest::collection::btree_map(name(), limit(), 1..3)
}

fn generated() -> impl Strategy<Value = Generated> {
    let resource = prop_oneof![Just("_default_".to_owned()), "model-[a-c]"];
    (
        proptest::option::of(limits()),
        proptest::collection::btree_map("model-[a-c]", limits(), 0..3),
        proptest::collection::btree_map(
            "user-[0-9]{1,2}",
            proptest::collection::btree_map(resource, limits(), 1..3),
            0..3,
        ),
    )
        .prop_map(|(system, resources, entities)| Generated {
            system,
            resources,
            entities,
        })
}

/// The oracle: the paths (YAML spelling) of every field wrong in a limit,
/// by the manifest's documented rules, written here apart from the parser.
fn wrong_fields(limit: &Limit, at: &Path) -> Vec<String> {
    let bad = |n: &Number, min: i64, max: i64| n.whole.is_none_or(|v| v < min || v > max);
    let mut wrong = Vec::new();
    let fields = [
        ("capacity", Some(&limit.capacity), 1, MAX_TOKENS),
        ("refill_amount", limit.refill_amount.as_ref(), 0, MAX_TOKENS),
        (
            "refill_period",
            limit.refill_period.as_ref(),
            1,
            MAX_PERIOD_SECONDS,
        ),
        (
            "reset_after_seconds",
            limit.reset_after_seconds.as_ref(),
            1,
            MAX_PERIOD_SECONDS,
        ),
    ];
    for (field, value, min, max) in fields {
        if value.is_some_and(|n| bad(n, min, max)) {
            wrong.push(at.field(field).to_string());
        }
    }
    if !wrong.is_empty() {
        return wrong;
    }
    // One recovery mechanism: a drip, or a reset window, never both, never none.
    let resets = limit.reset_after_seconds.is_some();
    let drip = match &limit.refill_amount {
        Some(n) => n.whole.unwrap_or(0),
        None if resets => 0,
        None => limit.capacity.whole.unwrap_or(0),
    };
    if (drip == 0) != resets {
        wrong.push(at.field("refill_amount").to_string());
    }
    wrong
}

fn levels(g: &Generated) -> Vec<(Path, &Limits)> {
    let root = Path::root();
    let mut out = Vec::new();
    if let Some(system) = &g.system {
        out.push((root.field("system").field("limits"), system));
    }
    for (resource, limits) in &g.resources {
        let at = root.field("resources").key(resource).field("limits");
        out.push((at, limits));
    }
    for (entity, resources) in &g.entities {
        for (resource, limits) in resources {
            let at = root
                .field("entities")
                .key(entity)
                .field("resources")
                .key(resource)
                .field("limits");
            out.push((at, limits));
        }
    }
    out
}

fn oracle(g: &Generated) -> BTreeSet<String> {
    levels(g)
        .into_iter()
        .flat_map(|(at, limits)| {
            limits
                .iter()
                .flat_map(move |(name, limit)| wrong_fields(limit, &at.key(name)))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A limit in either spelling: YAML values, or CloudFormation strings.
fn limit_doc(limit: &Limit, cfn: bool) -> Value {
    let field = |name: &str| match cfn {
        true => super::problem::pascal(name),
        false => name.to_owned(),
    };
    let value = |n: &Number| match cfn {
        true => json!(n.cfn),
        false => n.yaml.clone(),
    };
    let mut doc = Map::new();
    doc.insert(field("capacity"), value(&limit.capacity));
    for (name, n) in [
        ("refill_amount", &limit.refill_amount),
        ("refill_period", &limit.refill_period),
        ("reset_after_seconds", &limit.reset_after_seconds),
    ] {
        if let Some(n) = n {
            doc.insert(field(name), value(n));
        }
    }
    if let Some(soft) = limit.soft {
        let soft = if cfn {
            json!(soft.to_string())
        } else {
            json!(soft)
        };
        doc.insert(field("soft"), soft);
    }
    Value::Object(doc)
}

fn document(g: &Generated, cfn: bool) -> Value {
    let field = |name: &str| match cfn {
        true => super::problem::pascal(name),
        false => name.to_owned(),
    };
    let limits_doc = |limits: &Limits| {
        let mut level = Map::new();
        let named = limits
            .iter()
            .map(|(n, l)| (n.clone(), limit_doc(l, cfn)))
            .collect();
        level.insert(field("limits"), Value::Object(named));
        Value::Object(level)
    };
    let mut doc = Map::new();
    if !cfn {
        doc.insert("namespace".into(), json!("default"));
    }
    if let Some(system) = &g.system {
        doc.insert(field("system"), limits_doc(system));
    }
    let resources: Map<String, Value> = g
        .resources
        .iter()
        .map(|(r, l)| (r.clone(), limits_doc(l)))
        .collect();
    if !resources.is_empty() {
        doc.insert(field("resources"), Value::Object(resources));
    }
    let entities: Map<String, Value> = g
        .entities
        .iter()
        .map(|(e, rs)| {
            let rs: Map<String, Value> =
                rs.iter().map(|(r, l)| (r.clone(), limits_doc(l))).collect();
            (e.clone(), json!({ field("resources"): rs }))
        })
        .collect();
    if !entities.is_empty() {
        doc.insert(field("entities"), Value::Object(entities));
    }
    Value::Object(doc)
}

fn through_yaml(g: &Generated) -> Result<Manifest, BTreeSet<String>> {
    let tree: Tree = yaml_serde::to_value(document(g, false)).expect("a document");
    Manifest::parse(&tree, Spelling::Yaml).map_err(|invalid| {
        invalid
            .problems
            .iter()
            .map(|p| p.path.to_string())
            .collect()
    })
}

fn through_cloudformation(g: &Generated) -> Result<Manifest, BTreeSet<String>> {
    let paths = |problems: Vec<super::problem::Problem>| -> BTreeSet<String> {
        problems.iter().map(|p| p.path.to_string()).collect()
    };
    let properties: Tree = yaml_serde::to_value(document(g, true)).expect("properties");
    parse_properties(&properties, "default").map_err(|invalid| paths(invalid.problems))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(zae_test_support::fuzz_cases(256)))]

    #[test]
    fn a_manifest_parses_exactly_when_valid_and_alike_through_both_doors(g in generated()) {
        let wrong = oracle(&g);
        let yaml = through_yaml(&g);
        let cfn = through_cloudformation(&g);
        match (&yaml, &cfn) {
            (Ok(a), Ok(b)) => {
                prop_assert!(wrong.is_empty(), "accepted, but wrong at {wrong:?}");
                prop_assert_eq!(a, b);
                let declared = levels(&g).iter().map(|(_, l)| l.len()).sum::<usize>();
                let parsed: usize = a.declared().iter().map(|(_, d)| d.limits.len()).sum();
                prop_assert_eq!(parsed, declared);
                // Every declared level becomes a config item without overflow.
                for (_, decl) in a.declared() {
                    let _ = decl.config();
                }
            }
            (Err(a), Err(b)) => {
                prop_assert!(!wrong.is_empty(), "refused at {a:?}, but valid");
                prop_assert_eq!(a, b, "both doors name the same paths");
                for path in &wrong {
                    prop_assert!(a.contains(path), "{path} not reported: {a:?}");
                }
            }
            _ => prop_assert!(false, "the doors disagree: {yaml:?} / {cfn:?}"),
        }
    }

    #[test]
    fn any_text_is_a_manifest_or_problems_never_a_panic(text in ".{0,200}") {
        if let Err(invalid) = Manifest::from_yaml(&text) {
            prop_assert!(!invalid.problems.is_empty());
            prop_assert!(invalid.problems.iter().all(|p| !p.message.is_empty()));
        }
    }

    #[test]
    fn any_property_tree_coerces_or_names_its_problems(
        key in "[A-Z][a-z]{0,8}",
        value in prop_oneof![".{0,20}".prop_map(Value::from), any::<i64>().prop_map(Value::from), Just(Value::Null)],
    ) {
        let properties: Tree = yaml_serde::to_value(json!({
            "System": {"Limits": {"rpm": {key.clone(): value.clone()}}},
            "Resources": {"gpt-4": {key: value}},
        })).unwrap();
        if let Err(problems) = to_manifest_tree(&properties, "default") {
            prop_assert!(!problems.is_empty());
        }
    }
}
