//! Validation of a whole manifest: every problem is collected, each at its
//! exact path, before the manifest is accepted.

use super::problem::{Path, Problem};
use super::schedule;
use super::tree::{describe, get, mapping, reject_unknown, type_name, whole};
use super::{DEFAULT_RESOURCE, Disabled, LevelDecl, LimitDecl, Manifest};
use serde_norway::Value as Tree;
use zae_table::config::{MAX_PERIOD_SECONDS, MAX_TOKENS};
use zae_table::names::{self, NameKind};

/// Names are bounded and free of the characters the table's keys use as separators.
fn check_name(kind: NameKind, name: &str, path: &Path, problems: &mut Vec<Problem>) {
    if let Err(reason) = names::check(kind, name) {
        problems.push(Problem::new(path, reason));
    }
}

pub(super) fn manifest(tree: &Tree, problems: &mut Vec<Problem>) -> Option<Manifest> {
    let root = Path::root();
    let entries = match tree {
        Tree::Mapping(_) => mapping(tree, &root, problems)?,
        other => {
            problems.push(Problem::new(
                &root,
                format!(
                    "a limits manifest must be a mapping, got {}",
                    type_name(other)
                ),
            ));
            return None;
        }
    };
    reject_unknown(
        &entries,
        &["namespace", "system", "resources", "entities"],
        &root,
        problems,
    );
    let namespace = match get(&entries, "namespace") {
        Some(Tree::String(ns)) if !ns.is_empty() => ns.clone(),
        Some(Tree::String(_)) | Some(Tree::Null) | None => {
            problems.push(Problem::new(
                &root.field("namespace"),
                "is required and must not be empty",
            ));
            String::new()
        }
        Some(other) => {
            problems.push(Problem::new(
                &root.field("namespace"),
                format!("must be a string, got {}", describe(other)),
            ));
            String::new()
        }
    };

    let system = get(&entries, "system").and_then(|tree| {
        let path = root.field("system");
        let entries = mapping(tree, &path, problems)?;
        for flag in ["cascade", "disabled"] {
            if get(&entries, flag).is_some() {
                problems.push(Problem::new(
                    &path.field(if flag == "cascade" {
                        "cascade"
                    } else {
                        "disabled"
                    }),
                    format!(
                        "'{flag}' is not supported at the system level; set it on \
                         resources.<name> or entities.<id>.resources.<name>"
                    ),
                ));
            }
        }
        reject_unknown(
            &entries,
            &["limits", "on_unavailable", "cascade", "disabled"],
            &path,
            problems,
        );
        let on_unavailable = match get(&entries, "on_unavailable") {
            None | Some(Tree::Null) => None,
            Some(Tree::String(value)) if value == "allow" || value == "block" => {
                Some(value.clone())
            }
            Some(other) => {
                problems.push(Problem::new(
                    &path.field("on_unavailable"),
                    format!("must be 'allow' or 'block', got {}", describe(other)),
                ));
                None
            }
        };
        let limits = parse_limits(get(&entries, "limits"), &path.field("limits"), problems);
        check_one_timezone(&limits, &path, problems);
        Some(LevelDecl {
            limits,
            on_unavailable,
            disabled: None,
            cascade: None,
        })
    });

    let mut resources = Vec::new();
    if let Some(tree) = get(&entries, "resources") {
        let path = root.field("resources");
        for (name, tree) in mapping(tree, &path, problems).unwrap_or_default() {
            let path = path.key(&name);
            if name == DEFAULT_RESOURCE {
                problems.push(Problem::new(
                    &path,
                    "'_default_' is an entity-level resource; declare namespace-wide defaults under `system`",
                ));
            } else {
                check_name(NameKind::Resource, &name, &path, problems);
            }
            if let Some(decl) = parse_level(tree, &path, problems) {
                resources.push((name, decl));
            }
        }
    }

    let mut entities = Vec::new();
    if let Some(tree) = get(&entries, "entities") {
        let path = root.field("entities");
        for (entity, tree) in mapping(tree, &path, problems).unwrap_or_default() {
            let path = path.key(&entity);
            check_name(NameKind::Entity, &entity, &path, problems);
            let Some(entries) = mapping(tree, &path, problems) else {
                continue;
            };
            reject_unknown(&entries, &["resources"], &path, problems);
            let mut levels = Vec::new();
            if let Some(tree) = get(&entries, "resources") {
                let path = path.field("resources");
                for (resource, tree) in mapping(tree, &path, problems).unwrap_or_default() {
                    let path = path.key(&resource);
                    if resource != DEFAULT_RESOURCE {
                        check_name(NameKind::Resource, &resource, &path, problems);
                    }
                    if let Some(decl) = parse_level(tree, &path, problems) {
                        levels.push((resource, decl));
                    }
                }
            }
            entities.push((entity, levels));
        }
    }

    Some(Manifest {
        namespace,
        system,
        resources,
        entities,
    })
}

