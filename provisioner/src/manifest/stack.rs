//! CloudFormation's spelling of a manifest: PascalCase properties whose every
//! scalar arrives as a string. [`to_manifest_tree`] coerces each one to the
//! type its field needs and hands back the YAML form, so one validator serves
//! both entrances; [`cfn_template`] goes the other way, from a manifest to a
//! tenant stack.

use super::problem::{Invalid, Path, Problem, Spelling, pascal};
use super::tree::describe;
use super::{Disabled, LevelDecl, LimitDecl, Manifest};
use yaml_serde::{Mapping, Number, Value as Tree};
use zae_table::schedule::ScheduleEntry;

#[derive(Debug, Clone, Copy)]
enum Shape {
    Int,
    Float,
    Bool,
    /// `true`, `false` or `bypass`, in any case.
    Disabled,
    Str,
    Struct(&'static [(&'static str, Shape)]),
    /// A map of user-named keys (resources, entities, limits).
    MapOf(&'static Shape),
    ListOf(&'static Shape),
}

const ENTRY: Shape = Shape::Struct(&[
    ("cron", Shape::Str),
    ("tz", Shape::Str),
    ("scale", Shape::Float),
    ("capacity", Shape::Int),
    ("refill_amount", Shape::Int),
    ("refill_period_seconds", Shape::Int),
]);
const LIMIT: Shape = Shape::Struct(&[
    ("capacity", Shape::Int),
    ("burst", Shape::Int),
    ("refill_amount", Shape::Int),
    ("refill_period", Shape::Int),
    ("reset_after_seconds", Shape::Int),
    ("soft", Shape::Bool),
    ("schedule", Shape::ListOf(&ENTRY)),
    ("reset_schedule", Shape::ListOf(&ENTRY)),
    ("adaptive", Shape::Str),
    ("max_scale", Shape::Float),
]);
const INT: Shape = Shape::Int;
const FLOAT: Shape = Shape::Float;
const LEVEL: Shape = Shape::Struct(&[
    ("limits", Shape::MapOf(&LIMIT)),
    ("disabled", Shape::Disabled),
    ("cascade", Shape::Bool),
    ("estimated_capacity", Shape::MapOf(&INT)),
    ("target_utilization", Shape::MapOf(&FLOAT)),
    ("share", Shape::Str),
]);
// `cascade` and `disabled` are coerced here so the validator can reject them
// at the system level with its own message.
const SYSTEM: Shape = Shape::Struct(&[
    ("limits", Shape::MapOf(&LIMIT)),
    ("on_unavailable", Shape::Str),
    ("cascade", Shape::Bool),
    ("disabled", Shape::Bool),
]);
const ENTITY: Shape = Shape::Struct(&[("resources", Shape::MapOf(&LEVEL))]);

const MANIFEST_SECTIONS: [(&str, Shape); 3] = [
    ("system", SYSTEM),
    ("resources", Shape::MapOf(&LEVEL)),
    ("entities", Shape::MapOf(&ENTITY)),
];

/// The manifest tree for `namespace` from a custom resource's properties.
/// Top-level properties other than the sections (`ServiceToken`,
/// `ServiceTimeout`, `TableName`…) are the caller's business.
pub fn to_manifest_tree(properties: &Tree, namespace: &str) -> Result<Tree, Vec<Problem>> {
    let (tree, problems) = coerce_manifest(properties, namespace);
    if problems.is_empty() {
        Ok(tree)
    } else {
        Err(problems)
    }
}

/// The manifest a custom resource declares, or every problem in it: the
/// strings that do not spell their field's type, and whatever the validator
/// finds elsewhere (a value that cannot be coerced is left as it came, so the
/// validator skips the rules that depend on it).
pub fn parse_properties(properties: &Tree, namespace: &str) -> Result<Manifest, Invalid> {
    let (tree, mut problems) = coerce_manifest(properties, namespace);
    let invalid = |problems| Invalid {
        problems,
        spelling: Spelling::CloudFormation,
    };
    match Manifest::parse(&tree, Spelling::CloudFormation) {
        Ok(manifest) if problems.is_empty() => Ok(manifest),
        Ok(_) => Err(invalid(problems)),
        Err(found) => {
            let coerced: Vec<Path> = problems.iter().map(|p| p.path.clone()).collect();
            problems.extend(
                found
                    .problems
                    .into_iter()
                    .filter(|p| !coerced.contains(&p.path)),
            );
            Err(invalid(problems))
        }
    }
}

fn coerce_manifest(properties: &Tree, namespace: &str) -> (Tree, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut out = Mapping::new();
    out.insert("namespace".into(), Tree::String(namespace.to_owned()));
    if let Tree::Mapping(props) = properties {
        for (field, shape) in MANIFEST_SECTIONS {
            if let Some(value) = props.get(pascal(field).as_str()) {
                let coerced = coerce(value, shape, &Path::root().field(field), &mut problems);
                out.insert(field.into(), coerced);
            }
        }
    }
    (Tree::Mapping(out), problems)
}

/// A boolean property such as `FullApply`: a real boolean or `"true"`/`"false"`.
pub fn coerce_bool(value: &Tree, path: &Path) -> Result<bool, Problem> {
    let mut problems = Vec::new();
    match coerce(value, Shape::Bool, path, &mut problems) {
        Tree::Bool(b) if problems.is_empty() => Ok(b),
        _ => Err(problems
            .pop()
            .unwrap_or_else(|| Problem::new(path, "must be true or false"))),
    }
}

const STRINGLY: &str = "CloudFormation delivers every property as a string, so write it as one \
                        that spells the value";

fn coerce(value: &Tree, shape: Shape, path: &Path, problems: &mut Vec<Problem>) -> Tree {
    match (shape, value) {
        (Shape::Struct(fields), Tree::Mapping(map)) => {
            let mut out = Mapping::new();
            for (key, item) in map {
                let key_text = key.as_str().unwrap_or_default();
                match fields.iter().find(|(name, _)| pascal(name) == key_text) {
                    Some((name, shape)) => {
                        out.insert(
                            Tree::String((*name).to_owned()),
                            coerce(item, *shape, &path.field(name), problems),
                        );
                    }
                    // Passed on under its own name, for the validator to reject.
                    None => {
                        out.insert(key.clone(), item.clone());
                    }
                }
            }
            Tree::Mapping(out)
        }
        (Shape::MapOf(inner), Tree::Mapping(map)) => Tree::Mapping(
            map.iter()
                .map(|(key, item)| {
                    let name = key.as_str().unwrap_or_default();
                    (key.clone(), coerce(item, *inner, &path.key(name), problems))
                })
                .collect(),
        ),
        (Shape::ListOf(inner), Tree::Sequence(items)) => Tree::Sequence(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| coerce(item, *inner, &path.index(i), problems))
                .collect(),
        ),
        (Shape::Int | Shape::Float | Shape::Bool | Shape::Disabled, _) => {
            coerce_scalar(value, shape, path, problems)
        }
        // Anything else is left for the validator, which names the type it got.
        _ => value.clone(),
    }
}

