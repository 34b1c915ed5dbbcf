//! The provisioner's records in a namespace's system partition, in the
//! 0.17.0 layout, so the Python provisioner and this one read each other's:
//! the `#PROVISIONER` state record (which levels a manifest manages) and the
//! pending fan-out items (`#PROVISIONER#PENDING#...`), leased to the applies
//! working on them.

use crate::keys::{self, SK_PROVISIONER};
use crate::level::Level;
use crate::store::{Condition, ITEM_ABSENT, ITEM_EXISTS};
use crate::value::{Attr, Item, MAX_ITEM_BYTES, item_size};
use std::collections::{BTreeMap, BTreeSet};

/// Pending-item attributes.
pub const OWNERS: &str = "owners";
pub const LEASE: &str = "lease";
pub const FULL: &str = "full";
pub const KIND: &str = "kind";
pub const LEVEL: &str = "level";
pub const TARGET: &str = "target";
pub const WRITTEN_MS: &str = "written_ms";
/// Where an unfinished fan-out goes on. This project's own attribute: the
/// 0.17.0 provisioner ignores it and runs such a fan-out from the start.
pub const CURSOR: &str = "cursor";

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

    /// Every level either set manages, in the record's sorted layout.
    pub fn union(&self, other: &ManagedSet) -> ManagedSet {
        let sorted = |a: &[String], b: &[String]| -> Vec<String> {
            let set: std::collections::BTreeSet<&String> = a.iter().chain(b).collect();
            set.into_iter().cloned().collect()
        };
        let mut entities: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (entity, resources) in self.entities.iter().chain(&other.entities) {
            let merged = sorted(
                entities.get(entity).map_or(&[][..], Vec::as_slice),
                resources,
            );
            entities.insert(entity.clone(), merged);
        }
        ManagedSet {
            system: self.system || other.system,
            resources: sorted(&self.resources, &other.resources),
            entities: entities.into_iter().collect(),
        }
    }
}

/// The record attribute naming the owning custom resource.
pub const CFN_OWNER: &str = "cfn_owner";
/// The record attribute holding the owner's [`Rollback`]. This project's
/// own: the 0.17.0 provisioner neither reads nor keeps it.
pub const CFN_ROLLBACK: &str = "cfn_rollback";

/// The largest record that carries its [`Rollback`]: three quarters of
/// DynamoDB's item limit, so that no error in our size estimate can make a
/// record that fitted without it fail with it.
pub const ROLLBACK_BOUND: usize = MAX_ITEM_BYTES / 4 * 3;

/// What a custom resource's claim found, so that the rollback of the
/// request that made it undoes that request's writes and nothing more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollback {
    /// The managed set before the claim: what the rollback puts back.
    pub managed: ManagedSet,
    /// The record's hash before the claim.
    pub applied_hash: Option<String>,
    /// Levels no config item held before the owner wrote them: the only
    /// ones the rollback deletes.
    pub created: ManagedSet,
    /// No adaptive declaration existed before the owner wrote one.
    pub adaptive_created: bool,
}

impl ManagedSet {
    /// A set of levels, in the record's sorted layout.
    pub fn of(levels: impl IntoIterator<Item = Level>) -> ManagedSet {
        let mut set = ManagedSet::default();
        let mut entities: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut resources = BTreeSet::new();
        for level in levels {
            match level {
                Level::System => set.system = true,
                Level::Resource(resource) => {
                    resources.insert(resource);
                }
                Level::Entity { entity, resource } => {
                    entities.entry(entity).or_default().insert(resource);
                }
            }
        }
        set.resources = resources.into_iter().collect();
        set.entities = entities
            .into_iter()
            .map(|(entity, resources)| (entity, resources.into_iter().collect()))
            .collect();
        set
    }

