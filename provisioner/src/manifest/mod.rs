//! The limits manifest: its model, how it is parsed and validated
//! ([`parse`], [`schedule`], with every problem at its path: [`problem`]),
//! CloudFormation's spelling of it ([`stack`]), its canonical form
//! ([`canonical`]), and the config each declared level becomes.
//!
//! A manifest arrives as a YAML file, as the `manifest` of a direct invoke,
//! or (after [`stack`] has coerced its strings) as CloudFormation
//! properties. All three become a [`Tree`] and pass through
//! [`Manifest::parse`], which reports every problem with its exact path
//! before anything is read or written.

pub mod canonical;
mod parse;
pub mod problem;
#[cfg(test)]
mod properties;
mod schedule;
pub mod stack;
mod tree;
mod written;

pub use tree::type_name;
pub use zae_table::config::Disabled;
pub use zae_table::level::{DEFAULT_RESOURCE, Level};
pub use zae_table::provisioner::ManagedSet;

use problem::{Invalid, Path, Problem, Spelling};
use yaml_serde::Value as Tree;
use zae_table::adaptive::{AdaptiveLevel, Declaration, Factor};
use zae_table::config::{LevelConfig, LimitConfig};
use zae_table::schedule::{self as compact, ScheduleEntry};

#[derive(Debug, Clone, PartialEq)]
pub struct LimitDecl {
    pub capacity: i64,
    pub refill_amount: i64,
    pub refill_period: i64,
    pub schedule: Vec<ScheduleEntry>,
    pub reset_schedule: Vec<ScheduleEntry>,
    pub reset_after_seconds: Option<i64>,
    pub soft: bool,
    /// `adaptive: utilization`: the limit's rate scales with its resource's
    /// utilization, up to `max_scale` (parts per million) if set.
    pub adaptive: Option<Adaptive>,
}

/// A limit's opt-in to adaptive limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adaptive {
    pub max_scale: Option<Factor>,
    /// `adaptive: shadow`: computed, reported and recorded; stamped never.
    pub shadow: bool,
}

impl Adaptive {
    /// Its value in a manifest.
    pub fn mode(self) -> &'static str {
        if self.shadow { "shadow" } else { "utilization" }
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
    /// A resource level's estimated capacity per limit, tokens per minute:
    /// the target adaptive limits scale against, never a ceiling.
    pub estimated_capacity: Vec<(String, i64)>,
    /// A resource level's target utilization per limit, parts per million
    /// (in (0, 1]; 1 where absent).
    pub target_utilization: Vec<(String, i64)>,
    /// A resource's `share: demand`: spare capacity to the entities that
    /// want it; `false` is `share: base` (the default, one factor for all).
    pub share_demand: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub namespace: String,
    pub system: Option<LevelDecl>,
    pub resources: Vec<(String, LevelDecl)>,
    pub entities: Vec<(String, Vec<(String, LevelDecl)>)>,
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

    /// What the Python CLI warns of too: a resource that cascades while no
    /// entity of the manifest has limits of its own for it (nor an
    /// entity-wide `_default_`), so parents are limited by the per-user
    /// resource defaults.
    pub fn cascade_warnings(&self) -> Vec<String> {
        let covered: Vec<&str> = self
            .entities
            .iter()
            .flat_map(|(_, resources)| resources.iter().map(|(r, _)| r.as_str()))
            .collect();
        if covered.contains(&zae_table::level::DEFAULT_RESOURCE) {
            return Vec::new();
        }
        self.resources
            .iter()
            .filter(|(name, level)| {
                level.cascade == Some(true) && !covered.contains(&name.as_str())
            })
            .map(|(name, _)| {
                format!(
                    "resources.{name} sets cascade: true, but no entity in this manifest has \
                     limits of its own for '{name}', so parents are limited by the per-user \
                     resource defaults"
                )
            })
            .collect()
    }