/// A scalar from its string; an empty string is absent.
fn coerce_scalar(value: &Tree, shape: Shape, path: &Path, problems: &mut Vec<Problem>) -> Tree {
    let Tree::String(text) = value else {
        // Left for the validator, which names the type it got.
        return value.clone();
    };
    let text = text.trim();
    let problem = match shape {
        Shape::Int | Shape::Float if text.is_empty() => return Tree::Null,
        Shape::Int => match text.parse::<i64>() {
            Ok(n) => return Tree::Number(n.into()),
            Err(_) => format!("must be a whole number, got '{text}'. {STRINGLY}"),
        },
        Shape::Float => match text.parse::<f64>() {
            Ok(f) if f.is_finite() => return Tree::Number(Number::from(f)),
            _ => format!("must be a finite number, got '{text}'. {STRINGLY}"),
        },
        _ => match text.to_ascii_lowercase().as_str() {
            "true" => return Tree::Bool(true),
            "false" => return Tree::Bool(false),
            "bypass" if matches!(shape, Shape::Disabled) => return Tree::String("bypass".into()),
            _ => {
                let expected = if matches!(shape, Shape::Disabled) {
                    "true, false or 'bypass'"
                } else {
                    "true or false"
                };
                format!("must be {expected}, got {}. {STRINGLY}", describe(value))
            }
        },
    };
    problems.push(Problem::new(path, problem));
    // As it came: the validator then passes over the rules that need it.
    value.clone()
}

