//! The limits manifest: its model, its validation, and its canonical form.
//!
//! A manifest arrives as a YAML file, as the `manifest` of a direct invoke, or
//! (after [`crate::cfn_props`] has coerced its strings) as CloudFormation
//! properties. All three become a [`Tree`] and pass through [`Manifest::parse`],
//! which reports every problem with its exact path before anything is read or
//! written.

use crate::path::{Invalid, Path, Problem, Spelling};
use crate::schedule::{self, ScheduleEntry};
use serde_norway::Value as Tree;
use sha2::{Digest, Sha256};

/// The client's ceilings (`zae_limiter.schedule`): tokens and seconds.
pub const MAX_TOKENS: i64 = 1_000_000_000_000_000;
pub const MAX_PERIOD_SECONDS: i64 = 1_000_000_000;

/// The entity-wide resource of an entity level.
pub const DEFAULT_RESOURCE: &str = "_default_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disabled {
    Yes,
    No,
    Bypass,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LimitDecl {
    pub capacity: i64,
    pub refill_amount: i64,
    pub refill_period: i64,
    pub schedule: Vec<ScheduleEntry>,
    pub reset_schedule: Vec<ScheduleEntry>,
    pub reset_after_seconds: Option<i64>,
    pub soft: bool,
}

impl LimitDecl {
    /// Whether the limit refills in one lump (calendar or duration quota)
    /// instead of dripping.
    pub fn resets(&self) -> bool {
        !self.reset_schedule.is_empty() || self.reset_after_seconds.is_some()
    }
}

/// What one level declares. System levels carry `on_unavailable`; resource
/// and entity levels carry `disabled` and `cascade`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelDecl {
    /// In declaration order, which decides the bucket's schedule default.
    pub limits: Vec<(String, LimitDecl)>,
    pub on_unavailable: Option<String>,
    pub disabled: Option<Disabled>,
    pub cascade: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    System,
    Resource(String),
    Entity { entity: String, resource: String },
}

impl Level {
    /// `system`, `resource` or `entity`, as the protocol's responses name them.
    pub fn kind(&self) -> &'static str {
        match self {
            Level::System => "system",
            Level::Resource(_) => "resource",
            Level::Entity { .. } => "entity",
        }
    }
    /// `None` for the system level, `<resource>` or `<entity>/<resource>`.
    pub fn target(&self) -> Option<String> {
        match self {
            Level::System => None,
            Level::Resource(resource) => Some(resource.clone()),
            Level::Entity { entity, resource } => Some(format!("{entity}/{resource}")),
        }
    }
    /// Reverses [`Level::target`]; entity targets split at the first `/`.
    pub fn from_parts(kind: &str, target: &str) -> Option<Level> {
        match kind {
            "system" => Some(Level::System),
            "resource" => Some(Level::Resource(target.to_owned())),
            "entity" => target.split_once('/').map(|(entity, resource)| Level::Entity {
                entity: entity.to_owned(),
                resource: resource.to_owned(),
            }),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub namespace: String,
    pub system: Option<LevelDecl>,
    pub resources: Vec<(String, LevelDecl)>,
    pub entities: Vec<(String, Vec<(String, LevelDecl)>)>,
}

/// The levels a manifest manages, as the `#PROVISIONER` record stores them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedSet {
    pub system: bool,
    pub resources: Vec<String>,
    pub entities: Vec<(String, Vec<String>)>,
}

impl ManagedSet {
    pub fn levels(&self) -> Vec<Level> {
        let mut levels = Vec::new();
        if self.system {
            levels.push(Level::System);
        }
        levels.extend(self.resources.iter().cloned().map(Level::Resource));
        for (entity, resources) in &self.entities {
            for resource in resources {
                levels.push(Level::Entity {
                    entity: entity.clone(),
                    resource: resource.clone(),
                });
            }
        }
        levels
    }
}

impl Manifest {
    /// An empty manifest for a namespace: applying it deletes every managed level.
    pub fn empty(namespace: &str) -> Manifest {
        Manifest {
            namespace: namespace.to_owned(),
            system: None,
            resources: Vec::new(),
            entities: Vec::new(),
        }
    }

    pub fn from_yaml(text: &str) -> Result<Manifest, Invalid> {
        let tree: Tree = serde_norway::from_str(text).map_err(|err| Invalid {
            problems: vec![Problem::new(&Path::root(), format!("not valid YAML: {err}"))],
            spelling: Spelling::Yaml,
        })?;
        Manifest::parse(&tree, Spelling::Yaml)
    }

