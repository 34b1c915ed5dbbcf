//! Reading a parsed YAML tree: typed look-ups that report what they found
//! instead of failing, for every part of the manifest's validation.

use super::problem::{Path, Problem};
use yaml_serde::Value as Tree;

/// A map's entries with string keys; anything else is reported.
pub fn mapping<'t>(
    tree: &'t Tree,
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Option<Vec<(String, &'t Tree)>> {
    match tree {
        Tree::Mapping(map) => {
            let mut entries = Vec::with_capacity(map.len());
            for (key, value) in map {
                match scalar_text(key) {
                    Some(key) => entries.push((key, value)),
                    None => problems.push(Problem::new(path, "keys must be strings")),
                }
            }
            Some(entries)
        }
        Tree::Null => Some(Vec::new()),
        other => {
            problems.push(Problem::new(
                path,
                format!("must be a mapping, got {}", type_name(other)),
            ));
            None
        }
    }
}

/// A key's text. A manifest read from YAML text has every scalar key in
/// its written spelling already (`written`); this covers trees built
/// otherwise.
fn scalar_text(tree: &Tree) -> Option<String> {
    match tree {
        Tree::String(s) => Some(s.clone()),
        Tree::Number(n) => Some(n.to_string()),
        Tree::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub fn type_name(tree: &Tree) -> &'static str {
    match tree {
        Tree::Null => "null",
        Tree::Bool(_) => "boolean",
        Tree::Number(n) if n.is_f64() => "float",
        Tree::Number(_) => "integer",
        Tree::String(_) => "string",
        Tree::Sequence(_) => "list",
        Tree::Mapping(_) => "mapping",
        Tree::Tagged(_) => "tagged value",
    }
}

pub fn describe(tree: &Tree) -> String {
    match tree {
        Tree::String(s) => format!("'{s}'"),
        Tree::Number(n) => n.to_string(),
        Tree::Bool(b) => b.to_string(),
        other => type_name(other).to_owned(),
    }
}

pub fn reject_unknown(
    entries: &[(String, &Tree)],
    allowed: &[&str],
    path: &Path,
    problems: &mut Vec<Problem>,
) {
    let mut unknown: Vec<&str> = entries
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !allowed.contains(k))
        .collect();
    unknown.sort();
    if !unknown.is_empty() {
        let named: Vec<String> = unknown
            .iter()
            .map(
                |k| match crate::suggest::closest(k, allowed.iter().copied()) {
                    Some(near) => format!("{k} (did you mean {near}?)"),
                    None => (*k).to_owned(),
                },
            )
            .collect();
        problems.push(Problem::new(
            path,
            format!(
                "unknown field(s) {}; allowed: {}",
                named.join(", "),
                allowed.join(", ")
            ),
        ));
    }
}

/// A field's value; an explicit null (`capacity:` with nothing after it, or
/// an empty CloudFormation string) counts as absent.
pub fn get<'t>(entries: &[(String, &'t Tree)], key: &str) -> Option<&'t Tree> {
    entries
        .iter()
        .find(|(k, v)| k == key && !matches!(v, Tree::Null))
        .map(|(_, v)| *v)
}

/// A whole number; whole-valued floats such as `1000.0` are taken as integers.
pub fn whole(tree: &Tree) -> Option<i64> {
    match tree {
        Tree::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        _ => None,
    }
}