fn key(name: &str) -> Tree {
    Tree::String(name.to_owned())
}

fn entry_props(entry: &ScheduleEntry, reset: bool) -> Tree {
    let mut map = Mapping::new();
    map.insert(key("Cron"), key(&entry.cron));
    map.insert(key("Tz"), key(&entry.tz));
    if !reset {
        if let Some(scale) = entry.scale {
            map.insert(key("Scale"), Tree::Number(scale.into()));
        }
        for (name, value) in [
            ("capacity", entry.capacity),
            ("refill_amount", entry.refill_amount),
            ("refill_period_seconds", entry.refill_period_seconds),
        ] {
            if let Some(value) = value {
                map.insert(key(&pascal(name)), Tree::Number(value.into()));
            }
        }
    }
    Tree::Mapping(map)
}

fn limit_props(limit: &LimitDecl) -> Tree {
    let mut map = Mapping::new();
    map.insert(key("Capacity"), Tree::Number(limit.capacity.into()));
    map.insert(
        key("RefillAmount"),
        Tree::Number(limit.refill_amount.into()),
    );
    map.insert(
        key("RefillPeriod"),
        Tree::Number(limit.refill_period.into()),
    );
    if let Some(seconds) = limit.reset_after_seconds {
        map.insert(key("ResetAfterSeconds"), Tree::Number(seconds.into()));
    }
    if limit.soft {
        map.insert(key("Soft"), Tree::Bool(true));
    }
    if let Some(adaptive) = limit.adaptive {
        map.insert(key("Adaptive"), key(adaptive.mode()));
        if let Some(scale) = adaptive.max_scale {
            map.insert(key("MaxScale"), Tree::Number(scale.as_f64().into()));
        }
    }
    if !limit.schedule.is_empty() {
        let entries = limit
            .schedule
            .iter()
            .map(|e| entry_props(e, false))
            .collect();
        map.insert(key("Schedule"), Tree::Sequence(entries));
    }
    if !limit.reset_schedule.is_empty() {
        let entries = limit
            .reset_schedule
            .iter()
            .map(|e| entry_props(e, true))
            .collect();
        map.insert(key("ResetSchedule"), Tree::Sequence(entries));
    }
    Tree::Mapping(map)
}

fn level_props(level: &LevelDecl) -> Tree {
    let mut map = Mapping::new();
    if let Some(on_unavailable) = &level.on_unavailable {
        map.insert(key("OnUnavailable"), key(on_unavailable));
    }
    match level.disabled {
        Some(Disabled::Yes) => map.insert(key("Disabled"), Tree::Bool(true)),
        Some(Disabled::No) => map.insert(key("Disabled"), Tree::Bool(false)),
        Some(Disabled::Bypass) => map.insert(key("Disabled"), key("bypass")),
        None => None,
    };
    if let Some(cascade) = level.cascade {
        map.insert(key("Cascade"), Tree::Bool(cascade));
    }
    if !level.estimated_capacity.is_empty() {
        let capacity: Mapping = level
            .estimated_capacity
            .iter()
            .map(|(limit, tpm)| (key(limit), Tree::Number((*tpm).into())))
            .collect();
        map.insert(key("EstimatedCapacity"), Tree::Mapping(capacity));
    }
    if !level.target_utilization.is_empty() {
        let target: Mapping = level
            .target_utilization
            .iter()
            .map(|(limit, ppm)| {
                let share = *ppm as f64 / zae_table::adaptive::factor::PPM as f64;
                (key(limit), Tree::Number(share.into()))
            })
            .collect();
        map.insert(key("TargetUtilization"), Tree::Mapping(target));
    }
    if level.share_demand {
        map.insert(key("Share"), key("demand"));
    }
    let limits: Mapping = level
        .limits
        .iter()
        .map(|(name, limit)| (key(name), limit_props(limit)))
        .collect();
    map.insert(key("Limits"), Tree::Mapping(limits));
    Tree::Mapping(map)
}