    fn encode(&self) -> Attr {
        let list = |names: &[String]| Attr::L(names.iter().map(Attr::s).collect());
        let entities = self
            .entities
            .iter()
            .map(|(entity, resources)| (entity.clone(), list(resources)))
            .collect();
        Attr::M(BTreeMap::from([
            ("system".to_owned(), Attr::Bool(self.system)),
            ("resources".to_owned(), list(&self.resources)),
            ("entities".to_owned(), Attr::M(entities)),
        ]))
    }

    fn decode(attr: Option<&Attr>) -> Option<ManagedSet> {
        let Some(Attr::M(map)) = attr else {
            return None;
        };
        let Some(Attr::M(entities)) = map.get("entities") else {
            return None;
        };
        let mut entities: Vec<(String, Vec<String>)> = entities
            .iter()
            .map(|(entity, resources)| (entity.clone(), strings(Some(resources))))
            .collect();
        entities.sort();
        Some(ManagedSet {
            system: matches!(map.get("system"), Some(Attr::Bool(true))),
            resources: strings(map.get("resources")),
            entities,
        })
    }
}

impl Rollback {
    fn encode(&self) -> Attr {
        let mut map = BTreeMap::from([
            ("managed".to_owned(), self.managed.encode()),
            ("created".to_owned(), self.created.encode()),
            (
                "adaptive_created".to_owned(),
                Attr::Bool(self.adaptive_created),
            ),
        ]);
        if let Some(hash) = &self.applied_hash {
            map.insert("applied_hash".to_owned(), Attr::s(hash));
        }
        Attr::M(map)
    }

