//! Config items: built exactly as the 0.17.0 client's own `set_system_defaults`
//! / `set_resource_defaults` / `set_limits` build them, and decoded the way
//! its readers decode them; the namespace's audit retention they carry.

use crate::audit::DEFAULT_RETENTION_DAYS;
use crate::keys::{self, config_key};
use crate::level::Level;
use crate::value::{Attr, Item};
use std::collections::BTreeMap;

/// The client's ceilings (`zae_limiter.schedule`): tokens and seconds.
pub const MAX_TOKENS: i64 = 1_000_000_000_000_000;
pub const MAX_PERIOD_SECONDS: i64 = 1_000_000_000;

/// A level's `disabled`: enforced, not enforced, or bypassed (admitted and
/// still counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disabled {
    Yes,
    No,
    Bypass,
}

impl Disabled {
    /// As a config item stores it: a boolean, or the string `bypass`.
    pub fn attr(self) -> Attr {
        match self {
            Disabled::Yes => Attr::Bool(true),
            Disabled::No => Attr::Bool(false),
            Disabled::Bypass => Attr::s("bypass"),
        }
    }
}

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
    /// A plain drip: no schedules, no reset, hard.
    pub fn drip(name: &str, capacity: i64, refill_amount: i64, refill_period: i64) -> LimitConfig {
        LimitConfig {
            name: name.to_owned(),
            capacity,
            refill_amount,
            refill_period,
            sched: None,
            rsched: None,
            reset_after_seconds: None,
            soft: false,
        }
    }

    fn prefix(&self) -> &'static str {
        if self.reset_after_seconds.is_some() {
            "w_"
        } else {
            "l_"
        }
    }

    /// A config item still holds this limit's capacity, amount and period:
    /// the check of a write that read the level through a cache.
    pub fn still_configured(&self) -> crate::store::Condition {
        let fields = [
            ("cp", self.capacity),
            ("ra", self.refill_amount),
            ("rp", self.refill_period),
        ];
        let mut condition = crate::store::Condition::default();
        let mut terms = Vec::new();
        for (field, value) in fields {
            let (name, at) = (format!("#{field}"), format!(":{field}"));
            terms.push(format!("{name} = {at}"));
            let attr = format!("{}{}_{field}", self.prefix(), self.name);
            condition.names.insert(name, attr);
            condition.values.insert(at, Attr::n(value));
        }
        condition.expression = terms.join(" AND ");
        condition
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
    pub fn soft_names(&self) -> Vec<String> {
        self.limits
            .iter()
            .filter(|l| l.soft)
            .map(|l| l.name.clone())
            .collect()
    }

    /// Reads a stored config item. Limits the client could not read either
    /// (a field missing, not a whole number, or beyond the client's
    /// ceilings) are left out.
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
                // Within the client's ceilings, so millitoken and millisecond
                // arithmetic on them cannot overflow.
                let within = |f: &str, min: i64, max: i64| {
                    field(f)
                        .and_then(Attr::as_int)
                        .filter(|v| (min..=max).contains(v))
                };
                let int = |f: &str| match f {
                    "cp" => within(f, 1, MAX_TOKENS),
                    "ra" => within(f, 0, MAX_TOKENS),
                    _ => within(f, 1, MAX_PERIOD_SECONDS),
                };
                let text = |f: &str| field(f).and_then(Attr::as_s).map(str::to_owned);
                Some(LimitConfig {
                    capacity: int("cp")?,
                    refill_amount: int("ra")?,
                    refill_period: int("rp")?,
                    sched: text("sched"),
                    rsched: text("rsched"),
                    reset_after_seconds: if prefix == "w_" {
                        Some(int("rsa")?)
                    } else {
                        None
                    },
                    soft: matches!(field("soft"), Some(Attr::Bool(true))),
                    name,
                })
            })
            .collect();
        LevelConfig {
            limits,
            sched_tz: item.get("sched_tz").and_then(Attr::as_s).map(str::to_owned),
            on_unavailable: item
                .get("on_unavailable")
                .and_then(Attr::as_s)
                .map(str::to_owned),
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
        let scheduled = self
            .limits
            .iter()
            .any(|l| l.sched.is_some() || l.rsched.is_some());
        if let (true, Some(tz)) = (scheduled, &self.sched_tz) {
            item.insert("sched_tz".into(), Attr::s(tz));
        }
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
                Attr::s(keys::gsi3_pk_entity_config(namespace, resource)),
            );
            item.insert("GSI3SK".into(), Attr::s(entity));
        }
    }
    config.write_limits(&mut item);
    if !matches!(level, Level::System) {
        if let Some(disabled) = config.disabled {
            item.insert("disabled".into(), disabled.attr());
        }
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
    let system = built.get("SK").and_then(Attr::as_s) == Some(keys::SK_CONFIG)
        && built
            .get("PK")
            .and_then(Attr::as_s)
            .is_some_and(|pk| pk.ends_with(keys::SYSTEM_PREFIX));
    if let Some(retention) = live.and_then(|live| live.get(AUDIT_RETENTION))
        && system
    {
        item.insert(AUDIT_RETENTION.into(), retention.clone());
    }
    item
}