/// A tenant stack holding one `Custom::ZaeLimiterLimits` resource whose
/// ServiceToken and table import `<stack>-ProvisionerArn` and
/// `<stack>-TableName` (both stacks export them; an attached stack's table is
/// not named after it).
pub fn cfn_template(manifest: &Manifest, stack: &str, full: bool) -> String {
    let import = |export: &str| {
        Tree::Mapping(Mapping::from_iter([(
            key("Fn::ImportValue"),
            key(&format!("{stack}-{export}")),
        )]))
    };
    let mut props = Mapping::new();
    props.insert(key("ServiceToken"), import("ProvisionerArn"));
    // Long enough for a large first apply, far below CloudFormation's one-hour default.
    props.insert(key("ServiceTimeout"), Tree::Number(900.into()));
    props.insert(key("TableName"), import("TableName"));
    props.insert(key("Namespace"), key(&manifest.namespace));
    if full {
        props.insert(key("FullApply"), Tree::Bool(true));
    }
    if let Some(system) = &manifest.system {
        props.insert(key("System"), level_props(system));
    }
    if !manifest.resources.is_empty() {
        let resources: Mapping = manifest
            .resources
            .iter()
            .map(|(name, level)| (key(name), level_props(level)))
            .collect();
        props.insert(key("Resources"), Tree::Mapping(resources));
    }
    if !manifest.entities.is_empty() {
        let entities: Mapping = manifest
            .entities
            .iter()
            .map(|(entity, resources)| {
                let resources: Mapping = resources
                    .iter()
                    .map(|(name, level)| (key(name), level_props(level)))
                    .collect();
                (
                    key(entity),
                    Tree::Mapping(Mapping::from_iter([(
                        key("Resources"),
                        Tree::Mapping(resources),
                    )])),
                )
            })
            .collect();
        props.insert(key("Entities"), Tree::Mapping(entities));
    }
    let mut resource = Mapping::new();
    resource.insert(key("Type"), key("Custom::ZaeLimiterLimits"));
    resource.insert(key("Properties"), Tree::Mapping(props));
    let mut template = Mapping::new();
    template.insert(key("AWSTemplateFormatVersion"), key("2010-09-09"));
    template.insert(
        key("Description"),
        key(&format!(
            "Declarative limits for namespace '{}'",
            manifest.namespace
        )),
    );
    template.insert(
        key("Resources"),
        Tree::Mapping(Mapping::from_iter([(
            key("TenantLimits"),
            Tree::Mapping(resource),
        )])),
    );
    cfn_yaml(&Tree::Mapping(template))
}

/// YAML as CloudFormation reads it, which is YAML 1.1: a string is written
/// plain only when no YAML 1.1 reader can take it for something else (`yes`,
/// `on`, `y` are booleans there, and a YAML 1.2 writer leaves them plain),
/// double-quoted otherwise.
pub fn cfn_yaml(tree: &Tree) -> String {
    let mut out = String::new();
    emit_block(tree, 0, &mut out);
    out
}

fn emit_block(tree: &Tree, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match tree {
        Tree::Mapping(map) => {
            for (k, v) in map {
                out.push_str(&format!("{pad}{}:", inline(k).unwrap_or_default()));
                emit_child(v, indent, out);
            }
        }
        Tree::Sequence(items) => {
            for item in items {
                out.push_str(&format!("{pad}-"));
                emit_child(item, indent, out);
            }
        }
        scalar => out.push_str(&format!("{pad}{}\n", inline(scalar).unwrap_or_default())),
    }
}

fn emit_child(value: &Tree, indent: usize, out: &mut String) {
    match inline(value) {
        Some(text) => out.push_str(&format!(" {text}\n")),
        None => {
            out.push('\n');
            emit_block(value, indent + 2, out);
        }
    }
}

/// A value that fits on its line: scalars and empty collections.
fn inline(tree: &Tree) -> Option<String> {
    Some(match tree {
        Tree::Null => "null".to_owned(),
        Tree::Bool(b) => b.to_string(),
        Tree::Number(n) => n.to_string(),
        Tree::String(s) if plain_in_yaml_1_1(s) => s.clone(),
        Tree::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Tree::Mapping(m) if m.is_empty() => "{}".to_owned(),
        Tree::Sequence(s) if s.is_empty() => "[]".to_owned(),
        _ => return None,
    })
}

