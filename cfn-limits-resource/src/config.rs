//! Config items: built exactly as the 0.17.0 client's own `set_system_defaults`
//! / `set_resource_defaults` / `set_limits` build them, and decoded the way
//! its readers decode them.

use crate::manifest::{Disabled, Level, LevelDecl, LimitDecl};
use crate::schedule;
use crate::store::{Attr, Item};
use std::collections::BTreeMap;
use zae_table::keys;

/// The attribute the namespace's audit retention lives in, on the system
/// config item; a rewrite of that item keeps it.
pub const AUDIT_RETENTION: &str = "audit_retention_days";

/// One limit as stored: whole tokens and seconds, schedules compact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitConfig {
    pub name: String,
    pub capacity: i64,
    pub refill_amount: i64,
    pub refill_period: i64,
    pub sched: Option<String>,
    pub rsched: Option<String>,
    pub reset_after_seconds: Option<i64>,
    pub soft: bool,
}

impl LimitConfig {
    pub fn from_decl(name: &str, decl: &LimitDecl) -> LimitConfig {
        let some = |text: String| (!text.is_empty()).then_some(text);
        LimitConfig {
            name: name.to_owned(),
            capacity: decl.capacity,
            refill_amount: decl.refill_amount,
            refill_period: decl.refill_period,
            sched: some(schedule::encode(&decl.schedule)),
            rsched: some(schedule::encode_reset(&decl.reset_schedule)),
            reset_after_seconds: decl.reset_after_seconds,
            soft: decl.soft,
        }
    }
    fn prefix(&self) -> &'static str {
        if self.reset_after_seconds.is_some() {
            "w_"
        } else {
            "l_"
        }
    }
}

/// What a config item holds, whichever writer wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelConfig {
    pub limits: Vec<LimitConfig>,
    pub sched_tz: Option<String>,
    pub on_unavailable: Option<String>,
    pub disabled: Option<Disabled>,
    pub cascade: Option<bool>,
}

impl LevelConfig {
    pub fn from_decl(decl: &LevelDecl) -> LevelConfig {
        let sched_tz = decl
            .limits
            .iter()
            .flat_map(|(_, l)| l.schedule.iter().chain(&l.reset_schedule))
            .map(|e| e.tz.clone())
            .next();
        LevelConfig {
            limits: decl
                .limits
                .iter()
                .map(|(name, limit)| LimitConfig::from_decl(name, limit))
                .collect(),
            sched_tz,
            on_unavailable: decl.on_unavailable.clone(),
            disabled: decl.disabled,
            cascade: decl.cascade,
        }
    }

    pub fn soft_names(&self) -> Vec<String> {
        self.limits
            .iter()
            .filter(|l| l.soft)
            .map(|l| l.name.clone())
            .collect()
    }

