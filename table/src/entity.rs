//! Entity items (`{ns}/ENTITY#{id}`, `#META`): the attributes the cascade
//! fan-out reads, and the check that a bucket's owner stamps still hold.

use crate::keys::{SK_META, pk_entity};
use crate::store::{Condition, TxWrite};
use crate::value::Attr;

pub const PARENT_ID: &str = "parent_id";
/// Bumped each time the client moves the entity's parent.
pub const PARENT_GENERATION: &str = "pgen";
/// Which incarnation of the entity id: `pinc`, or else its `created_at`.
pub const INCARNATION: &str = "pinc";
pub const CREATED_AT: &str = "created_at";
/// The entity's own cascade default.
pub const CASCADE: &str = "cascade";
/// The incarnation a bucket stamped before `pinc` existed.
pub const LEGACY_INCARNATION: &str = "-";

/// A transaction's check that the entity is still the owner a bucket's
/// stamps name (`pgen`, `pinc`): a clone copied from that bucket must not
/// outlive a re-parenting or a re-creation of the entity.
pub fn owner_check(
    namespace: &str,
    entity: &str,
    pgen: Option<i64>,
    pinc: Option<&str>,
) -> TxWrite {
    let mut c = Condition::default();
    let mut name = |alias: &str, attr: &str| {
        c.names.insert(alias.to_owned(), attr.to_owned());
    };
    name("#pg", PARENT_GENERATION);
    name("#pi", INCARNATION);
    let expression = if pgen.is_none() && pinc.is_none() {
        "attribute_not_exists(#pg) AND attribute_not_exists(#pi)".to_owned()
    } else {
        let generation = match pgen {
            Some(0) => "(attribute_not_exists(#pg) OR #pg = :pg)",
            Some(_) => "#pg = :pg",
            None => "attribute_not_exists(#pg)",
        };
        if let Some(v) = pgen {
            c.values.insert(":pg".into(), Attr::n(v));
        }
        let incarnation = match pinc {
            Some(s) => {
                c.names.insert("#ca".into(), CREATED_AT.into());
                c.values.insert(":pi".into(), Attr::s(s));
                if s == LEGACY_INCARNATION {
                    "(#pi = :pi OR (attribute_not_exists(#pi) AND (#ca = :pi OR attribute_not_exists(#ca))))"
                } else {
                    "(#pi = :pi OR (attribute_not_exists(#pi) AND #ca = :pi))"
                }
            }
            None => "attribute_not_exists(#pi)",
        };
        format!("attribute_exists(PK) AND {generation} AND {incarnation}")
    };
    c.expression = expression;
    TxWrite::Check {
        pk: pk_entity(namespace, entity),
        sk: SK_META.to_owned(),
        condition: c,
    }
}

/// What a bucket copies from its owner's META when the client writes it:
/// the parent, the cascade default and the owner stamps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub parent_id: Option<String>,
    pub cascade: Option<bool>,
    pub pgen: Option<i64>,
    /// `pinc`, or else `created_at` (an entity made before `pinc` existed).
    pub pinc: Option<String>,
    /// Whether `pinc` itself is stored (the check pins the one it has).
    pub pinc_stored: bool,
}

impl Meta {
    pub fn read(item: &crate::value::Item) -> Meta {
        let text = |name: &str| item.get(name).and_then(Attr::as_s).map(str::to_owned);
        let pinc = text(INCARNATION);
        Meta {
            parent_id: text(PARENT_ID).filter(|p| !p.is_empty()),
            cascade: match item.get(CASCADE) {
                Some(Attr::Bool(b)) => Some(*b),
                _ => None,
            },
            // An entity made before generations counted is generation 0,
            // and one without `pinc` or `created_at` the legacy incarnation,
            // as the 0.17.0 client stamps them.
            pgen: Some(
                item.get(PARENT_GENERATION)
                    .and_then(Attr::as_int)
                    .unwrap_or(0),
            ),
            pinc_stored: pinc.is_some(),
            pinc: Some(
                pinc.or_else(|| text(CREATED_AT))
                    .unwrap_or_else(|| LEGACY_INCARNATION.to_owned()),
            ),
        }
    }
}

/// The check a bucket create carries on its owner's META, as the 0.17.0
/// client writes it: no META stays no META; a META keeps the generation
/// and incarnation the bucket is stamped with.
pub fn create_check(namespace: &str, entity: &str, meta: Option<&Meta>) -> TxWrite {
    match meta {
        Some(meta) => owner_check(namespace, entity, meta.pgen, meta.pinc.as_deref()),
        None => TxWrite::Check {
            pk: pk_entity(namespace, entity),
            sk: SK_META.to_owned(),
            condition: Condition::plain(crate::store::ITEM_ABSENT),
        },
    }
}