/// Letters first, then letters, digits and `_-./:`, and none of YAML 1.1's
/// boolean or null words.
fn plain_in_yaml_1_1(s: &str) -> bool {
    const WORDS: [&str; 9] = ["y", "n", "yes", "no", "on", "off", "true", "false", "null"];
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:".contains(c))
        && !s.ends_with(':')
        && !WORDS.contains(&s.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::problem::Spelling;

    fn props(yaml: &str) -> Tree {
        yaml_serde::from_str(yaml).unwrap()
    }

    #[test]
    fn stringly_properties_become_the_declared_manifest() {
        let tree = to_manifest_tree(
            &props(
                r#"
ServiceToken: arn:aws:lambda:x
Resources:
  gpt-4:
    Cascade: "TRUE"
    Disabled: Bypass
    Limits:
      tpm: {Capacity: "50000", RefillPeriod: "60", Soft: "true"}
      rpm: {Capacity: "500", RefillAmount: ""}
      day:
        Capacity: "100"
        ResetSchedule: [{Cron: "0 0 * * *", Tz: UTC}]
"#,
            ),
            "tenant",
        )
        .unwrap();
        let manifest = Manifest::parse(&tree, Spelling::CloudFormation).unwrap();
        let (name, level) = &manifest.resources[0];
        assert_eq!(name, "gpt-4");
        assert_eq!(level.cascade, Some(true));
        assert_eq!(level.disabled, Some(Disabled::Bypass));
        let tpm = &level.limits[0].1;
        assert_eq!(
            (tpm.capacity, tpm.refill_amount, tpm.soft),
            (50_000, 50_000, true)
        );
        assert_eq!(level.limits[1].1.refill_amount, 500);
        assert_eq!(level.limits[2].1.refill_amount, 0);
    }

    #[test]
    fn a_bad_string_names_its_property_path() {
        let problems = to_manifest_tree(
            &props("Entities: {u1: {Resources: {gpt-4: {Limits: {rpm: {Capacity: lots}}}}}}"),
            "tenant",
        )
        .unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].render(Spelling::CloudFormation).starts_with(
            "Entities.u1.Resources.gpt-4.Limits.rpm.Capacity: must be a whole number, got 'lots'"
        ));
    }

    #[test]
    fn a_bad_string_and_every_other_problem_are_reported_together() {
        let invalid = parse_properties(
            &props("Resources: {gpt-4: {Limits: {rpm: {Capacity: lots}, tpm: {Capacity: '0'}}}}"),
            "tenant",
        )
        .unwrap_err();
        let rendered: Vec<String> = invalid
            .problems
            .iter()
            .map(|p| p.render(Spelling::CloudFormation))
            .collect();
        assert_eq!(rendered.len(), 2, "{rendered:?}");
        assert!(rendered[0].starts_with(
            "Resources.gpt-4.Limits.rpm.Capacity: must be a whole number, got 'lots'"
        ));
        assert!(rendered[1].starts_with("Resources.gpt-4.Limits.tpm.Capacity: must be positive"));
    }

    #[test]
    fn unknown_properties_reach_the_validator_under_their_own_name() {
        let tree = to_manifest_tree(
            &props("Resources: {gpt-4: {Limits: {tpm: {Capacity: '1', Sotf: 'true'}}}}"),
            "tenant",
        )
        .unwrap();
        let err = Manifest::parse(&tree, Spelling::CloudFormation).unwrap_err();
        assert_eq!(
            err.problems[0].render(Spelling::CloudFormation),
            "Resources.gpt-4.Limits.tpm: unknown field(s) Sotf; allowed: capacity, burst, \
             refill_amount, refill_period, reset_after_seconds, soft, schedule, reset_schedule, \
             adaptive, max_scale"
        );
    }

    #[test]
    fn a_printed_template_round_trips_through_the_property_coercion() {
        let manifest = Manifest::from_yaml(
            r#"
namespace: tenant-alpha
system: {on_unavailable: block, limits: {rpm: {capacity: 10000}}}
resources:
  gpt-4:
    cascade: true
    disabled: bypass
    limits:
      tpm: {capacity: 50000, soft: true, schedule: [{cron: "* 9-17 * * 1-5", tz: Europe/Berlin, scale: 0.5}]}
      day: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: Europe/Berlin}]}