    /// Reads a stored config item. Limits the client could not read either
    /// (a field missing or not a whole number) are left out.
    pub fn decode(item: &Item) -> LevelConfig {
        let mut names: Vec<(&'static str, String)> = item
            .keys()
            .filter_map(|attr| {
                let prefix = if attr.starts_with("l_") {
                    "l_"
                } else if attr.starts_with("w_") {
                    "w_"
                } else {
                    return None;
                };
                let name = attr.strip_prefix(prefix)?.strip_suffix("_cp")?;
                (!name.is_empty()).then(|| (prefix, name.to_owned()))
            })
            .collect();
        names.sort_by(|a, b| a.1.cmp(&b.1));
        let limits = names
            .into_iter()
            .filter_map(|(prefix, name)| {
                let field = |f: &str| item.get(&format!("{prefix}{name}_{f}"));
                let int = |f: &str| field(f).and_then(Attr::as_int);
                let text = |f: &str| field(f).and_then(Attr::as_s).map(str::to_owned);
                Some(LimitConfig {
                    capacity: int("cp")?,
                    refill_amount: int("ra")?,
                    refill_period: int("rp")?,
                    sched: text("sched"),
                    rsched: text("rsched"),
                    reset_after_seconds: if prefix == "w_" { Some(int("rsa")?) } else { None },
                    soft: matches!(field("soft"), Some(Attr::Bool(true))),
                    name,
                })
            })
            .collect();
        LevelConfig {
            limits,
            sched_tz: item.get("sched_tz").and_then(Attr::as_s).map(str::to_owned),
            on_unavailable: item.get("on_unavailable").and_then(Attr::as_s).map(str::to_owned),
            disabled: match item.get("disabled") {
                Some(Attr::Bool(true)) => Some(Disabled::Yes),
                Some(Attr::Bool(false)) => Some(Disabled::No),
                Some(Attr::S(s)) if s == "bypass" => Some(Disabled::Bypass),
                Some(Attr::S(_)) => Some(Disabled::No),
                _ => None,
            },
            cascade: match item.get("cascade") {
                Some(Attr::Bool(b)) => Some(*b),
                _ => None,
            },
        }
    }

    /// The limit attributes and `sched_tz`, as the client's serialiser writes them.
    fn write_limits(&self, item: &mut Item) {
        for limit in &self.limits {
            let attr = |field: &str| format!("{}{}_{field}", limit.prefix(), limit.name);
            item.insert(attr("cp"), Attr::n(limit.capacity));
            item.insert(attr("ra"), Attr::n(limit.refill_amount));
            item.insert(attr("rp"), Attr::n(limit.refill_period));
            if let Some(sched) = &limit.sched {
                item.insert(attr("sched"), Attr::s(sched));
            }
            if let Some(rsched) = &limit.rsched {
                item.insert(attr("rsched"), Attr::s(rsched));
            }
            if let Some(seconds) = limit.reset_after_seconds {
                item.insert(attr("rsa"), Attr::n(seconds));
            }
            if limit.soft {
                item.insert(attr("soft"), Attr::Bool(true));
            }
        }
        let scheduled = self.limits.iter().any(|l| l.sched.is_some() || l.rsched.is_some());
        if let (true, Some(tz)) = (scheduled, &self.sched_tz) {
            item.insert("sched_tz".into(), Attr::s(tz));
        }
    }
}

/// `(PK, SK)` of a level's config item.
pub fn config_key(namespace: &str, level: &Level) -> (String, String) {
    match level {
        Level::System => (keys::pk_system(namespace), keys::SK_CONFIG.to_owned()),
        Level::Resource(resource) => (
            format!("{namespace}/{}{resource}", keys::RESOURCE_PREFIX),
            keys::SK_CONFIG.to_owned(),
        ),
        Level::Entity { entity, resource } => (
            keys::pk_entity(namespace, entity),
            format!("{}#{resource}", keys::SK_CONFIG),
        ),
    }
}

/// The full item the client would write for this level and config.
pub fn build_item(namespace: &str, level: &Level, config: &LevelConfig) -> Item {
    let (pk, sk) = config_key(namespace, level);
    let mut item = BTreeMap::from([
        ("PK".to_owned(), Attr::s(&pk)),
        ("SK".to_owned(), Attr::s(sk)),
        ("config_version".to_owned(), Attr::n(1)),
        ("GSI4PK".to_owned(), Attr::s(namespace)),
        ("GSI4SK".to_owned(), Attr::s(&pk)),
    ]);
    match level {
        Level::System => {
            if let Some(value) = &config.on_unavailable {
                item.insert("on_unavailable".into(), Attr::s(value));
            }
        }
        Level::Resource(resource) => {
            item.insert("resource".into(), Attr::s(resource));
        }
        Level::Entity { entity, resource } => {
            item.insert("entity_id".into(), Attr::s(entity));
            item.insert("resource".into(), Attr::s(resource));
            item.insert(
                "GSI3PK".into(),
                Attr::s(format!("{namespace}/ENTITY_CONFIG#{resource}")),
            );
            item.insert("GSI3SK".into(), Attr::s(entity));
        }
    }
    config.write_limits(&mut item);
    if !matches!(level, Level::System) {
        match config.disabled {
            Some(Disabled::Yes) => item.insert("disabled".into(), Attr::Bool(true)),
            Some(Disabled::No) => item.insert("disabled".into(), Attr::Bool(false)),
            Some(Disabled::Bypass) => item.insert("disabled".into(), Attr::s("bypass")),
            None => None,
        };
        if let Some(cascade) = config.cascade {
            item.insert("cascade".into(), Attr::Bool(cascade));
        }
    }
    item
}

/// The item to write: the built one, keeping the namespace's audit retention
/// when it is stored on the system config item being replaced.
pub fn item_to_write(built: &Item, live: Option<&Item>) -> Item {
    let mut item = built.clone();
    if let Some(retention) = live.and_then(|live| live.get(AUDIT_RETENTION)) {
        if built.get("SK").and_then(Attr::as_s) == Some(keys::SK_CONFIG)
            && built
                .get("PK")
                .and_then(Attr::as_s)
                .is_some_and(|pk| pk.ends_with(keys::SYSTEM_PREFIX))
        {
            item.insert(AUDIT_RETENTION.into(), retention.clone());
        }
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Manifest;

    #[test]
    fn items_match_what_the_client_writes() {
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
            .map(|(level, decl)| build_item("a7x3kq", &level, &LevelConfig::from_decl(decl)))
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
        assert_eq!(decoded, LevelConfig::from_decl(manifest.declared()[3].1));
    }
}