/// A config item stores one `sched_tz` for all of its limits' schedules.
fn check_one_timezone(limits: &[(String, LimitDecl)], path: &Path, problems: &mut Vec<Problem>) {
    let mut zones: Vec<&str> = limits
        .iter()
        .flat_map(|(_, l)| l.schedule.iter().chain(&l.reset_schedule))
        .map(|e| e.tz.as_str())
        .collect();
    zones.sort();
    zones.dedup();
    if zones.len() > 1 {
        problems.push(Problem::new(
            &path.field("limits"),
            format!(
                "all scheduled limits on one level must share a timezone, got {}; it is \
                 stored once per config item as sched_tz",
                zones.join(", ")
            ),
        ));
    }
}

fn parse_level(tree: &Tree, path: &Path, problems: &mut Vec<Problem>) -> Option<LevelDecl> {
    let entries = mapping(tree, path, problems)?;
    reject_unknown(&entries, &["limits", "disabled", "cascade"], path, problems);
    let disabled = match get(&entries, "disabled") {
        None | Some(Tree::Null) => None,
        Some(Tree::Bool(true)) => Some(Disabled::Yes),
        Some(Tree::Bool(false)) => Some(Disabled::No),
        Some(Tree::String(s)) if s == "bypass" => Some(Disabled::Bypass),
        Some(other) => {
            problems.push(Problem::new(
                &path.field("disabled"),
                format!("must be true, false or 'bypass', got {}", describe(other)),
            ));
            None
        }
    };
    let cascade = match get(&entries, "cascade") {
        None | Some(Tree::Null) => None,
        Some(Tree::Bool(value)) => Some(*value),
        Some(other) => {
            problems.push(Problem::new(
                &path.field("cascade"),
                format!("must be true or false, got {}", describe(other)),
            ));
            None
        }
    };
    let limits = parse_limits(get(&entries, "limits"), &path.field("limits"), problems);
    check_one_timezone(&limits, path, problems);
    Some(LevelDecl {
        limits,
        on_unavailable: None,
        disabled,
        cascade,
    })
}