entities:
  user-1: {resources: {_default_: {disabled: false}, gpt-4: {limits: {s: {capacity: 5, reset_after_seconds: 60}}}}}
"#,
        )
        .unwrap();
        let text = cfn_template(&manifest, "rate-limits", true);
        let template: Tree = yaml_serde::from_str(&text).unwrap();
        let props = &template["Resources"]["TenantLimits"]["Properties"];
        assert_eq!(
            props["ServiceToken"]["Fn::ImportValue"],
            key("rate-limits-ProvisionerArn")
        );
        assert_eq!(props["FullApply"], Tree::Bool(true));
        let tree = to_manifest_tree(props, "tenant-alpha").unwrap();
        assert_eq!(
            Manifest::parse(&tree, Spelling::CloudFormation).unwrap(),
            manifest
        );
    }

    #[test]
    fn names_a_yaml_1_1_reader_would_take_for_booleans_are_quoted() {
        let manifest = Manifest::from_yaml(
            "namespace: y\nresources:\n  'on':\n    limits: {rpm: {capacity: 3}}\n\
             entities:\n  'yes': {resources: {'off': {limits: {rpm: {capacity: 1}}}}}\n",
        )
        .unwrap();
        let text = cfn_template(&manifest, "rate-limits", false);
        for quoted in ["Namespace: \"y\"", "\"on\":", "\"yes\":", "\"off\":"] {
            assert!(text.contains(quoted), "{quoted} in\n{text}");
        }
        assert!(
            text.contains("ServiceTimeout: 900\n")
                && text.contains("Type: Custom::ZaeLimiterLimits\n")
        );
        let back: Tree = yaml_serde::from_str(&text).unwrap();
        let props = &back["Resources"]["TenantLimits"]["Properties"];
        let tree = to_manifest_tree(props, "y").unwrap();
        assert_eq!(
            Manifest::parse(&tree, Spelling::CloudFormation).unwrap(),
            manifest
        );
    }

    #[test]
    fn adaptive_limits_estimated_capacity_and_target_round_trip_as_strings() {
        let manifest = Manifest::from_yaml(
            r#"
namespace: tenant-alpha
system: {limits: {tpm: {capacity: 10000, refill_amount: 1000, adaptive: shadow}}}
resources:
  gpt-4:
    estimated_capacity: {tpm: 100000}
    target_utilization: {tpm: 0.75}
    share: demand
    limits: {tpm: {capacity: 50000, refill_amount: 5000, adaptive: utilization, max_scale: 2.5}}
"#,
        )
        .unwrap();
        let template: Tree =
            yaml_serde::from_str(&cfn_template(&manifest, "rate-limits", false)).unwrap();
        let props = &template["Resources"]["TenantLimits"]["Properties"];
        let gpt4 = &props["Resources"]["gpt-4"];
        assert_eq!(
            gpt4["EstimatedCapacity"]["tpm"],
            Tree::Number(100000.into())
        );
        assert_eq!(gpt4["Limits"]["tpm"]["Adaptive"], key("utilization"));
        assert_eq!(gpt4["TargetUtilization"]["tpm"], Tree::Number(0.75.into()));
        assert_eq!(gpt4["Share"], key("demand"));
        assert_eq!(props["System"]["Limits"]["tpm"]["Adaptive"], key("shadow"));
        // As CloudFormation delivers them: every scalar a string.
        let stringly = yaml_serde::to_string(props)
            .unwrap()
            .replace("100000", "'100000'")
            .replace("2.5", "'2.5'")
            .replace("0.75", "'0.75'");
        let props: Tree = yaml_serde::from_str(&stringly).unwrap();
        let tree = to_manifest_tree(&props, "tenant-alpha").unwrap();
        assert_eq!(
            Manifest::parse(&tree, Spelling::CloudFormation).unwrap(),
            manifest
        );
        let declaration = manifest.declaration();
        assert_eq!(declaration.capacity("gpt-4", "tpm"), Some(100_000));
        assert_eq!(declaration.levels.len(), 2);
        assert!(declaration.shares_by_demand("gpt-4"));
    }
}
