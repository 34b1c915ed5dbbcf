//! Entity items (`{ns}/ENTITY#{id}`, `#META`): the record as the 0.17.0
//! client creates, reads and moves it, the stamp a move leaves on the
//! entity's buckets, and the check that a bucket's owner stamps still hold.

use crate::keys::{self, SK_META, pk_entity};
use crate::store::{Condition, ITEM_EXISTS, TxWrite, Update, UpdateBuilder};
use crate::value::{Attr, Item};
use std::collections::BTreeMap;

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
pub const ENTITY_ID: &str = "entity_id";
pub const NAME: &str = "name";
pub const METADATA: &str = "metadata";
pub const GSI1PK: &str = "GSI1PK";
pub const GSI1SK: &str = "GSI1SK";

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

/// An entity's `#META` record, as the 0.17.0 client's `Entity`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub id: String,
    /// Absent on a record written without one (the client writes the id).
    pub name: Option<String>,
    pub parent_id: Option<String>,
    pub cascade: bool,
    /// String values only, as the client writes them; others are skipped.
    pub metadata: BTreeMap<String, String>,
    pub created_at: Option<String>,
    /// `pgen`: 0 for an entity made before generations counted.
    pub parent_generation: i64,
    /// `pinc`, else `created_at`, else [`LEGACY_INCARNATION`].
    pub incarnation: String,
}

impl Record {
    /// Reads a `#META` item as the client does: what is missing takes the
    /// client's default, never an error.
    pub fn read(item: &Item) -> Record {
        let text = |name: &str| item.get(name).and_then(Attr::as_s).map(str::to_owned);
        let metadata = match item.get(METADATA) {
            Some(Attr::M(map)) => map
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_s()?.to_owned())))
                .collect(),
            _ => BTreeMap::new(),
        };
        let meta = Meta::read(item);
        Record {
            id: text(ENTITY_ID).unwrap_or_default(),
            name: text(NAME),
            parent_id: meta.parent_id,
            cascade: meta.cascade.unwrap_or(false),
            metadata,
            created_at: text(CREATED_AT),
            parent_generation: meta.pgen.unwrap_or(0),
            incarnation: meta.pinc.unwrap_or_else(|| LEGACY_INCARNATION.to_owned()),
        }
    }

    /// The `#META` item a create puts (`attribute_not_exists(PK)`), with
    /// the GSI1 keys of a child and the GSI4 key every item of a namespace has.
    pub fn item(&self, namespace: &str) -> Item {
        let pk = pk_entity(namespace, &self.id);
        let mut item = Item::from([
            ("SK".to_owned(), Attr::s(SK_META)),
            (ENTITY_ID.to_owned(), Attr::s(&self.id)),
            (
                NAME.to_owned(),
                Attr::s(self.name.as_deref().unwrap_or(&self.id)),
            ),
            (
                PARENT_ID.to_owned(),
                self.parent_id.as_deref().map_or(Attr::Null, Attr::s),
            ),
            (CASCADE.to_owned(), Attr::Bool(self.cascade)),
            (
                PARENT_GENERATION.to_owned(),
                Attr::n(self.parent_generation),
            ),
            (INCARNATION.to_owned(), Attr::s(&self.incarnation)),
            (
                METADATA.to_owned(),
                Attr::M(
                    self.metadata
                        .iter()
                        .map(|(k, v)| (k.clone(), Attr::s(v)))
                        .collect(),
                ),
            ),
            (
                CREATED_AT.to_owned(),
                Attr::s(self.created_at.as_deref().unwrap_or_default()),
            ),
            ("GSI4PK".to_owned(), Attr::s(namespace)),
            ("GSI4SK".to_owned(), Attr::s(&pk)),
        ]);
        if let Some(parent) = &self.parent_id {
            item.insert(
                GSI1PK.into(),
                Attr::s(keys::gsi1_pk_parent(namespace, parent)),
            );
            item.insert(GSI1SK.into(), Attr::s(keys::gsi1_sk_child(&self.id)));
        }
        item.insert("PK".to_owned(), Attr::s(pk));
        item
    }
}

