//! The entities a `share: demand` target holds above base
//! (`{ns}/ADAPTIVE#`, `#ALLOCATION#{resource}#{limit}#{entity}`): one item
//! per raised entity, written after its buckets were stamped and deleted
//! after they went back to base, so that a return to base, blindness, a
//! retire, a reset or a removal from the manifest reaches every one of them,
//! idle ones included. Each records the factor its buckets carry, the
//! generation they were stamped under (above the target's own, so the
//! target's laps leave them alone) and what the tick saw.

use super::factor::Factor;
use crate::keys::{self, Index};
use crate::store::{Condition, Query, Store, StoreError, Update, UpdateBuilder};
use crate::value::{Attr, Item};

pub const ENTITY: &str = "entity";
pub const FACTOR_PPM: &str = "factor_ppm";
pub const GENERATION: &str = "generation";
pub const RESOURCE: &str = "resource";
pub const LIMIT: &str = "limit";
pub const USED: &str = "used";
pub const SATURATED: &str = "saturated";
pub const WHY: &str = "why";
pub const AT: &str = "at";
pub const PENDING: &str = "pending";

/// One raised entity of a target.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Allocated {
    pub resource: String,
    pub limit: String,
    pub entity: String,
    pub factor: Factor,
    pub generation: i64,
    /// Tokens it was admitted in the minute the allocation came from.
    pub used: i64,
    pub saturated: bool,
    pub why: String,
    pub at_ms: i64,
    /// Written before its stamps and not yet settled after them: the next
    /// tick stamps it again.
    pub pending: bool,
}

impl Allocated {
    pub fn key(namespace: &str, resource: &str, limit: &str, entity: &str) -> (String, String) {
        (
            keys::pk_adaptive(namespace),
            keys::sk_adaptive_allocation(resource, limit, entity),
        )
    }

    /// Every raised entity of one target, or (`resource` empty) of the
    /// namespace.
    pub fn query(namespace: &str, resource: &str, limit: &str) -> Query {
        let sk_prefix = if resource.is_empty() {
            keys::SK_ADAPTIVE_ALLOCATION.to_owned()
        } else {
            keys::sk_adaptive_allocation(resource, limit, "")
        };
        Query {
            index: &Index::TABLE,
            pk: keys::pk_adaptive(namespace),
            sk_prefix,
            consistent: true,
        }
    }

    pub async fn read<S: Store>(
        store: &S,
        namespace: &str,
        resource: &str,
        limit: &str,
    ) -> Result<Vec<Allocated>, StoreError> {
        let items = store
            .query(&Allocated::query(namespace, resource, limit))
            .await?;
        Ok(items.iter().filter_map(Allocated::from_item).collect())
    }

    pub fn from_item(item: &Item) -> Option<Allocated> {
        let text = |name: &str| item.get(name).and_then(Attr::as_s).map(str::to_owned);
        let int = |name: &str| item.get(name).and_then(Attr::as_int);
        Some(Allocated {
            resource: text(RESOURCE)?,
            limit: text(LIMIT)?,
            entity: text(ENTITY)?,
            factor: Factor::from_ppm(int(FACTOR_PPM)?),
            generation: int(GENERATION)?,
            used: int(USED).unwrap_or(0),
            saturated: matches!(item.get(SATURATED), Some(Attr::Bool(true))),
            why: text(WHY).unwrap_or_default(),
            at_ms: int(AT).unwrap_or(0),
            pending: matches!(item.get(PENDING), Some(Attr::Bool(true))),
        })
    }

    /// The allocation, over any older one.
    pub fn write(&self, namespace: &str) -> Update {
        let (pk, sk) = Allocated::key(namespace, &self.resource, &self.limit, &self.entity);
        let mut update = UpdateBuilder::new();
        update
            .set(RESOURCE, Attr::s(&self.resource))
            .set(LIMIT, Attr::s(&self.limit))
            .set(ENTITY, Attr::s(&self.entity))
            .set(FACTOR_PPM, Attr::n(self.factor.ppm()))
            .set(GENERATION, Attr::n(self.generation))
            .set(USED, Attr::n(self.used))
            .set(SATURATED, Attr::Bool(self.saturated))
            .set(WHY, Attr::s(&self.why))
            .set(AT, Attr::n(self.at_ms))
            .set(PENDING, Attr::Bool(self.pending));
        let g = update.name(GENERATION);
        let at = update.value(Attr::n(self.generation));
        let condition = format!("attribute_not_exists({g}) OR {g} <= {at}");
        update.build(&pk, &sk, Some(condition))
    }

    /// One above the highest generation any of a target's entities was
    /// stamped under (0 for none): the least a writer taking all of its
    /// buckets back to one factor must stamp under, whatever the clocks of
    /// the controllers that raised them said.
    pub async fn above_all<S: Store>(
        store: &S,
        namespace: &str,
        resource: &str,
        limit: &str,
    ) -> Result<i64, StoreError> {
        let all = Allocated::read(store, namespace, resource, limit).await?;
        Ok(all
            .iter()
            .map(|a| a.generation.saturating_add(1))
            .max()
            .unwrap_or(0))
    }

    /// Forgets every allocation of a target, once a lap under a generation
    /// above theirs reaches every bucket (a retire, a reset, a switch back to
    /// `share: base`). Returns how many there were.
    pub async fn forget_all<S: Store>(
        store: &S,
        namespace: &str,
        resource: &str,
        limit: &str,
    ) -> Result<usize, StoreError> {
        let all = Allocated::read(store, namespace, resource, limit).await?;
        for a in &all {
            a.remove(store, namespace).await?;
        }
        Ok(all.len())
    }

    /// Forgets the allocation unless a newer one was written meanwhile.
    pub async fn remove<S: Store>(&self, store: &S, namespace: &str) -> Result<(), StoreError> {
        let (pk, sk) = Allocated::key(namespace, &self.resource, &self.limit, &self.entity);
        let condition = Condition {
            expression: "#g <= :g".to_owned(),
            names: [("#g".to_owned(), GENERATION.to_owned())].into(),
            values: [(":g".to_owned(), Attr::n(self.generation))].into(),
        };
        match store.delete(&pk, &sk, Some(&condition)).await {
            Ok(_) | Err(StoreError::ConditionFailed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_round_trips_and_never_goes_under_a_newer_one() {
        let a = Allocated {
            resource: "gpt-4".into(),
            limit: "tpm".into(),
            entity: "heavy".into(),
            factor: Factor::from_ppm(12_500_000),
            generation: 42,
            used: 1_000,
            saturated: true,
            why: "share".into(),
            at_ms: 9,
            pending: true,
        };
        let update = a.write("ns");
        assert_eq!(update.sk, "#ALLOCATION#gpt-4#tpm#heavy");
        assert!(update.condition.as_deref().unwrap().contains("<="));
        let item: Item = update
            .names
            .values()
            .filter_map(|name| Some((name.clone(), update.assigned(name)?.clone())))
            .collect();
        assert_eq!(Allocated::from_item(&item), Some(a));
        assert_eq!(
            Allocated::query("ns", "", "").sk_prefix,
            "#ALLOCATION#".to_owned()
        );
    }
}