    /// `None` for anything but what this build wrote: a rollback that
    /// cannot tell what it may undo undoes nothing.
    fn decode(attr: Option<&Attr>) -> Option<Rollback> {
        let Some(Attr::M(map)) = attr else {
            return None;
        };
        Some(Rollback {
            managed: ManagedSet::decode(map.get("managed"))?,
            applied_hash: map
                .get("applied_hash")
                .and_then(Attr::as_s)
                .map(str::to_owned),
            created: ManagedSet::decode(map.get("created"))?,
            adaptive_created: matches!(map.get("adaptive_created"), Some(Attr::Bool(true))),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    pub managed: ManagedSet,
    /// `<StackId>|<LogicalResourceId>` of the custom resource that last
    /// applied; absent for CLI applies and for records the reference wrote.
    pub owner: Option<String>,
    /// A 0.16 record's unfinished cascade fan-outs, owed by the next apply.
    pub cascade_pending: Vec<Level>,
    /// The hash of the manifest last applied.
    pub applied_hash: Option<String>,
    /// What the owner's rollback may undo; kept while the owner holds the
    /// namespace.
    pub rollback: Option<Rollback>,
    /// The record as it was read (or last written by this apply): every
    /// write of it is conditional on it, so a write made meanwhile by
    /// another apply is never overwritten.
    pub stamp: Stamp,
}

/// The record attribute every write of the record sets (the reference's too).
const LAST_APPLIED: &str = "last_applied";

/// Which version of the `#PROVISIONER` record an apply read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Stamp {
    /// No record.
    #[default]
    Absent,
    /// A record whose `last_applied` is this (microseconds, so two writes
    /// of one namespace's record do not share it).
    At(String),
    /// A record without `last_applied`, which no provisioner writes.
    Unstamped,
}

impl Stamp {
    fn of(item: Option<&Item>) -> Stamp {
        match item.map(|item| item.get(LAST_APPLIED).and_then(Attr::as_s)) {
            None => Stamp::Absent,
            Some(Some(at)) => Stamp::At(at.to_owned()),
            Some(None) => Stamp::Unstamped,
        }
    }

    /// The condition that holds while the record is still this version.
    /// Its placeholders are `#la` and `:la`.
    pub fn unchanged(&self) -> Condition {
        let names = BTreeMap::from([("#la".to_owned(), LAST_APPLIED.to_owned())]);
        match self {
            Stamp::Absent => Condition::plain(ITEM_ABSENT),
            Stamp::At(at) => Condition {
                expression: "#la = :la".into(),
                names,
                values: BTreeMap::from([(":la".to_owned(), Attr::s(at))]),
            },
            Stamp::Unstamped => Condition {
                expression: format!("{ITEM_EXISTS} AND attribute_not_exists(#la)"),
                names,
                values: BTreeMap::new(),
            },
        }
    }
}

fn strings(attr: Option<&Attr>) -> Vec<String> {
    match attr {
        Some(Attr::L(items)) => items
            .iter()
            .filter_map(Attr::as_s)
            .map(str::to_owned)
            .collect(),
        Some(Attr::Ss(set)) => set.iter().cloned().collect(),
        _ => Vec::new(),
    }
}

impl State {
    pub fn decode(item: Option<&Item>) -> State {
        let Some(item) = item else {
            return State::default();
        };
        let mut entities: Vec<(String, Vec<String>)> = match item.get("managed_entities") {
            Some(Attr::M(map)) => map
                .iter()
                .map(|(entity, resources)| (entity.clone(), strings(Some(resources))))
                .collect(),
            _ => Vec::new(),
        };
        entities.sort();
        let cascade_pending = match item.get("cascade_pending") {
            Some(Attr::L(entries)) => entries
                .iter()
                .filter_map(|entry| match entry {
                    Attr::M(m) => Level::from_parts(
                        m.get("level").and_then(Attr::as_s)?,
                        m.get("target").and_then(Attr::as_s).unwrap_or_default(),
                    ),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        State {
            managed: ManagedSet {
                system: matches!(item.get("managed_system"), Some(Attr::Bool(true))),
                resources: strings(item.get("managed_resources")),
                entities,
            },
            owner: item.get(CFN_OWNER).and_then(Attr::as_s).map(str::to_owned),
            cascade_pending,
            applied_hash: item
                .get("applied_hash")
                .and_then(Attr::as_s)
                .map(str::to_owned),
            rollback: Rollback::decode(item.get(CFN_ROLLBACK)),
            stamp: Stamp::of(Some(item)),
        }
    }

    /// The record as the reference writes it, and `cfn_owner` when owned.
    pub fn encode(&self, namespace: &str, applied_at: &str, applied_hash: &str) -> Item {
        let pk = keys::pk_system(namespace);
        let list = |names: &[String]| Attr::L(names.iter().map(Attr::s).collect());
        let mut item = BTreeMap::from([
            ("PK".to_owned(), Attr::s(&pk)),
            ("SK".to_owned(), Attr::s(SK_PROVISIONER)),
            ("GSI4PK".to_owned(), Attr::s(namespace)),
            ("GSI4SK".to_owned(), Attr::s(&pk)),
            ("managed_system".to_owned(), Attr::Bool(self.managed.system)),
            (
                "managed_resources".to_owned(),
                list(&self.managed.resources),
            ),
            (
                "managed_entities".to_owned(),
                Attr::M(
                    self.managed
                        .entities
                        .iter()
                        .map(|(entity, resources)| (entity.clone(), list(resources)))
                        .collect(),
                ),
            ),
            (LAST_APPLIED.to_owned(), Attr::s(applied_at)),
            ("applied_hash".to_owned(), Attr::s(applied_hash)),
        ]);
        if let Some(owner) = &self.owner {
            item.insert(CFN_OWNER.into(), Attr::s(owner));
        }
        if let Some(rollback) = &self.rollback {
            let rollback = rollback.encode();
            // It can double the record: past the bound it is left out, and
            // the rollback then deletes nothing (as with an earlier build's
            // record), rather than every write of the record failing.
            let size = item_size(&item)
                .saturating_add(CFN_ROLLBACK.len())
                .saturating_add(rollback.size());
            if size <= ROLLBACK_BOUND {
                item.insert(CFN_ROLLBACK.into(), rollback);
            }
        }
        item
    }
}

/// Fan-out kinds, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Disabled,
    Cascade,
    Soft,
    Sync,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Disabled, Kind::Cascade, Kind::Soft, Kind::Sync];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Disabled => "disabled",
            Kind::Cascade => "cascade",
            Kind::Soft => "soft",
            Kind::Sync => "sync",
        }
    }
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One owed fan-out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FanOut {
    pub kind: Kind,
    pub level: Level,
}

impl FanOut {
    pub fn sk(&self) -> String {
        keys::sk_pending(self.kind.name(), &self.level)
    }
    /// Run order: by kind, resource levels before the others within a kind.
    pub fn run_order(&self) -> (Kind, bool) {
        (self.kind, !matches!(self.level, Level::Resource(_)))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    pub token: String,
    pub lease_ms: Option<i64>,
    pub full: bool,
}

impl Share {
    pub fn expired(&self, now_ms: i64) -> bool {
        self.lease_ms.is_none_or(|lease| lease < now_ms)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub fan_out: FanOut,
    pub shares: Vec<Share>,
    /// An owners map exists (possibly empty), as opposed to no map at all.
    pub has_map: bool,
    pub cursor: Option<Cursor>,
}

/// A fan-out's place in its bucket discovery: the pass (1, or 2 for the
/// second query that catches buckets the index showed late) and the last
/// key read (DynamoDB's `LastEvaluatedKey`), `None` at the pass's start. The
/// place holds only while the level's config is the one it ran with
/// (`config`, a fingerprint); the names are what the write that made the
/// fan-out owed knew and the live config no longer shows (limits it removed,
/// limits whose soft-ness it changed), kept for whoever goes on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cursor {
    pub pass: u8,
    pub after: Option<Item>,
    pub config: Option<String>,
    pub previous: BTreeSet<String>,
    pub soft_changed: BTreeSet<String>,
}

const PASS: &str = "pass";
const AFTER: &str = "after";
const CONFIG: &str = "config";
const PREVIOUS: &str = "previous";
const SOFT_CHANGED: &str = "soft_changed";

impl Cursor {
    pub fn start() -> Cursor {
        Cursor {
            pass: 1,
            ..Cursor::default()
        }
    }

    pub fn encode(&self) -> Attr {
        let mut map = BTreeMap::from([(PASS.to_owned(), Attr::n(self.pass))]);
        if let Some(after) = &self.after {
            map.insert(AFTER.to_owned(), Attr::M(after.clone()));
        }
        if let Some(config) = &self.config {
            map.insert(CONFIG.to_owned(), Attr::s(config));
        }
        // DynamoDB refuses an empty set: an empty one is left out.
        for (name, set) in [
            (PREVIOUS, &self.previous),
            (SOFT_CHANGED, &self.soft_changed),
        ] {
            if !set.is_empty() {
                map.insert(name.to_owned(), Attr::Ss(set.clone()));
            }
        }
        Attr::M(map)
    }

    /// `None` for anything but a cursor this build wrote: start over.
    pub fn decode(attr: &Attr) -> Option<Cursor> {
        let Attr::M(map) = attr else { return None };
        let pass = u8::try_from(map.get(PASS)?.as_int()?).ok()?;
        let after = match map.get(AFTER) {
            None => None,
            Some(Attr::M(key)) if key.values().all(|v| matches!(v, Attr::S(_))) => {
                Some(key.clone())
            }
            Some(_) => return None,
        };
        let set = |name: &str| match map.get(name) {
            None => Some(BTreeSet::new()),
            Some(Attr::Ss(set)) => Some(set.clone()),
            Some(_) => None,
        };
        let config = match map.get(CONFIG) {
            None => None,
            Some(Attr::S(config)) => Some(config.clone()),
            Some(_) => return None,
        };
        matches!(pass, 1 | 2).then_some(Cursor {
            pass,
            after,
            config,
            previous: set(PREVIOUS)?,
            soft_changed: set(SOFT_CHANGED)?,
        })
    }

    /// Where a run goes on: this place while the level's config is still
    /// `config`, otherwise the start (the names carry over either way).
    pub fn resumed_under(&self, config: Option<&str>) -> Cursor {
        match self.config.as_deref() == config {
            true => self.clone(),
            false => Cursor {
                previous: self.previous.clone(),
                soft_changed: self.soft_changed.clone(),
                ..Cursor::start()
            },
        }
    }
}

impl Pending {
    /// Nobody is working on it: no share, or a share whose lease ran out.
    pub fn claimable(&self, now_ms: i64) -> bool {
        self.shares.is_empty() || self.shares.iter().any(|s| s.expired(now_ms))
    }
    /// Left by a full apply that did not finish.
    pub fn interrupted_full(&self, now_ms: i64) -> bool {
        self.shares.iter().any(|s| s.full && s.expired(now_ms))
    }
}

/// Reads a pending item; `None` for one this build cannot read.
pub fn decode_pending(item: &Item) -> Option<Pending> {
    let text = |name: &str| item.get(name).and_then(Attr::as_s);
    let kind = Kind::parse(text(KIND)?)?;
    let level = Level::from_parts(text(LEVEL)?, text(TARGET)?)?;
    let mut shares = Vec::new();
    let has_map = matches!(item.get(OWNERS), Some(Attr::M(_)));
    if let Some(Attr::M(owners)) = item.get(OWNERS) {
        for (token, entry) in owners {
            let Attr::M(entry) = entry else { continue };
            shares.push(Share {
                token: token.clone(),
                lease_ms: entry.get(LEASE).and_then(Attr::as_int),
                full: matches!(entry.get(FULL), Some(Attr::Bool(true))),
            });
        }
    }
    Some(Pending {
        fan_out: FanOut { kind, level },
        shares,
        has_map,
        cursor: item.get(CURSOR).and_then(Cursor::decode),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_keeps_the_reference_layout() {
        let state = State {
            managed: ManagedSet {
                system: true,
                resources: vec!["gpt-4".into()],
                entities: vec![("user-1".into(), vec!["_default_".into(), "gpt-4".into()])],
            },
            owner: Some("arn:stack|TenantLimits".into()),
            cascade_pending: Vec::new(),
            applied_hash: Some("sha256:x".into()),
            rollback: None,
            stamp: Stamp::Absent,
        };
        let at = "2026-11-29T18:00:00.000000+00:00";
        let item = state.encode("a7x3kq", at, "sha256:x");
        let state = State {
            stamp: Stamp::At(at.into()),
            ..state
        };
        assert_eq!(item["PK"], Attr::s("a7x3kq/SYSTEM#"));
        assert_eq!(item["GSI4SK"], Attr::s("a7x3kq/SYSTEM#"));
        assert_eq!(item["managed_resources"], Attr::L(vec![Attr::s("gpt-4")]));
        assert_eq!(State::decode(Some(&item)), state);
        assert_eq!(State::decode(None), State::default());
    }

    #[test]
    fn a_claims_rollback_round_trips_and_a_foreign_one_is_none() {
        let user = |resource: &str| Level::Entity {
            entity: "user-1".into(),
            resource: resource.into(),
        };
        let rollback = Rollback {
            managed: ManagedSet::of([Level::System, Level::Resource("gpt-4".into())]),
            applied_hash: Some("sha256:cli".into()),
            created: ManagedSet::of([
                user("gpt-4"),
                user("_default_"),
                Level::Resource("b".into()),
            ]),
            adaptive_created: true,
        };
        assert_eq!(
            rollback.created.entities,
            vec![("user-1".into(), vec!["_default_".into(), "gpt-4".into()])]
        );
        let state = State {
            owner: Some("arn:stack|TenantLimits".into()),
            applied_hash: Some("sha256:x".into()),
            rollback: Some(rollback),
            ..State::default()
        };
        let at = "2026-11-29T18:00:00.000000+00:00";
        let mut item = state.encode("a7x3kq", at, "sha256:x");
        let state = State {
            stamp: Stamp::At(at.into()),
            ..state
        };
        assert_eq!(State::decode(Some(&item)), state);
        item.insert(CFN_ROLLBACK.into(), Attr::s("junk"));
        assert_eq!(State::decode(Some(&item)).rollback, None);
    }

    #[test]
    fn keys_match_the_reference_layout() {
        let system = FanOut {
            kind: Kind::Soft,
            level: Level::System,
        };
        assert_eq!(system.sk(), "#PROVISIONER#PENDING#soft#system#");
        let entity = FanOut {
            kind: Kind::Sync,
            level: Level::Entity {
                entity: "user-1".into(),
                resource: "gpt-4".into(),
            },
        };
        assert_eq!(entity.sk(), "#PROVISIONER#PENDING#sync#entity#user-1/gpt-4");
    }

    #[test]
    fn a_share_without_a_lease_or_past_it_is_expired() {
        let share = |lease| Share {
            token: "t".into(),
            lease_ms: lease,
            full: true,
        };
        assert!(share(None).expired(10));
        assert!(share(Some(9)).expired(10));
        assert!(!share(Some(10)).expired(10));
        let pending = Pending {
            fan_out: FanOut {
                kind: Kind::Soft,
                level: Level::System,
            },
            shares: vec![share(Some(9))],
            has_map: true,
            cursor: None,
        };
        assert!(pending.claimable(10) && pending.interrupted_full(10));
        assert!(!pending.claimable(5));
    }

    #[test]
    fn a_cursor_round_trips_and_anything_else_starts_over() {
        let key = Item::from([
            ("PK".to_owned(), Attr::s("ns/BUCKET#e#r#0")),
            ("GSI4PK".to_owned(), Attr::s("ns")),
        ]);
        for cursor in [
            Cursor::start(),
            Cursor {
                pass: 2,
                after: Some(key.clone()),
                config: Some("f00d".into()),
                previous: BTreeSet::from(["burst".into()]),
                soft_changed: BTreeSet::from(["tpm".into()]),
            },
        ] {
            assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
        }
        let map = |pass: Attr, after: Attr| {
            Attr::M(BTreeMap::from([
                ("pass".into(), pass),
                ("after".into(), after),
            ]))
        };
        for bad in [
            Attr::s("1"),
            map(Attr::n(3), Attr::M(key.clone())),
            map(Attr::n(1), Attr::s("x")),
            map(Attr::n(1), Attr::M(Item::from([("PK".into(), Attr::n(1))]))),
            map(Attr::s("1"), Attr::M(key)),
        ] {
            assert_eq!(Cursor::decode(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_place_holds_only_under_the_config_it_ran_with() {
        let cursor = Cursor {
            pass: 2,
            after: Some(Item::new()),
            config: Some("a".into()),
            previous: BTreeSet::from(["burst".into()]),
            soft_changed: BTreeSet::new(),
        };
        assert_eq!(cursor.resumed_under(Some("a")), cursor);
        let moved = cursor.resumed_under(Some("b"));
        assert_eq!((moved.pass, moved.after), (1, None));
        assert_eq!(moved.previous, cursor.previous, "the names carry over");
    }

    #[test]
    fn managed_sets_unite_level_by_level() {
        let a = ManagedSet {
            system: false,
            resources: vec!["b".into()],
            entities: vec![("u1".into(), vec!["r".into()])],
        };
        let b = ManagedSet {
            system: true,
            resources: vec!["a".into(), "b".into()],
            entities: vec![
                ("u1".into(), vec!["_default_".into()]),
                ("u2".into(), vec!["r".into()]),
            ],
        };
        let union = a.union(&b);
        assert!(union.system);
        assert_eq!(union.resources, ["a", "b"]);
        assert_eq!(
            union.entities,
            vec![
                (
                    "u1".to_owned(),
                    vec!["_default_".to_owned(), "r".to_owned()]
                ),
                ("u2".to_owned(), vec!["r".to_owned()])
            ]
        );
    }
}
