//! CloudFormation's spelling of a manifest: PascalCase properties whose every
//! scalar arrives as a string. [`to_manifest_tree`] coerces each one to the
//! type its field needs and hands back the YAML form, so one validator serves
//! both entrances.

use crate::path::{Path, Problem, pascal};
use serde_norway::{Mapping, Number, Value as Tree};

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
]);
const LEVEL: Shape = Shape::Struct(&[
    ("limits", Shape::MapOf(&LIMIT)),
    ("disabled", Shape::Disabled),
    ("cascade", Shape::Bool),
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
    if problems.is_empty() {
        Ok(Tree::Mapping(out))
    } else {
        Err(problems)
    }
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
    let text = match value {
        Tree::String(s) => Some(s.trim()),
        _ => None,
    };
    match shape {
        Shape::Int => match (value, text) {
            (Tree::Number(n), _) if n.is_i64() || n.is_u64() => value.clone(),
            (_, Some("")) => Tree::Null,
            (_, Some(t)) => match t.parse::<i64>() {
                Ok(n) => Tree::Number(n.into()),
                Err(_) => {
                    problems.push(Problem::new(
                        path,
                        format!("must be a whole number, got '{t}'. {STRINGLY}"),
                    ));
                    Tree::Null
                }
            },
            // Left for the validator, which names the type it got.
            _ => value.clone(),
        },
        Shape::Float => match (value, text) {
            (Tree::Number(_), _) => value.clone(),
            (_, Some("")) => Tree::Null,
            (_, Some(t)) => match t.parse::<f64>() {
                Ok(f) if f.is_finite() => Tree::Number(Number::from(f)),
                _ => {
                    problems.push(Problem::new(
                        path,
                        format!("must be a finite number, got '{t}'. {STRINGLY}"),
                    ));
                    Tree::Null
                }
            },
            _ => value.clone(),
        },
        Shape::Bool | Shape::Disabled => match text.map(str::to_ascii_lowercase).as_deref() {
            Some("true") => Tree::Bool(true),
            Some("false") => Tree::Bool(false),
            Some("bypass") if matches!(shape, Shape::Disabled) => Tree::String("bypass".into()),
            Some(_) => {
                let expected = if matches!(shape, Shape::Disabled) {
                    "true, false or 'bypass'"
                } else {
                    "true or false"
                };
                problems.push(Problem::new(
                    path,
                    format!("must be {expected}, got {}. {STRINGLY}", describe(value)),
                ));
                Tree::Null
            }
            None => value.clone(),
        },
        Shape::Str => value.clone(),
        Shape::Struct(fields) => match value {
            Tree::Mapping(map) => {
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
            _ => value.clone(),
        },
        Shape::MapOf(inner) => match value {
            Tree::Mapping(map) => Tree::Mapping(
                map.iter()
                    .map(|(key, item)| {
                        let name = key.as_str().unwrap_or_default();
                        (key.clone(), coerce(item, *inner, &path.key(name), problems))
                    })
                    .collect(),
            ),
            _ => value.clone(),
        },
        Shape::ListOf(inner) => match value {
            Tree::Sequence(items) => Tree::Sequence(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| coerce(item, *inner, &path.index(i), problems))
                    .collect(),
            ),
            _ => value.clone(),
        },
    }
}

fn describe(value: &Tree) -> String {
    match value {
        Tree::String(s) => format!("'{s}'"),
        other => crate::manifest::type_name(other).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{Disabled, Manifest};
    use crate::path::Spelling;

    fn props(yaml: &str) -> Tree {
        serde_norway::from_str(yaml).unwrap()
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
        assert_eq!((tpm.capacity, tpm.refill_amount, tpm.soft), (50_000, 50_000, true));
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
        assert!(
            problems[0]
                .render(Spelling::CloudFormation)
                .starts_with("Entities.u1.Resources.gpt-4.Limits.rpm.Capacity: must be a whole number, got 'lots'")
        );
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
             refill_amount, refill_period, reset_after_seconds, soft, schedule, reset_schedule"
        );
    }
}
