//! The `cascade` fan-out: each bucket's cascade flag and parent, from the
//! resolved policy and the entity's `#META`, pinned so a newer stamp of the
//! same entity incarnation is never overwritten.

use super::resolver::Resolver;
use super::{FanOuts, Tally};
use crate::manifest::Level;
use std::collections::HashMap;
use zae_table::bucket::{CASCADE, PARENT_GENERATION, PARENT_ID, PARENT_INCARNATION};
use zae_table::entity as entity_meta;
use zae_table::keys::{self, SK_META};
use zae_table::store::{Store, StoreError, UpdateBuilder};
use zae_table::{Attr, Item};

impl<S: Store> FanOuts<'_, S> {
    pub(super) async fn cascade(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
    ) -> Result<Tally, StoreError> {
        let mut tally = Tally::default();
        if matches!(level, Level::System) {
            return Ok(tally);
        }
        let mut metas: HashMap<String, Option<Item>> = HashMap::new();
        for (key, _) in self.buckets(level).await? {
            if let Level::Entity { entity, .. } = level
                && key.entity != *entity
            {
                continue;
            }
            let meta = match metas.get(&key.entity) {
                Some(meta) => meta.clone(),
                None => {
                    let meta = self
                        .store
                        .get(&keys::pk_entity(self.namespace, &key.entity), SK_META, true)
                        .await?;
                    metas.insert(key.entity.clone(), meta.clone());
                    meta
                }
            };
            let Some(meta) = meta else {
                tally.skipped += 1;
                continue;
            };
            let parent = meta
                .get(entity_meta::PARENT_ID)
                .and_then(Attr::as_s)
                .filter(|p| !p.is_empty());
            let generation = meta
                .get(entity_meta::PARENT_GENERATION)
                .and_then(Attr::as_int)
                .unwrap_or(0);
            let incarnation = meta
                .get(entity_meta::INCARNATION)
                .or_else(|| meta.get(entity_meta::CREATED_AT))
                .map(|a| match a {
                    Attr::S(s) => s.clone(),
                    Attr::N(n) => n.clone(),
                    _ => "-".into(),
                })
                .unwrap_or_else(|| "-".into());
            let policy = match resolver.cascade(&key.entity, &key.resource).await? {
                Some(policy) => policy,
                None => matches!(meta.get(entity_meta::CASCADE), Some(Attr::Bool(true))),
            };
            let mut update = UpdateBuilder::new();
            update.set(CASCADE, Attr::Bool(parent.is_some() && policy));
            match parent {
                Some(parent) => update.set(PARENT_ID, Attr::s(parent)),
                None => update.remove(PARENT_ID),
            };
            update.set(PARENT_GENERATION, Attr::n(generation));
            update.set(PARENT_INCARNATION, Attr::s(&incarnation));
            // A bucket stamped from a newer generation of the same entity
            // incarnation keeps its stamp (the client moved the parent since).
            let pinc = update.name(PARENT_INCARNATION);
            let pgen = update.name(PARENT_GENERATION);
            let pi = update.value(Attr::s(&incarnation));
            let pg = update.value(Attr::n(generation));
            let pin = format!(
                "attribute_not_exists({pinc}) OR {pinc} <> {pi} OR attribute_not_exists({pgen}) OR {pgen} <= {pg}"
            );
            tally.stamped += usize::from(self.write(&key, update, Some(pin)).await?);
        }
        Ok(tally)
    }
}