/// The namespace's audit retention in days, from its system config item:
/// `audit_retention_days` when a positive whole number, else the client's default.
pub fn audit_retention_days(system_config: Option<&Item>) -> i64 {
    system_config
        .and_then(|item| item.get(AUDIT_RETENTION))
        .and_then(Attr::as_int)
        .filter(|days| *days > 0)
        .unwrap_or(DEFAULT_RETENTION_DAYS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(name: &str) -> LimitConfig {
        LimitConfig {
            name: name.into(),
            capacity: 100,
            refill_amount: 0,
            refill_period: 60,
            sched: None,
            rsched: Some("1m0h0".into()),
            reset_after_seconds: None,
            soft: true,
        }
    }

    #[test]
    fn a_built_item_decodes_to_what_it_was_built_from() {
        let mut session = limit("session");
        session.rsched = None;
        session.reset_after_seconds = Some(3600);
        let config = LevelConfig {
            limits: vec![limit("daily"), session],
            sched_tz: Some("UTC".into()),
            on_unavailable: None,
            disabled: Some(Disabled::Bypass),
            cascade: Some(false),
        };
        let level = Level::Entity {
            entity: "user-1".into(),
            resource: "gpt-4".into(),
        };
        let item = build_item("a7x3kq", &level, &config);
        assert_eq!(item["PK"], Attr::s("a7x3kq/ENTITY#user-1"));
        assert_eq!(item["SK"], Attr::s("#CONFIG#gpt-4"));
        assert_eq!(item["GSI3PK"], Attr::s("a7x3kq/ENTITY_CONFIG#gpt-4"));
        assert_eq!(item["w_session_rsa"], Attr::n(3600));
        assert_eq!(item["disabled"], Attr::s("bypass"));
        assert_eq!(LevelConfig::decode(&item), config);
    }

    #[test]
    fn the_retention_rule_takes_positive_whole_days_only() {
        let with = |attr: Attr| Item::from([(AUDIT_RETENTION.to_owned(), attr)]);
        assert_eq!(audit_retention_days(Some(&with(Attr::n(30)))), 30);
        assert_eq!(audit_retention_days(Some(&with(Attr::n(0)))), 90);
        assert_eq!(audit_retention_days(Some(&with(Attr::n("7.5")))), 90);
        assert_eq!(audit_retention_days(None), 90);
    }

    #[test]
    fn a_rewrite_of_the_system_config_keeps_its_retention() {
        let built = build_item("ns", &Level::System, &LevelConfig::default());
        let mut live = built.clone();
        live.insert(AUDIT_RETENTION.into(), Attr::n(30));
        assert_eq!(
            item_to_write(&built, Some(&live))[AUDIT_RETENTION],
            Attr::n(30)
        );
        let resource = build_item("ns", &Level::Resource("r".into()), &LevelConfig::default());
        assert!(!item_to_write(&resource, Some(&live)).contains_key(AUDIT_RETENTION));
    }

    #[test]
    fn limits_beyond_the_clients_ceilings_are_left_out() {
        let mut item = build_item(
            "ns",
            &Level::System,
            &LevelConfig {
                limits: vec![limit("ok"), limit("huge")],
                ..LevelConfig::default()
            },
        );
        item.insert("l_huge_cp".into(), Attr::n(i64::MAX));
        let names: Vec<String> = LevelConfig::decode(&item)
            .limits
            .into_iter()
            .map(|l| l.name)
            .collect();
        assert_eq!(names, ["ok"]);
    }
}