    pub fn from_yaml(text: &str) -> Result<Manifest, Invalid> {
        let mut tree: Tree = yaml_serde::from_str(text).map_err(|err| Invalid {
            problems: vec![Problem::new(
                &Path::root(),
                format!("not valid YAML: {err}"),
            )],
            spelling: Spelling::Yaml,
        })?;
        // Keys in the text's own spelling, never YAML's reading of it.
        let mut renamed = Vec::new();
        if let Some(raw) = written::read(text) {
            written::keys_as_written(&mut tree, &raw, &Path::root(), &mut renamed);
        }
        match Manifest::parse(&tree, Spelling::Yaml) {
            Ok(manifest) if renamed.is_empty() => Ok(manifest),
            Ok(_) => Err(Invalid {
                problems: renamed,
                spelling: Spelling::Yaml,
            }),
            Err(mut invalid) => {
                renamed.append(&mut invalid.problems);
                invalid.problems = renamed;
                Err(invalid)
            }
        }
    }

    /// Validates a whole manifest, collecting every problem.
    pub fn parse(tree: &Tree, spelling: Spelling) -> Result<Manifest, Invalid> {
        let mut problems = Vec::new();
        let manifest = parse::manifest(tree, &mut problems);
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

    /// What the manifest declares about adaptive limits: every resource's
    /// estimated capacity, and every level's limit that opted in.
    pub fn declaration(&self) -> Declaration {
        let per_resource = |field: fn(&LevelDecl) -> &Vec<(String, i64)>| {
            self.resources
                .iter()
                .filter(|(_, decl)| !field(decl).is_empty())
                .map(|(name, decl)| (name.clone(), field(decl).iter().cloned().collect()))
                .collect()
        };
        let capacity = per_resource(|decl| &decl.estimated_capacity);
        let target = per_resource(|decl| &decl.target_utilization);
        let demand = self
            .resources
            .iter()
            .filter(|(_, decl)| decl.share_demand)
            .map(|(name, _)| name.clone())
            .collect();
        let mut levels: Vec<AdaptiveLevel> = self
            .declared()
            .into_iter()
            .flat_map(|(level, decl)| {
                decl.limits.iter().filter_map(move |(name, limit)| {
                    limit.adaptive.map(|a| AdaptiveLevel {
                        level: level.clone(),
                        limit: name.clone(),
                        max_scale: a.max_scale,
                        max_factor: zae_adaptive::law::max_factor(
                            limit.capacity,
                            limit.refill_amount,
                            a.max_scale,
                        ),
                        shadow: a.shadow,
                    })
                })
            })
            .collect();
        levels.sort();
        Declaration {
            capacity,
            target,
            levels,
            demand,
        }
    }

    /// What `plan` says about adaptive limits that will not scale: a system
    /// or entity-default limit applies per resource, and stays at base on
    /// every resource without an estimated capacity for it.
    pub fn adaptive_notes(&self) -> Vec<String> {
        let declaration = self.declaration();
        declaration
            .levels
            .iter()
            .filter(|l| match &l.level {
                Level::System => true,
                Level::Entity { resource, .. } => resource == DEFAULT_RESOURCE,
                Level::Resource(_) => false,
            })
            .map(|l| {
                let scaled: Vec<&str> = declaration
                    .capacity
                    .iter()
                    .filter(|(_, limits)| limits.contains_key(&l.limit))
                    .map(|(r, _)| r.as_str())
                    .collect();
                let on = if scaled.is_empty() {
                    "no resource".to_owned()
                } else {
                    format!("only {}", scaled.join(", "))
                };
                format!(
                    "{} limit '{}' is adaptive per resource: it scales on {on}; every \
                     resource without estimated_capacity.{} stays at base",
                    l.level.describe(),
                    l.limit,
                    l.limit
                )
            })
            .collect()
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
}

impl LimitDecl {
    /// The limit as a config item stores it: schedules in the compact encoding.
    pub fn config(&self, name: &str) -> LimitConfig {
        let some = |text: String| (!text.is_empty()).then_some(text);
        LimitConfig {
            name: name.to_owned(),
            capacity: self.capacity,
            refill_amount: self.refill_amount,
            refill_period: self.refill_period,
            sched: some(compact::encode(&self.schedule)),
            rsched: some(compact::encode_reset(&self.reset_schedule)),
            reset_after_seconds: self.reset_after_seconds,
            soft: self.soft,
        }
    }
}

impl LevelDecl {
    /// What the level's config item holds once written.
    pub fn config(&self) -> LevelConfig {
        let sched_tz = self
            .limits
            .iter()
            .flat_map(|(_, l)| l.schedule.iter().chain(&l.reset_schedule))
            .map(|e| e.tz.clone())
            .next();
        LevelConfig {
            limits: self
                .limits
                .iter()
                .map(|(name, limit)| limit.config(name))
                .collect(),
            sched_tz,
            on_unavailable: self.on_unavailable.clone(),
            disabled: self.disabled,
            cascade: self.cascade,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Issue 28, item 9: keys YAML types as numbers or booleans keep their
    /// text or are refused at their path; never renamed in silence.
    #[test]
    fn keys_yaml_would_rename_are_refused_and_the_rest_keep_their_text() {
        let resources = |keys: &str| {
            let limits = "{limits: {rpm: {capacity: 3}}}";
            let entries: Vec<String> = keys.split(',').map(|k| format!("{k}: {limits}")).collect();
            format!(
                "namespace: default\nresources: {{{}}}\n",
                entries.join(", ")
            )
        };
        for (keys, says) in [
            (
                "0x1F",
                "resources.0x1F: the key 0x1F is read by YAML as the number 31",
            ),
            (
                "1e3",
                "resources.1e3: the key 1e3 is read by YAML as the number 1000",
            ),
            (
                "True",
                "resources.True: the key True is read by YAML as the boolean true",
            ),
            ("True,\"true\"", "resources.True: the key True"),
            ("true,\"true\"", "resources.true: declared twice"),
        ] {
            let err = Manifest::from_yaml(&resources(keys))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{keys}: {err}");
        }
        let entities = |keys: &str| {
            let levels = "{resources: {gpt-4: {limits: {rpm: {capacity: 3}}}}}";
            let entries: Vec<String> = keys.split(',').map(|k| format!("{k}: {levels}")).collect();
            format!("namespace: default\nentities: {{{}}}\n", entries.join(", "))
        };
        let kept = Manifest::from_yaml(&entities("404,\"0x1F\",true")).unwrap();
        let mut names: Vec<&str> = kept.entities.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        assert_eq!(names, ["0x1F", "404", "true"]);
        let entity = "namespace: default\nentities: {0x1F: {resources: {gpt-4: {limits: {rpm: {capacity: 3}}}}}}\n";
        let err = Manifest::from_yaml(entity).unwrap_err().to_string();
        assert!(err.contains("entities.0x1F: the key 0x1F"), "{err}");
    }

    /// How the YAML crate reads what a manifest may hold, pinned: a change of
    /// crate must give the same result on each (docs/dependencies.md).
    #[test]
    fn yaml_reading_is_pinned() {
        let limit = |value: &str| {
            format!("namespace: default\nresources:\n  gpt-4:\n    limits:\n      rpm: {value}\n")
        };
        let capacity =
            |text: &str| Manifest::from_yaml(text).map(|m| m.resources[0].1.limits[0].1.capacity);
        // YAML 1.2: yes/no/on/off are strings, so a boolean field refuses them.
        for word in ["yes", "no", "on", "off", "y"] {
            let err =
                Manifest::from_yaml(&limit(&format!("{{capacity: 3, soft: {word}}}"))).unwrap_err();
            assert!(err.to_string().contains("soft"), "{word}: {err}");
        }
        assert_eq!(capacity(&limit("{capacity: 1e3}")).unwrap(), 1000);
        assert_eq!(
            capacity(&limit("{capacity: 017}")).ok(),
            None,
            "017 is a string"
        );
        assert_eq!(
            capacity(&limit("{capacity: 1_000}")).ok(),
            None,
            "1_000 is a string"
        );
        for (text, says) in [
            (limit("{capacity: .inf}"), "capacity"),
            (limit("{capacity: 18446744073709551616}"), ""),
            (limit("{capacity: 3, capacity: 4}"), "duplicate"),
            (limit("{<<: {capacity: 3}}"), "<<"),
            ("namespace: a\n---\nnamespace: b\n".to_owned(), ""),
            (
                "namespace: default\nresources:\n\tgpt-4: {}\n".to_owned(),
                "",
            ),
        ] {
            let err = Manifest::from_yaml(&text).unwrap_err();
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
        // Anchors and aliases are expanded.
        let anchored =
            "namespace: default\nresources:\n  a: &l {limits: {rpm: {capacity: 3}}}\n  b: *l\n";
        let m = Manifest::from_yaml(anchored).unwrap();
        assert_eq!(m.resources.len(), 2);
        assert_eq!(m.resources[0].1, m.resources[1].1);
    }
    use zae_table::config::build_item;
    use zae_table::{Attr, Item};

    #[test]
    fn declared_levels_become_the_items_the_client_writes() {
        let manifest = Manifest::from_yaml(
            r#"
namespace: tenant-alpha
system: {on_unavailable: allow, limits: {rpm: {capacity: 10000}}}
resources:
  gpt-4: {cascade: true, limits: {tpm: {capacity: 50000, soft: true}}}
entities:
  user-1:
    resources:
      _default_: {disabled: bypass}
      gpt-4:
        limits:
          daily: {capacity: 100, reset_schedule: [{cron: "0 0 * * *", tz: UTC}]}
          session: {capacity: 5, reset_after_seconds: 3600}
"#,
        )
        .unwrap();
        let items: Vec<Item> = manifest
            .declared()
            .into_iter()
            .map(|(level, decl)| build_item("a7x3kq", &level, &decl.config()))
            .collect();
        let s = |v: &str| Attr::s(v);
        let n = |v: i64| Attr::n(v);
        assert_eq!(
            items[0],
            BTreeMap::from([
                ("PK".into(), s("a7x3kq/SYSTEM#")),
                ("SK".into(), s("#CONFIG")),
                ("config_version".into(), n(1)),
                ("on_unavailable".into(), s("allow")),
                ("l_rpm_cp".into(), n(10000)),
                ("l_rpm_ra".into(), n(10000)),
                ("l_rpm_rp".into(), n(60)),
                ("GSI4PK".into(), s("a7x3kq")),
                ("GSI4SK".into(), s("a7x3kq/SYSTEM#")),
            ])
        );
        assert_eq!(items[1]["l_tpm_soft"], Attr::Bool(true));
        assert_eq!(items[1]["cascade"], Attr::Bool(true));
        assert_eq!(items[1]["GSI4SK"], s("a7x3kq/RESOURCE#gpt-4"));
        assert!(!items[1].contains_key("GSI3PK"));
        assert_eq!(items[2]["disabled"], s("bypass"));
        assert_eq!(items[2]["GSI3PK"], s("a7x3kq/ENTITY_CONFIG#_default_"));
        assert_eq!(items[2]["GSI3SK"], s("user-1"));
        let quota = &items[3];
        assert_eq!(quota["SK"], s("#CONFIG#gpt-4"));
        assert_eq!(quota["l_daily_ra"], n(0));
        assert_eq!(quota["l_daily_rsched"], s("1m0h0"));
        assert_eq!(quota["sched_tz"], s("UTC"));
        assert_eq!(quota["w_session_rsa"], n(3600));
        assert_eq!(quota["w_session_ra"], n(0));

        let decoded = LevelConfig::decode(quota);
        assert_eq!(decoded, manifest.declared()[3].1.config());
    }
}