fn parse_limits(
    tree: Option<&Tree>,
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Vec<(String, LimitDecl)> {
    let Some(tree) = tree else {
        return Vec::new();
    };
    let mut limits = Vec::new();
    for (name, tree) in mapping(tree, path, problems).unwrap_or_default() {
        let path = path.key(&name);
        check_name(NameKind::Limit, &name, &path, problems);
        if let Some(limit) = parse_limit(tree, &path, problems) {
            limits.push((name, limit));
        }
    }
    limits
}

const LIMIT_FIELDS: [&str; 8] = [
    "capacity",
    "burst",
    "refill_amount",
    "refill_period",
    "reset_after_seconds",
    "soft",
    "schedule",
    "reset_schedule",
];

fn parse_limit(tree: &Tree, path: &Path, problems: &mut Vec<Problem>) -> Option<LimitDecl> {
    let entries = match tree {
        Tree::Mapping(_) => mapping(tree, path, problems)?,
        other => {
            problems.push(Problem::new(
                path,
                format!("a limit must be a mapping, got {}", describe(other)),
            ));
            return None;
        }
    };
    let before = problems.len();
    reject_unknown(&entries, &LIMIT_FIELDS, path, problems);

    // A bounded whole number, or a problem at its own path.
    let mut number = |field: &'static str, min: i64, max: i64| -> Option<i64> {
        let tree = get(&entries, field)?;
        let path = path.field(field);
        match (tree, whole(tree)) {
            (Tree::Bool(_), _) | (_, None) => {
                problems.push(Problem::new(
                    &path,
                    format!("must be a whole number, got {}", describe(tree)),
                ));
                None
            }
            (_, Some(value)) if value < min => {
                let rule = if min == 0 {
                    "must not be negative"
                } else {
                    "must be positive"
                };
                problems.push(Problem::new(&path, format!("{rule}, got {value}")));
                None
            }
            (_, Some(value)) if value > max => {
                problems.push(Problem::new(
                    &path,
                    format!("must be at most {max}, got {value}"),
                ));
                None
            }
            (_, Some(value)) => Some(value),
        }
    };
    let capacity_declared = get(&entries, "capacity").is_some();
    let capacity = number("capacity", 1, MAX_TOKENS);
    // `burst` is the legacy spelling and wins when both are present.
    let burst = number("burst", 1, MAX_TOKENS);
    let refill_period = number("refill_period", 1, MAX_PERIOD_SECONDS).unwrap_or(60);
    let refill_amount = number("refill_amount", 0, MAX_TOKENS);
    let reset_after_seconds = number("reset_after_seconds", 1, MAX_PERIOD_SECONDS);
    if !capacity_declared && get(&entries, "burst").is_none() {
        problems.push(Problem::new(&path.field("capacity"), "is required"));
    }
    let soft = match get(&entries, "soft") {
        None => false,
        Some(Tree::Bool(value)) => *value,
        Some(other) => {
            problems.push(Problem::new(
                &path.field("soft"),
                format!("must be true or false, got {}", describe(other)),
            ));
            false
        }
    };
    let schedule = schedule::parse_entries(
        get(&entries, "schedule"),
        &path.field("schedule"),
        false,
        problems,
    );
    let reset_schedule = schedule::parse_entries(
        get(&entries, "reset_schedule"),
        &path.field("reset_schedule"),
        true,
        problems,
    );
    if problems.len() > before {
        return None;
    }
    let capacity = burst.or(capacity)?;

    if reset_after_seconds.is_some() && !reset_schedule.is_empty() {
        problems.push(Problem::new(
            path,
            "a limit has one recovery mechanism: `reset_after_seconds` (a window from the \
             entity's first use) or `reset_schedule` (calendar instants), not both",
        ));
        return None;
    }
    let resets = !reset_schedule.is_empty() || reset_after_seconds.is_some();
    let refill_amount = refill_amount.unwrap_or(if resets { 0 } else { capacity });
    if refill_amount == 0 && !resets {
        problems.push(Problem::new(
            &path.field("refill_amount"),
            "0 means the limit never drips, which is only valid with a reset_schedule or \
             reset_after_seconds; otherwise the bucket can never recover",
        ));
    }
    if refill_amount > 0 && resets {
        problems.push(Problem::new(
            &path.field("refill_amount"),
            format!(
                "a limit drips or resets, never both: refill_amount {refill_amount} beside a \
                 reset grants about twice the allowance per period; omit it and it defaults to 0"
            ),
        ));
    }
    if resets {
        for (i, entry) in schedule.iter().enumerate() {
            if let Some(amount) = entry.refill_amount {
                problems.push(Problem::new(
                    &path.field("schedule").index(i).field("refill_amount"),
                    format!(
                        "sets {amount} on a limit that also resets; a limit drips or resets, \
                         never both, inside every scheduled window too"
                    ),
                ));
            }
        }
    }
    if problems.len() > before {
        return None;
    }
    Some(LimitDecl {
        capacity,
        refill_amount,
        refill_period,
        schedule,
        reset_schedule,
        reset_after_seconds,
        soft,
    })
}