/// The move of an entity to `parent` (or none), as the 0.17.0 client's
/// one `UpdateItem`: `parent_id`, the GSI1 keys (removed with no parent)
/// and `pgen + 1`; `cascade` untouched. Only on an existing entity.
pub fn move_parent(namespace: &str, entity: &str, parent: Option<&str>) -> Update {
    let mut update = UpdateBuilder::new();
    match parent {
        Some(parent) => {
            update.set(PARENT_ID, Attr::s(parent));
            update.set(GSI1PK, Attr::s(keys::gsi1_pk_parent(namespace, parent)));
            update.set(GSI1SK, Attr::s(keys::gsi1_sk_child(entity)));
        }
        None => {
            update.set(PARENT_ID, Attr::Null);
            update.remove(GSI1PK).remove(GSI1SK);
        }
    }
    update.step_from(PARENT_GENERATION, Attr::n(0), Attr::n(1));
    update.build(
        &pk_entity(namespace, entity),
        SK_META,
        Some(ITEM_EXISTS.to_owned()),
    )
}

/// The stamp a bucket takes from its entity's `#META` and resolved cascade
/// policy (`policy`: the config levels' cascade, else the entity's own), and
/// the pin that keeps a newer stamp of the same entity incarnation: the
/// 0.17.0 cascade fan-out's write. The caller adds `attribute_exists(PK)`.
pub fn cascade_stamp(meta: &Item, policy: bool) -> (UpdateBuilder, String) {
    use crate::bucket::{
        CASCADE as B_CASCADE, PARENT_GENERATION as B_PGEN, PARENT_ID as B_PARENT,
        PARENT_INCARNATION as B_PINC,
    };
    let owner = Meta::read(meta);
    let generation = owner.pgen.unwrap_or(0);
    let incarnation = owner.pinc.unwrap_or_else(|| LEGACY_INCARNATION.to_owned());
    let mut update = UpdateBuilder::new();
    update.set(B_CASCADE, Attr::Bool(owner.parent_id.is_some() && policy));
    match owner.parent_id {
        Some(parent) => update.set(B_PARENT, Attr::s(parent)),
        None => update.remove(B_PARENT),
    };
    update.set(B_PGEN, Attr::n(generation));
    update.set(B_PINC, Attr::s(&incarnation));
    // A bucket stamped from a newer generation of the same entity
    // incarnation keeps its stamp (a later move stamped it first).
    let pinc = update.name(B_PINC);
    let pgen = update.name(B_PGEN);
    let pi = update.value(Attr::s(&incarnation));
    let pg = update.value(Attr::n(generation));
    let pin = format!(
        "attribute_not_exists({pinc}) OR {pinc} <> {pi} OR attribute_not_exists({pgen}) OR {pgen} <= {pg}"
    );
    (update, pin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_with_a_childs_index_keys() {
        let record = Record {
            id: "key".into(),
            name: Some("Key".into()),
            parent_id: Some("org".into()),
            cascade: true,
            metadata: BTreeMap::from([("tier".into(), "gold".into())]),
            created_at: Some("2026-12-06T12:00:00Z".into()),
            parent_generation: 1_796_000_000_000,
            incarnation: "00ff00ff00ff00ff".into(),
        };
        let item = record.item("ns");
        assert_eq!(Record::read(&item), record);
        assert_eq!(item[GSI1PK], Attr::s("ns/PARENT#org"));
        assert_eq!(item[GSI1SK], Attr::s("CHILD#key"));
        let root = Record {
            parent_id: None,
            ..record
        };
        let item = root.item("ns");
        assert_eq!(
            item[PARENT_ID],
            Attr::Null,
            "no parent is NULL, as the client writes it"
        );
        assert!(!item.contains_key(GSI1PK));
        assert_eq!(Record::read(&item).parent_id, None);
    }

    #[test]
    fn a_move_to_no_parent_removes_the_index_keys_and_bumps_the_generation() {
        let update = move_parent("ns", "key", None);
        assert!(
            update.expression.contains("REMOVE"),
            "{}",
            update.expression
        );
        assert!(
            update.expression.contains("if_not_exists"),
            "{}",
            update.expression
        );
        assert_eq!(update.assigned(PARENT_ID), Some(&Attr::Null));
        assert_eq!(update.condition.as_deref(), Some(ITEM_EXISTS));
        let update = move_parent("ns", "key", Some("org"));
        assert_eq!(update.assigned(GSI1PK), Some(&Attr::s("ns/PARENT#org")));
    }
}
