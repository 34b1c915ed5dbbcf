//! Validation of a whole manifest: every problem is collected, each at its
//! exact path, before the manifest is accepted.

use super::problem::{Path, Problem};
use super::schedule;
use super::tree::{describe, get, mapping, reject_unknown, type_name, whole};
use super::{Adaptive, DEFAULT_RESOURCE, Disabled, LevelDecl, LimitDecl, Manifest};
use yaml_serde::Value as Tree;
use zae_table::adaptive::Factor;
use zae_table::config::{MAX_PERIOD_SECONDS, MAX_TOKENS};
use zae_table::names::{self, NameKind};
use zae_table::snapshot;

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
    let field = |name| (get(&entries, name), root.field(name));
    let (tree, path) = field("namespace");
    let namespace = namespace(tree, &path, problems);
    let (tree, path) = field("system");
    let system = tree.and_then(|tree| system(tree, &path, problems));
    let (tree, path) = field("resources");
    let resources = tree.map_or_else(Vec::new, |tree| resources(tree, &path, problems));
    let (tree, path) = field("entities");
    let entities = tree.map_or_else(Vec::new, |tree| entities(tree, &path, problems));
    check_entity_targets(&entities, &resources, &path, problems);
    Some(Manifest {
        namespace,
        system,
        resources,
        entities,
    })
}

fn namespace(tree: Option<&Tree>, path: &Path, problems: &mut Vec<Problem>) -> String {
    match tree {
        Some(Tree::String(ns)) if !ns.is_empty() => ns.clone(),
        Some(Tree::String(_)) | Some(Tree::Null) | None => {
            problems.push(Problem::new(path, "is required and must not be empty"));
            String::new()
        }
        Some(other) => {
            problems.push(Problem::new(
                path,
                format!("must be a string, got {}", describe(other)),
            ));
            String::new()
        }
    }
}

