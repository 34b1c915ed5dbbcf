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