    /// Validates a whole manifest, collecting every problem.
    pub fn parse(tree: &Tree, spelling: Spelling) -> Result<Manifest, Invalid> {
        let mut problems = Vec::new();
        let manifest = parse_manifest(tree, &mut problems);
        match manifest {
            Some(manifest) if problems.is_empty() => Ok(manifest),
            _ => Err(Invalid { problems, spelling }),
        }
    }

    /// Every declared level with its declaration, system first, then
    /// resources and entity pairs in sorted order.
    pub fn declared(&self) -> Vec<(Level, &LevelDecl)> {
        let mut levels: Vec<(Level, &LevelDecl)> = Vec::new();
        if let Some(system) = &self.system {
            levels.push((Level::System, system));
        }
        let mut resources: Vec<_> = self
            .resources
            .iter()
            .map(|(name, decl)| (Level::Resource(name.clone()), decl))
            .collect();
        resources.sort_by(|a, b| a.0.cmp(&b.0));
        levels.extend(resources);
        let mut entities: Vec<_> = self
            .entities
            .iter()
            .flat_map(|(entity, resources)| {
                resources.iter().map(move |(resource, decl)| {
                    (
                        Level::Entity {
                            entity: entity.clone(),
                            resource: resource.clone(),
                        },
                        decl,
                    )
                })
            })
            .collect();
        entities.sort_by(|a, b| a.0.cmp(&b.0));
        levels.extend(entities);
        levels
    }

    pub fn managed_set(&self) -> ManagedSet {
        let mut resources: Vec<String> = self.resources.iter().map(|(n, _)| n.clone()).collect();
        resources.sort();
        let mut entities: Vec<(String, Vec<String>)> = self
            .entities
            .iter()
            .map(|(entity, resources)| {
                let mut names: Vec<String> = resources.iter().map(|(n, _)| n.clone()).collect();
                names.sort();
                (entity.clone(), names)
            })
            .collect();
        entities.sort();
        ManagedSet {
            system: self.system.is_some(),
            resources,
            entities,
        }
    }

    /// The canonical JSON form, keys sorted, for the informational
    /// `applied_hash` of the state record.
    pub fn canonical(&self) -> serde_json::Value {
        use serde_json::{Map, Value, json};
        let mut root = Map::new();
        root.insert("namespace".into(), json!(self.namespace));
        if let Some(system) = &self.system {
            root.insert("system".into(), level_canonical(system, true));
        }
        if !self.resources.is_empty() {
            let resources: Map<String, Value> = self
                .resources
                .iter()
                .map(|(name, decl)| (name.clone(), level_canonical(decl, false)))
                .collect();
            root.insert("resources".into(), Value::Object(resources));
        }
        if !self.entities.is_empty() {
            let entities: Map<String, Value> = self
                .entities
                .iter()
                .map(|(entity, resources)| {
                    let resources: Map<String, Value> = resources
                        .iter()
                        .map(|(name, decl)| (name.clone(), level_canonical(decl, false)))
                        .collect();
                    (entity.clone(), json!({ "resources": resources }))
                })
                .collect();
            root.insert("entities".into(), Value::Object(entities));
        }
        Value::Object(root)
    }

    /// `sha256:<hex>` over the canonical form, serialised the way Python's
    /// `json.dumps(sort_keys=True)` does, so both provisioners agree.
    pub fn applied_hash(&self) -> String {
        let text = python_json(&self.canonical());
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}

fn level_canonical(decl: &LevelDecl, system: bool) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    let limits: Map<String, Value> = decl
        .limits
        .iter()
        .map(|(name, limit)| (name.clone(), limit_canonical(limit)))
        .collect();
    let mut out = Map::new();
    out.insert("limits".into(), Value::Object(limits));
    if system {
        if let Some(on_unavailable) = &decl.on_unavailable {
            out.insert("on_unavailable".into(), json!(on_unavailable));
        }
    } else {
        match decl.disabled {
            Some(Disabled::Yes) => out.insert("disabled".into(), json!(true)),
            Some(Disabled::No) => out.insert("disabled".into(), json!(false)),
            Some(Disabled::Bypass) => out.insert("disabled".into(), json!("bypass")),
            None => None,
        };
        if let Some(cascade) = decl.cascade {
            out.insert("cascade".into(), json!(cascade));
        }
    }
    Value::Object(out)
}