fn system(tree: &Tree, path: &Path, problems: &mut Vec<Problem>) -> Option<LevelDecl> {
    let entries = mapping(tree, path, problems)?;
    for flag in ["cascade", "disabled"] {
        if get(&entries, flag).is_some() {
            problems.push(Problem::new(
                &path.field(flag),
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
        path,
        problems,
    );
    let on_unavailable = match get(&entries, "on_unavailable") {
        None | Some(Tree::Null) => None,
        Some(Tree::String(value)) if value == "allow" || value == "block" => Some(value.clone()),
        Some(other) => {
            problems.push(Problem::new(
                &path.field("on_unavailable"),
                format!("must be 'allow' or 'block', got {}", describe(other)),
            ));
            None
        }
    };
    let limits = parse_limits(get(&entries, "limits"), &path.field("limits"), problems);
    check_one_timezone(&limits, path, problems);
    Some(LevelDecl {
        limits,
        on_unavailable,
        disabled: None,
        cascade: None,
        estimated_capacity: Vec::new(),
        target_utilization: Vec::new(),
        share_demand: false,
    })
}

fn resources(tree: &Tree, path: &Path, problems: &mut Vec<Problem>) -> Vec<(String, LevelDecl)> {
    let mut resources = Vec::new();
    for (name, tree) in mapping(tree, path, problems).unwrap_or_default() {
        let path = path.key(&name);
        if name == DEFAULT_RESOURCE {
            problems.push(Problem::new(
                &path,
                "'_default_' is an entity-level resource; declare namespace-wide defaults under `system`",
            ));
        } else {
            check_name(NameKind::Resource, &name, &path, problems);
        }
        if let Some(decl) = parse_level(tree, &path, true, problems) {
            resources.push((name, decl));
        }
    }
    check_adaptive_targets(&resources, path, problems);
    resources
}

/// An entity's adaptive limit on a named resource needs that resource's
/// estimated capacity (`_default_` applies per resource, like the system's).
fn check_entity_targets(
    entities: &EntityLevels,
    resources: &[(String, LevelDecl)],
    path: &Path,
    problems: &mut Vec<Problem>,
) {
    let estimated = |resource: &str, limit: &str| {
        resources.iter().any(|(name, decl)| {
            name == resource && decl.estimated_capacity.iter().any(|(l, _)| l == limit)
        })
    };
    for (entity, levels) in entities {
        for (resource, decl) in levels.iter().filter(|(r, _)| r != DEFAULT_RESOURCE) {
            for (limit, l) in &decl.limits {
                if l.adaptive.is_some() && !estimated(resource, limit) {
                    problems.push(Problem::new(
                        &path
                            .key(entity)
                            .field("resources")
                            .key(resource)
                            .field("limits")
                            .key(limit)
                            .field("adaptive"),
                        format!(
                            "needs resources.{resource}.estimated_capacity.{limit}, the tokens \
                             per minute the resource is sized for: utilization is measured \
                             against it"
                        ),
                    ));
                }
            }
        }
    }
}

/// A resource-level adaptive limit needs the resource's estimated capacity
/// for it: without one it could never scale.
fn check_adaptive_targets(
    resources: &[(String, LevelDecl)],
    path: &Path,
    problems: &mut Vec<Problem>,
) {
    for (resource, decl) in resources {
        for (limit, l) in &decl.limits {
            let estimated = decl
                .estimated_capacity
                .iter()
                .any(|(name, _)| name == limit);
            if l.adaptive.is_some() && !estimated {
                problems.push(Problem::new(
                    &path
                        .key(resource)
                        .field("limits")
                        .key(limit)
                        .field("adaptive"),
                    format!(
                        "needs resources.{resource}.estimated_capacity.{limit}, the tokens per \
                         minute the resource is sized for: utilization is measured against it"
                    ),
                ));
            }
        }
    }
}

type EntityLevels = Vec<(String, Vec<(String, LevelDecl)>)>;

fn entities(tree: &Tree, path: &Path, problems: &mut Vec<Problem>) -> EntityLevels {
    let mut entities = Vec::new();
    for (entity, tree) in mapping(tree, path, problems).unwrap_or_default() {
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
                if let Some(decl) = parse_level(tree, &path, false, problems) {
                    levels.push((resource, decl));
                }
            }
        }
        entities.push((entity, levels));
    }
    entities
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

/// A level's `disabled`: true, false or `bypass`.
fn parse_disabled(
    tree: Option<&Tree>,
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Option<Disabled> {
    match tree {
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
    }
}

/// A level's `cascade`: true or false.
fn parse_cascade(tree: Option<&Tree>, path: &Path, problems: &mut Vec<Problem>) -> Option<bool> {
    match tree {
        None | Some(Tree::Null) => None,
        Some(Tree::Bool(value)) => Some(*value),
        Some(other) => {
            problems.push(Problem::new(
                &path.field("cascade"),
                format!("must be true or false, got {}", describe(other)),
            ));
            None
        }
    }
}

/// A resource level (`resource`), which may carry `estimated_capacity`, or
/// an entity's level for a resource.
fn parse_level(
    tree: &Tree,
    path: &Path,
    resource: bool,
    problems: &mut Vec<Problem>,
) -> Option<LevelDecl> {
    let entries = mapping(tree, path, problems)?;
    for field in ["estimated_capacity", "target_utilization", "share"] {
        if !resource && get(&entries, field).is_some() {
            problems.push(Problem::new(
                &path.field(field),
                "is a property of a resource: declare it under resources.<name>, where it \
                 applies to every entity on the resource",
            ));
        }
    }
    reject_unknown(
        &entries,
        &[
            "limits",
            "disabled",
            "cascade",
            "estimated_capacity",
            "target_utilization",
            "share",
        ],
        path,
        problems,
    );
    let estimated_capacity = match get(&entries, "estimated_capacity") {
        Some(tree) if resource => {
            estimated_capacity(tree, &path.field("estimated_capacity"), problems)
        }
        _ => Vec::new(),
    };
    let target_utilization = match get(&entries, "target_utilization") {
        Some(tree) if resource => target_utilization(
            tree,
            &estimated_capacity,
            &path.field("target_utilization"),
            problems,
        ),
        _ => Vec::new(),
    };
    let share_demand = match get(&entries, "share") {
        Some(tree) if resource => {
            share_demand(tree, &estimated_capacity, &path.field("share"), problems)
        }
        _ => false,
    };
    let disabled = parse_disabled(get(&entries, "disabled"), path, problems);
    let cascade = parse_cascade(get(&entries, "cascade"), path, problems);
    let limits = parse_limits(get(&entries, "limits"), &path.field("limits"), problems);
    check_one_timezone(&limits, path, problems);
    Some(LevelDecl {
        limits,
        on_unavailable: None,
        disabled,
        cascade,
        estimated_capacity,
        target_utilization,
        share_demand,
    })
}

/// `share: base | demand`; `demand` needs an estimated capacity to share.
fn share_demand(
    tree: &Tree,
    estimated: &[(String, i64)],
    path: &Path,
    problems: &mut Vec<Problem>,
) -> bool {
    match tree {
        Tree::String(s) if s == "base" => false,
        Tree::String(s) if s == "demand" => {
            if estimated.is_empty() {
                problems.push(Problem::new(
                    path,
                    "needs estimated_capacity beside it: the demand share divides a \
                     resource's estimated capacity",
                ));
            }
            true
        }
        other => {
            problems.push(Problem::new(
                path,
                format!(
                    "must be 'base' (one factor for everyone) or 'demand' (spare capacity \
                     to the entities that want it), got {}",
                    describe(other)
                ),
            ));
            false
        }
    }
}

/// `{limit: tokens per minute}`, each a positive whole number.
fn estimated_capacity(tree: &Tree, path: &Path, problems: &mut Vec<Problem>) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for (limit, tree) in mapping(tree, path, problems).unwrap_or_default() {
        let path = path.key(&limit);
        check_name(NameKind::Limit, &limit, &path, problems);
        if let Some(tpm) = bounded(tree, 1, MAX_TOKENS, &path, problems) {
            out.push((limit, tpm));
        }
    }
    out
}

/// `{limit: utilization}`, each in (0, 1] and beside an estimated capacity
/// for the limit; 1 (the default) is left out, so that a manifest that
/// spells it hashes as one that does not.
fn target_utilization(
    tree: &Tree,
    estimated: &[(String, i64)],
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for (limit, tree) in mapping(tree, path, problems).unwrap_or_default() {
        let path = path.key(&limit);
        check_name(NameKind::Limit, &limit, &path, problems);
        let Some(t) = tree
            .as_f64()
            .filter(|t| t.is_finite() && *t > 0.0 && *t <= 1.0)
        else {
            problems.push(Problem::new(
                &path,
                format!(
                    "must be a number above 0 and at most 1 (the share of the estimated \
                     capacity the law aims use at), got {}",
                    describe(tree)
                ),
            ));
            continue;
        };
        if !estimated.iter().any(|(l, _)| *l == limit) {
            problems.push(Problem::new(
                &path,
                format!(
                    "needs estimated_capacity.{limit} beside it: the target is a share of \
                     that capacity"
                ),
            ));
            continue;
        }
        let ppm = (t * zae_table::adaptive::factor::PPM as f64).round() as i64;
        if ppm < zae_table::adaptive::factor::PPM {
            out.push((limit, ppm.max(1)));
        }
    }
    out
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
        if snapshot::collides(&name) {
            problems.push(Problem::new(
                &path,
                format!(
                    "limit name '{name}' is an attribute of the usage snapshots, where its \
                     counter would be lost; choose another name"
                ),
            ));
        }
        if let Some(limit) = parse_limit(tree, &path, problems) {
            limits.push((name, limit));
        }
    }
    limits
}

const LIMIT_FIELDS: [&str; 10] = [
    "capacity",
    "burst",
    "refill_amount",
    "refill_period",
    "reset_after_seconds",
    "soft",
    "schedule",
    "reset_schedule",
    "adaptive",
    "max_scale",
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
    let mut number = |field: &'static str, min: i64, max: i64| {
        let tree = get(&entries, field)?;
        bounded(tree, min, max, &path.field(field), problems)
    };
    let capacity = number("capacity", 1, MAX_TOKENS);
    // `burst` is the legacy spelling and wins when both are present.
    let burst = number("burst", 1, MAX_TOKENS);
    let refill_period = number("refill_period", 1, MAX_PERIOD_SECONDS).unwrap_or(60);
    let refill_amount = number("refill_amount", 0, MAX_TOKENS);
    let reset_after_seconds = number("reset_after_seconds", 1, MAX_PERIOD_SECONDS);
    if get(&entries, "capacity").is_none() && get(&entries, "burst").is_none() {
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
    let mut entries_of = |field: &'static str, reset: bool| {
        schedule::parse_entries(get(&entries, field), &path.field(field), reset, problems)
    };
    let schedule = entries_of("schedule", false);
    let reset_schedule = entries_of("reset_schedule", true);
    let adaptive = adaptive(&entries, path, problems);
    if problems.len() > before {
        return None;
    }
    let mut limit = LimitDecl {
        capacity: burst.or(capacity)?,
        refill_amount: 0,
        refill_period,
        schedule,
        reset_schedule,
        reset_after_seconds,
        soft,
        adaptive,
    };
    limit.refill_amount = recovery(&limit, refill_amount, path, problems)?;
    check_adaptive(&limit, path, problems);
    (problems.len() == before).then_some(limit)
}

