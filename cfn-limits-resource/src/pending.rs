//! Pending fan-out items: a bucket fan-out an apply owes is recorded before
//! the config write that makes it owed, and removed only once it finished,
//! so a run that dies (timeout, deadline guard, crash) leaves the work for
//! the next apply. Layout and lease rules are the 0.17.0 ones, so the Python
//! provisioner and this one can take over each other's leftovers.

use crate::manifest::Level;
use crate::store::{Attr, Item, Query, Returns, Store, StoreError, Update};
use std::collections::BTreeMap;
use zae_table::keys;

pub const SK_PENDING_PREFIX: &str = "#PROVISIONER#PENDING#";

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
        format!(
            "{SK_PENDING_PREFIX}{}#{}#{}",
            self.kind.name(),
            self.level.kind(),
            self.level.target().unwrap_or_default()
        )
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

fn decode(item: &Item) -> Option<Pending> {
    let text = |name: &str| item.get(name).and_then(Attr::as_s);
    let kind = Kind::parse(text("kind")?)?;
    let level = Level::from_parts(text("level")?, text("target")?)?;
    let mut shares = Vec::new();
    let has_map = matches!(item.get("owners"), Some(Attr::M(_)));
    if let Some(Attr::M(owners)) = item.get("owners") {
        for (token, entry) in owners {
            let Attr::M(entry) = entry else { continue };
            shares.push(Share {
                token: token.clone(),
                lease_ms: entry.get("lease").and_then(Attr::as_int),
                full: matches!(entry.get("full"), Some(Attr::Bool(true))),
            });
        }
    }
    Some(Pending {
        fan_out: FanOut { kind, level },
        shares,
        has_map,
    })
}

pub async fn read(store: &impl Store, namespace: &str) -> Result<Vec<Pending>, StoreError> {
    let items = store
        .query(&Query {
            index: None,
            pk_attr: "PK",
            pk: keys::pk_system(namespace),
            sk_attr: "SK",
            sk_prefix: SK_PENDING_PREFIX.into(),
            consistent: true,
        })
        .await?;
    Ok(items.iter().filter_map(decode).collect())
}

/// One apply's hold on pending items.
pub struct Holder<'a, S> {
    pub store: &'a S,
    pub namespace: String,
    pub token: String,
    pub lease_ms: i64,
    pub full: bool,
}