fn limit_canonical(limit: &LimitDecl) -> serde_json::Value {
    use serde_json::{Value, json};
    let mut out = json!({
        "capacity": limit.capacity,
        "refill_amount": limit.refill_amount,
        "refill_period": limit.refill_period,
    });
    let map = out.as_object_mut().expect("built as an object");
    let entries = |entries: &[ScheduleEntry]| -> Value {
        Value::Array(entries.iter().map(ScheduleEntry::canonical).collect())
    };
    if !limit.schedule.is_empty() {
        map.insert("schedule".into(), entries(&limit.schedule));
    }
    if !limit.reset_schedule.is_empty() {
        map.insert("reset_schedule".into(), entries(&limit.reset_schedule));
    }
    if let Some(seconds) = limit.reset_after_seconds {
        map.insert("reset_after_seconds".into(), json!(seconds));
    }
    if limit.soft {
        map.insert("soft".into(), json!(true));
    }
    out
}

/// JSON with Python's default separators (`", "`, `": "`) and ASCII escapes.
fn python_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    fn string(out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{08}' => out.push_str("\\b"),
                '\u{0c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    fn walk(out: &mut String, value: &Value) {
        match value {
            Value::Object(map) => {
                out.push('{');
                // Sorted here: serde_json keeps insertion order when any crate
                // in the build turns on its `preserve_order` feature.
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    string(out, key);
                    out.push_str(": ");
                    walk(out, item);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    walk(out, item);
                }
                out.push(']');
            }
            Value::String(text) => string(out, text),
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    walk(&mut out, value);
    out
}

// ---- validation ---------------------------------------------------------

/// A map's entries with string keys; anything else is reported.
fn mapping<'t>(
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

/// YAML reads `404:` or `true:` as non-string keys; names are text.
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

fn describe(tree: &Tree) -> String {
    match tree {
        Tree::String(s) => format!("'{s}'"),
        Tree::Number(n) => n.to_string(),
        Tree::Bool(b) => b.to_string(),
        other => type_name(other).to_owned(),
    }
}

fn reject_unknown(
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
        problems.push(Problem::new(
            path,
            format!(
                "unknown field(s) {}; allowed: {}",
                unknown.join(", "),
                allowed.join(", ")
            ),
        ));
    }
}

/// A field's value; an explicit null (`capacity:` with nothing after it, or
/// an empty CloudFormation string) counts as absent.
fn get<'t>(entries: &[(String, &'t Tree)], key: &str) -> Option<&'t Tree> {
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

/// Names are bounded and free of the characters the table's keys use as separators.
pub fn check_name(kind: &str, name: &str, path: &Path, problems: &mut Vec<Problem>) {
    if let Err(reason) = crate::names::check(kind, name) {
        problems.push(Problem::new(path, reason));
    }
}

fn parse_manifest(tree: &Tree, problems: &mut Vec<Problem>) -> Option<Manifest> {
    let root = Path::root();
    let entries = match tree {
        Tree::Mapping(_) => mapping(tree, &root, problems)?,
        other => {
            problems.push(Problem::new(
                &root,
                format!("a limits manifest must be a mapping, got {}", type_name(other)),
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
                    &path.field(if flag == "cascade" { "cascade" } else { "disabled" }),
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
                check_name("resource", &name, &path, problems);
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
            check_name("entity id", &entity, &path, problems);
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
                        check_name("resource", &resource, &path, problems);
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
        check_name("limit", &name, &path, problems);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_hash_matches_the_reference_provisioners() {
        // The value the 0.17.0 provisioner computes for the same manifest.
        let manifest = Manifest::from_yaml(
            r#"namespace: tenant-é
system: {on_unavailable: allow, limits: {rpm: {capacity: 10000}}}
resources:
  gpt-4: {cascade: true, disabled: bypass, limits: {tpm: {capacity: 50000, soft: true, schedule: [{cron: "* 9-17 * * 1-5", tz: UTC, scale: 0.5}]}}}
entities:
  user-1: {resources: {_default_: {disabled: false}, gpt-4: {limits: {d: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: UTC}]}, s: {capacity: 5, reset_after_seconds: 60}}}}}
"#,
        )
        .unwrap();
        assert_eq!(
            manifest.applied_hash(),
            "sha256:f5e6ce46f6630c81c606fb7393d858c806c938caabcb38a3d42984e7daa297d3"
        );
    }
}