/// `adaptive: utilization` and its `max_scale`, a number of at least 1.
fn adaptive(
    entries: &[(String, &Tree)],
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Option<Adaptive> {
    let max_scale = get(entries, "max_scale").and_then(|tree| match tree {
        Tree::Number(n) if n.as_f64().is_some_and(|f| f.is_finite() && f >= 1.0) => {
            Some(Factor::from_f64(n.as_f64().unwrap_or(1.0)))
        }
        other => {
            problems.push(Problem::new(
                &path.field("max_scale"),
                format!(
                    "must be a number of at least 1 (the most the rate may scale), got {}",
                    describe(other)
                ),
            ));
            None
        }
    });
    match get(entries, "adaptive") {
        None => {
            if get(entries, "max_scale").is_some() {
                problems.push(Problem::new(
                    &path.field("max_scale"),
                    "applies only to an adaptive limit: add `adaptive: utilization`",
                ));
            }
            None
        }
        Some(Tree::String(kind)) if kind == "utilization" || kind == "shadow" => Some(Adaptive {
            max_scale,
            shadow: kind == "shadow",
        }),
        Some(other) => {
            problems.push(Problem::new(
                &path.field("adaptive"),
                format!(
                    "must be 'utilization' (scaled) or 'shadow' (computed and reported, never \
                     stamped), got {}",
                    describe(other)
                ),
            ));
            None
        }
    }
}

/// What an adaptive limit must be: room to scale into, a rate to scale, and
/// nothing else setting the rate.
fn check_adaptive(limit: &LimitDecl, path: &Path, problems: &mut Vec<Problem>) {
    if limit.adaptive.is_none() {
        return;
    }
    let path = path.field("adaptive");
    let resets = !limit.reset_schedule.is_empty() || limit.reset_after_seconds.is_some();
    let rules = [
        (
            limit.capacity <= limit.refill_amount && !resets,
            format!(
                "needs capacity above refill_amount (the room to scale into): capacity {} is not \
                 above refill_amount {}",
                limit.capacity, limit.refill_amount
            ),
        ),
        (
            resets,
            "needs a limit that refills: a quota (reset_schedule or reset_after_seconds) has no \
             rate to scale"
                .to_owned(),
        ),
        (
            !limit.schedule.is_empty(),
            "cannot share a limit with a schedule: both would set its rate".to_owned(),
        ),
        (
            limit.soft,
            "cannot apply to a soft limit: it never rejects, so scaling it changes nothing"
                .to_owned(),
        ),
    ];
    for (broken, reason) in rules {
        if broken {
            problems.push(Problem::new(&path, reason));
        }
    }
}

/// A bounded whole number, or a problem at its own path.
fn bounded(
    tree: &Tree,
    min: i64,
    max: i64,
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Option<i64> {
    let problem = match (tree, whole(tree)) {
        (Tree::Bool(_), _) | (_, None) => format!("must be a whole number, got {}", describe(tree)),
        (_, Some(value)) if value < min => {
            let rule = if min == 0 {
                "must not be negative"
            } else {
                "must be positive"
            };
            format!("{rule}, got {value}")
        }
        (_, Some(value)) if value > max => format!("must be at most {max}, got {value}"),
        (_, Some(value)) => return Some(value),
    };
    problems.push(Problem::new(path, problem));
    None
}

/// The limit's refill amount, once its recovery rules hold: one mechanism
/// (a drip, a calendar reset or a duration reset), never two.
fn recovery(
    limit: &LimitDecl,
    refill_amount: Option<i64>,
    path: &Path,
    problems: &mut Vec<Problem>,
) -> Option<i64> {
    if limit.reset_after_seconds.is_some() && !limit.reset_schedule.is_empty() {
        problems.push(Problem::new(
            path,
            "a limit has one recovery mechanism: `reset_after_seconds` (a window from the \
             entity's first use) or `reset_schedule` (calendar instants), not both",
        ));
        return None;
    }
    let before = problems.len();
    let resets = !limit.reset_schedule.is_empty() || limit.reset_after_seconds.is_some();
    let refill_amount = refill_amount.unwrap_or(if resets { 0 } else { limit.capacity });
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
        for (i, entry) in limit.schedule.iter().enumerate() {
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
    (problems.len() == before).then_some(refill_amount)
}

#[cfg(test)]
mod tests {
    use crate::manifest::Manifest;

    #[test]
    fn a_limit_named_like_a_snapshot_attribute_is_refused_at_its_path() {
        for name in ["window", "ttl", "total_events", "entity_id", "GSI2PK"] {
            let yaml = format!(
                "namespace: n\nresources: {{gpt-4: {{limits: {{{name}: {{capacity: 5}}}}}}}}\n"
            );
            let err = Manifest::from_yaml(&yaml).unwrap_err().to_string();
            assert!(
                err.contains(&format!(
                    "resources.gpt-4.limits.{name}: limit name '{name}'"
                )),
                "{err}"
            );
        }
        assert!(
            Manifest::from_yaml(
                "namespace: n\nresources: {r: {limits: {windows: {capacity: 5}}}}\n"
            )
            .is_ok()
        );
    }

    fn problems(yaml: &str) -> Vec<String> {
        match Manifest::from_yaml(yaml) {
            Ok(_) => Vec::new(),
            Err(invalid) => invalid.to_string().lines().map(str::to_owned).collect(),
        }
    }

    #[test]
    fn an_adaptive_limit_breaking_every_rule_is_told_each_at_its_path() {
        let found = problems(
            r#"
namespace: n
resources:
  r:
    estimated_capacity: {a: 1000, b: 1000, c: 1000, d: 1000}
    limits:
      a: {capacity: 100, adaptive: utilization}
      b: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: UTC}], adaptive: utilization}
      c: {capacity: 1000, refill_amount: 10, adaptive: utilization, schedule: [{cron: "* 9-17 * * *", tz: UTC, scale: 2}]}
      d: {capacity: 1000, refill_amount: 10, soft: true, adaptive: utilization}
      e: {capacity: 1000, refill_amount: 10, adaptive: utilization}
      f: {capacity: 1000, refill_amount: 10, max_scale: 2}
      g: {capacity: 1000, refill_amount: 10, adaptive: fast, max_scale: 0.5}
"#,
        )
        .join("\n");
        for expected in [
            "limits.a.adaptive: needs capacity above refill_amount",
            "limits.b.adaptive: needs a limit that refills",
            "limits.c.adaptive: cannot share a limit with a schedule",
            "limits.d.adaptive: cannot apply to a soft limit",
            "limits.e.adaptive: needs resources.r.estimated_capacity.e",
            "limits.f.max_scale: applies only to an adaptive limit",
            "limits.g.adaptive: must be 'utilization' (scaled) or 'shadow'",
            "limits.g.max_scale: must be a number of at least 1",
        ] {
            assert!(
                found.contains(expected),
                "missing {expected:?} in:\n{found}"
            );
        }
    }

    #[test]
    fn target_utilization_is_a_share_beside_an_estimated_capacity_and_one_is_left_out() {
        let found = problems(
            r#"
namespace: n
resources:
  r:
    estimated_capacity: {tpm: 1000, rpm: 100}
    target_utilization: {tpm: 1.5, rpm: 0, x: 0.5}
entities:
  k: {resources: {r: {target_utilization: {tpm: 0.8}}}}
"#,
        )
        .join("\n");
        for expected in [
            "resources.r.target_utilization.tpm: must be a number above 0 and at most 1",
            "resources.r.target_utilization.rpm: must be a number above 0 and at most 1",
            "resources.r.target_utilization.x: needs estimated_capacity.x beside it",
            "entities.k.resources.r.target_utilization: is a property of a resource",
        ] {
            assert!(
                found.contains(expected),
                "missing {expected:?} in:\n{found}"
            );
        }
        let manifest = Manifest::from_yaml(
            "namespace: n\nresources: {r: {estimated_capacity: {tpm: 1000, rpm: 10}, \
             target_utilization: {tpm: 0.8, rpm: 1}}}\n",
        )
        .unwrap();
        let declaration = manifest.declaration();
        assert_eq!(declaration.target_utilization("r", "tpm"), 0.8);
        assert_eq!(declaration.target_utilization("r", "rpm"), 1.0);
        assert_eq!(
            manifest.resources[0].1.target_utilization,
            vec![("tpm".into(), 800_000)]
        );
    }

    #[test]
    fn share_is_base_or_demand_on_a_resource_with_an_estimated_capacity() {
        let err = Manifest::from_yaml(
            "namespace: n
resources:
  r: {estimated_capacity: {tpm: 1000}, share: fair}
  q: {share: demand}
entities:
  k: {resources: {r: {share: demand}}}
",
        )
        .unwrap_err()
        .to_string();
        for wanted in [
            "resources.r.share: must be 'base' (one factor for everyone) or 'demand'",
            "resources.q.share: needs estimated_capacity beside it",
            "entities.k.resources.r.share: is a property of a resource",
        ] {
            assert!(err.contains(wanted), "{wanted} in {err}");
        }
        let manifest = Manifest::from_yaml(
            "namespace: n\nresources: {r: {estimated_capacity: {tpm: 1000}, share: demand}, \
             q: {estimated_capacity: {tpm: 1000}, share: base}}\n",
        )
        .unwrap();
        let declaration = manifest.declaration();
        assert!(declaration.shares_by_demand("r") && !declaration.shares_by_demand("q"));
    }
    #[test]
    fn shadow_is_an_adaptive_mode_that_the_declaration_keeps() {
        let manifest = Manifest::from_yaml(
            "namespace: n\nresources: {r: {estimated_capacity: {tpm: 1000}, limits: \
             {tpm: {capacity: 100, refill_amount: 10, adaptive: shadow, max_scale: 3}}}}\n",
        )
        .unwrap();
        let level = &manifest.declaration().levels[0];
        assert!(level.shadow);
        assert_eq!(
            level.max_scale,
            Some(zae_table::adaptive::Factor::from_ppm(3_000_000))
        );
    }

    #[test]
    fn estimated_capacity_belongs_to_resources_and_entities_need_it_there() {
        let found = problems(
            r#"
namespace: n
resources: {r: {estimated_capacity: {tpm: 0}}}
entities:
  k:
    resources:
      r: {estimated_capacity: {tpm: 5}, limits: {tpm: {capacity: 100, refill_amount: 10, adaptive: utilization}}}
      _default_: {limits: {tpm: {capacity: 100, refill_amount: 10, adaptive: utilization}}}
"#,
        )
        .join("\n");
        assert!(
            found.contains("resources.r.estimated_capacity.tpm: must be positive"),
            "{found}"
        );
        assert!(
            found
                .contains("entities.k.resources.r.estimated_capacity: is a property of a resource"),
            "{found}"
        );
        assert!(
            found.contains("entities.k.resources.r.limits.tpm.adaptive: needs resources.r.estimated_capacity.tpm"),
            "{found}"
        );
        assert!(!found.contains("_default_.limits.tpm.adaptive"), "{found}");
    }

    #[test]
    fn plan_notes_say_where_a_per_resource_adaptive_limit_stays_at_base() {
        let manifest = Manifest::from_yaml(
            r#"
namespace: n
system: {limits: {tpm: {capacity: 1000, refill_amount: 100, adaptive: utilization}}}
resources: {gpt-4: {estimated_capacity: {tpm: 100000}}, gpt-3: {}}
"#,
        )
        .unwrap();
        let notes = manifest.adaptive_notes();
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("scales on only gpt-4"), "{notes:?}");
    }
}