impl<S: Store> Holder<'_, S> {
    fn entry(&self) -> Attr {
        Attr::M(BTreeMap::from([
            ("lease".to_owned(), Attr::n(self.lease_ms)),
            ("full".to_owned(), Attr::Bool(self.full)),
        ]))
    }

    fn base(&self, fan_out: &FanOut) -> Update {
        let pk = keys::pk_system(&self.namespace);
        Update {
            values: BTreeMap::from([
                (":gpk".to_owned(), Attr::s(&self.namespace)),
                (":gsk".to_owned(), Attr::s(&pk)),
                (":kind".to_owned(), Attr::s(fan_out.kind.name())),
                (":level".to_owned(), Attr::s(fan_out.level.kind())),
                (
                    ":target".to_owned(),
                    Attr::s(fan_out.level.target().unwrap_or_default()),
                ),
                (
                    ":written".to_owned(),
                    Attr::n(chrono::Utc::now().timestamp_millis()),
                ),
                (":entry".to_owned(), self.entry()),
            ]),
            names: BTreeMap::from([
                ("#tok".to_owned(), self.token.clone()),
                ("#lvl".to_owned(), "level".to_owned()),
                ("#tgt".to_owned(), "target".to_owned()),
                ("#o".to_owned(), "owners".to_owned()),
            ]),
            pk,
            sk: fan_out.sk(),
            ..Update::default()
        }
    }

    /// Records this apply's share of `fan_out` before it becomes owed.
    pub async fn write_ahead(&self, fan_out: &FanOut) -> Result<(), StoreError> {
        const FIELDS: &str =
            "GSI4PK = :gpk, GSI4SK = :gsk, kind = :kind, #lvl = :level, #tgt = :target, written_ms = :written";
        let mut last = None;
        for _ in 0..2 {
            for (expression, condition) in [
                (
                    format!("SET #o = :owners, {FIELDS}"),
                    "attribute_not_exists(#o)",
                ),
                (
                    format!("SET #o.#tok = :entry, {FIELDS}"),
                    "attribute_exists(#o)",
                ),
            ] {
                let mut update = self.base(fan_out);
                if expression.contains(":owners") {
                    let entry = update.values.remove(":entry").expect("set in base");
                    update.names.remove("#tok");
                    update.values.insert(
                        ":owners".into(),
                        Attr::M(BTreeMap::from([(self.token.clone(), entry)])),
                    );
                }
                update.expression = expression;
                update.condition = Some(condition.into());
                match self.store.update(&update, Returns::Nothing).await {
                    Ok(_) => return Ok(()),
                    Err(err @ StoreError::ConditionFailed { .. }) => last = Some(err),
                    Err(err) => return Err(err),
                }
            }
        }
        Err(last.expect("two rounds ran"))
    }

    /// Takes over an item nobody is working on, removing the expired shares.
    /// `Ok(false)` when another apply got there first.
    pub async fn claim(&self, pending: &Pending, now_ms: i64) -> Result<bool, StoreError> {
        let mut update = self.base(&pending.fan_out);
        let expired: Vec<&Share> = pending.shares.iter().filter(|s| s.expired(now_ms)).collect();
        let mut removes = Vec::new();
        let mut conditions = vec!["attribute_exists(PK)".to_owned()];
        for (i, share) in expired.iter().enumerate() {
            let alias = format!("#e{i}");
            update.names.insert(alias.clone(), share.token.clone());
            removes.push(format!("#o.{alias}"));
            conditions.push(format!(
                "attribute_exists(#o.{alias}) AND (attribute_not_exists(#o.{alias}.#l) OR #o.{alias}.#l < :now)"
            ));
        }
        if !expired.is_empty() {
            update.values.insert(":now".into(), Attr::n(now_ms));
            update.names.insert("#l".into(), "lease".into());
        }
        if pending.has_map {
            update.expression = "SET #o.#tok = :entry".into();
            if pending.shares.is_empty() {
                conditions.push("size(#o) = :zero".into());
                update.values.insert(":zero".into(), Attr::n(0));
            }
        } else {
            let entry = update.values.remove(":entry").expect("set in base");
            update.names.remove("#tok");
            update.values.insert(
                ":owners".into(),
                Attr::M(BTreeMap::from([(self.token.clone(), entry)])),
            );
            update.expression = "SET #o = :owners".into();
            conditions.push("attribute_not_exists(#o)".into());
        }
        if !removes.is_empty() {
            update.expression.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        // Only the values the expressions use may be sent.
        for unused in [":gpk", ":gsk", ":kind", ":level", ":target", ":written"] {
            update.values.remove(unused);
        }
        update.names.remove("#lvl");
        update.names.remove("#tgt");
        update.condition = Some(conditions.join(" AND "));
        match self.store.update(&update, Returns::Nothing).await {
            Ok(_) => Ok(true),
            Err(StoreError::ConditionFailed { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Drops this apply's share; the item goes when no share is left.
    pub async fn release(&self, fan_out: &FanOut) -> Result<(), StoreError> {
        let pk = keys::pk_system(&self.namespace);
        let sk = fan_out.sk();
        let update = Update {
            pk: pk.clone(),
            sk: sk.clone(),
            expression: "REMOVE #o.#tok".into(),
            condition: Some("attribute_exists(#o.#tok)".into()),
            names: BTreeMap::from([
                ("#o".to_owned(), "owners".to_owned()),
                ("#tok".to_owned(), self.token.clone()),
            ]),
            values: BTreeMap::new(),
        };
        let after = match self.store.update(&update, Returns::AllNew).await {
            Ok(after) => after,
            Err(StoreError::ConditionFailed { .. }) => return Ok(()),
            Err(err) => return Err(err),
        };
        let empty = match after.as_ref().and_then(|item| item.get("owners")) {
            Some(Attr::M(owners)) => owners.is_empty(),
            _ => true,
        };
        if empty {
            let condition = crate::store::Condition {
                expression: "attribute_not_exists(#o) OR size(#o) = :zero".into(),
                names: BTreeMap::from([("#o".to_owned(), "owners".to_owned())]),
                values: BTreeMap::from([(":zero".to_owned(), Attr::n(0))]),
            };
            match self.store.delete(&pk, &sk, Some(&condition)).await {
                Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Ends this apply's lease on work it could not finish, so the next
    /// apply retries it at once instead of waiting the lease out.
    pub async fn expire(&self, fan_out: &FanOut, now_ms: i64) -> Result<(), StoreError> {
        let update = Update {
            pk: keys::pk_system(&self.namespace),
            sk: fan_out.sk(),
            expression: "SET #o.#tok.#l = :past, #o.#tok.#f = :no".into(),
            condition: Some("attribute_exists(#o.#tok)".into()),
            names: BTreeMap::from([
                ("#o".to_owned(), "owners".to_owned()),
                ("#tok".to_owned(), self.token.clone()),
                ("#l".to_owned(), "lease".to_owned()),
                ("#f".to_owned(), "full".to_owned()),
            ]),
            values: BTreeMap::from([
                (":past".to_owned(), Attr::n(now_ms - 1)),
                (":no".to_owned(), Attr::Bool(false)),
            ]),
        };
        match self.store.update(&update, Returns::Nothing).await {
            Ok(_) | Err(StoreError::ConditionFailed { .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert!(pending.claimable(10) && pending.interrupted_full(10));
        assert!(!pending.claimable(5));
    }
}
