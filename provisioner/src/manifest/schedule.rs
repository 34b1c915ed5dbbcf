//! Schedule entries in a manifest: parsed and validated at their paths,
//! then stored in the client's compact encoding (`zae_table::schedule`).

use super::problem::{Path, Problem};
use super::tree::type_name;
use yaml_serde::{Mapping, Value as Tree};
use zae_table::config::{MAX_PERIOD_SECONDS, MAX_TOKENS};
use zae_table::schedule::{MAX_SCALE, ScheduleEntry, check_cron, fires_every_minute};

const ENTRY_FIELDS: [&str; 6] = [
    "cron",
    "tz",
    "scale",
    "capacity",
    "refill_amount",
    "refill_period_seconds",
];

/// Parses a `schedule` (or, with `reset`, a `reset_schedule`) list.
pub fn parse_entries(
    tree: Option<&Tree>,
    path: &Path,
    reset: bool,
    problems: &mut Vec<Problem>,
) -> Vec<ScheduleEntry> {
    let items = match tree {
        None | Some(Tree::Null) => return Vec::new(),
        Some(Tree::Sequence(items)) => items,
        Some(other) => {
            problems.push(Problem::new(
                path,
                format!("must be a list of entries, got {}", type_name(other)),
            ));
            return Vec::new();
        }
    };
    let mut entries = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = path.index(i);
        let Tree::Mapping(map) = item else {
            problems.push(Problem::new(
                &path,
                format!("must be a mapping, got {}", type_name(item)),
            ));
            continue;
        };
        if let Some(entry) = parse_entry(map, &path, reset, problems) {
            entries.push(entry);
        }
    }
    entries
}

/// One entry; `None` (with its problems recorded) when anything is wrong.
fn parse_entry(
    map: &Mapping,
    path: &Path,
    reset: bool,
    problems: &mut Vec<Problem>,
) -> Option<ScheduleEntry> {
    if !known_fields(map, path, reset, problems) {
        return None;
    }
    let field = |name: &str| map.get(name).filter(|v| !matches!(v, Tree::Null));
    let before = problems.len();
    let tz = timezone(field("tz"), &path.field("tz"), problems);
    let cron = cron(field("cron"), &path.field("cron"), problems);
    let scale = scale(field("scale"), &path.field("scale"), problems);
    let mut absolute = |name: &'static str, max: i64| {
        field(name).and_then(|tree| absolute(tree, max, &path.field(name), problems))
    };
    let capacity = absolute("capacity", MAX_TOKENS);
    let refill_amount = absolute("refill_amount", MAX_TOKENS);
    let refill_period_seconds = absolute("refill_period_seconds", MAX_PERIOD_SECONDS);
    let has_absolute = ["capacity", "refill_amount", "refill_period_seconds"]
        .iter()
        .any(|name| field(name).is_some());
    if reset && problems.len() == before && fires_every_minute(&cron) {
        problems.push(Problem::new(
            &path.field("cron"),
            "a reset entry matching every minute would reset the balance continuously \
             (and the client cannot read it back)",
        ));
    }
    if !reset && field("scale").is_some() == has_absolute {
        problems.push(Problem::new(
            path,
            "must set exactly one of `scale` or the absolute fields \
             (`capacity`/`refill_amount`/`refill_period_seconds`)",
        ));
    }
    (problems.len() == before).then_some(ScheduleEntry {
        cron,
        tz,
        scale,
        capacity,
        refill_amount,
        refill_period_seconds,
    })
}

/// Whether every field is one the entry may have; reports the others.
fn known_fields(map: &Mapping, path: &Path, reset: bool, problems: &mut Vec<Problem>) -> bool {
    let allowed: &[&str] = if reset {
        &ENTRY_FIELDS[..2]
    } else {
        &ENTRY_FIELDS
    };
    let mut unknown: Vec<String> = map
        .keys()
        .map(|k| {
            k.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{k:?}"))
        })
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    unknown.sort();
    if unknown.is_empty() {
        return true;
    }
    let hint = if reset {
        "; a reset entry carries `cron` and `tz` only: it names the instant the \
         balance goes back to capacity and overrides no parameters"
    } else {
        ""
    };
    problems.push(Problem::new(
        path,
        format!(
            "unknown field(s) {}; allowed: {}{hint}",
            unknown.join(", "),
            allowed.join(", ")
        ),
    ));
    false
}

fn timezone(tree: Option<&Tree>, path: &Path, problems: &mut Vec<Problem>) -> String {
    match tree {
        None => "UTC".to_owned(),
        Some(Tree::String(tz)) => {
            if tz.parse::<chrono_tz::Tz>().is_err() {
                problems.push(Problem::new(
                    path,
                    format!("unknown timezone '{tz}'; use an IANA name such as Europe/Berlin"),
                ));
            }
            tz.clone()
        }
        Some(other) => {
            problems.push(Problem::new(
                path,
                format!("must be a string, got {}", type_name(other)),
            ));
            String::new()
        }
    }
}

fn cron(tree: Option<&Tree>, path: &Path, problems: &mut Vec<Problem>) -> String {
    match tree {
        Some(Tree::String(cron)) => {
            if let Err(reason) = check_cron(cron) {
                problems.push(Problem::new(path, reason));
            }
            cron.clone()
        }
        None => {
            problems.push(Problem::new(path, "is required"));
            String::new()
        }
        Some(other) => {
            problems.push(Problem::new(
                path,
                format!("must be a string, got {}", type_name(other)),
            ));
            String::new()
        }
    }
}

fn scale(tree: Option<&Tree>, path: &Path, problems: &mut Vec<Problem>) -> Option<f64> {
    let problem = match tree? {
        Tree::Number(n) => match n.as_f64()? {
            s if s.is_finite() && s > 0.0 && s <= MAX_SCALE => return Some(s),
            s if !s.is_finite() => format!("must be a finite number, got {s}"),
            s => format!("must be above 0 and at most {MAX_SCALE}, got {s}"),
        },
        other => format!("must be a number, got {}", type_name(other)),
    };
    problems.push(Problem::new(path, problem));
    None
}

/// An absolute parameter: a whole number above 0 and at most `max`.
fn absolute(tree: &Tree, max: i64, path: &Path, problems: &mut Vec<Problem>) -> Option<i64> {
    let integer = match tree {
        Tree::Number(n) => n.as_i64(),
        _ => None,
    };
    let problem = match integer {
        Some(v) if v > 0 && v <= max => return Some(v),
        Some(v) => format!("must be above 0 and at most {max}, got {v}"),
        None => {
            let got = match tree {
                Tree::Number(n) => n.to_string(),
                other => type_name(other).to_owned(),
            };
            format!("must be a whole number, got {got}")
        }
    };
    problems.push(Problem::new(path, problem));
    None
}
