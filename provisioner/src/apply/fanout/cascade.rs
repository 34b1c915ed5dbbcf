//! The `cascade` fan-out: each bucket's cascade flag and parent, from the
//! resolved policy and the entity's `#META`, pinned so a newer stamp of the
//! same entity incarnation is never overwritten.

use super::{FanOuts, Tally};
use crate::manifest::Level;
use futures::FutureExt;
use std::collections::HashMap;
use std::sync::Mutex;
use zae_table::bucket::{CASCADE, PARENT_GENERATION, PARENT_ID, PARENT_INCARNATION};
use zae_table::entity as entity_meta;
use zae_table::keys::{self, SK_META};
use zae_table::resolve::Resolver;
use zae_table::store::{Store, StoreError, UpdateBuilder};
use zae_table::{Attr, Item};

/// Entities' `#META` items kept for one fan-out; forgotten whole past this
/// many, so memory stays bounded on any namespace.
const METAS_KEPT: usize = 10_000;

/// The stamp a bucket takes from its entity's `#META` and cascade policy,
/// and the pin that keeps a newer stamp of the same entity incarnation.
fn stamp(meta: &Item, policy: bool) -> (UpdateBuilder, String) {
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
    (update, pin)
}

impl<S: Store> FanOuts<'_, S> {
    pub(super) async fn cascade(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
    ) -> Result<Tally, StoreError> {
        if matches!(level, Level::System) {
            return Ok(Tally::default());
        }
        let metas: Mutex<HashMap<String, Option<Item>>> = Mutex::new(HashMap::new());
        let metas = &metas;
        self.each_bucket(level, |key, _| {
            async move {
                if let Level::Entity { entity, .. } = level
                    && key.entity != *entity
                {
                    return Ok(Tally::default());
                }
                let Some(meta) = self.meta(metas, &key.entity).await? else {
                    return Ok(Tally::skipped());
                };
                let policy = match resolver.cascade(&key.entity, &key.resource).await? {
                    Some(policy) => policy,
                    None => matches!(meta.get(entity_meta::CASCADE), Some(Attr::Bool(true))),
                };
                let (update, pin) = stamp(&meta, policy);
                Ok(Tally::stamped(self.write(&key, update, Some(pin)).await?))
            }
            .boxed()
        })
        .await
    }

    /// An entity's `#META`, read once per fan-out (strongly consistent).
    async fn meta(
        &self,
        metas: &Mutex<HashMap<String, Option<Item>>>,
        entity: &str,
    ) -> Result<Option<Item>, StoreError> {
        let lock = || metas.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(meta) = lock().get(entity) {
            return Ok(meta.clone());
        }
        let meta = self
            .store
            .get(&keys::pk_entity(self.namespace, entity), SK_META, true)
            .await?;
        let mut kept = lock();
        if kept.len() >= METAS_KEPT {
            kept.clear();
        }
        kept.insert(entity.to_owned(), meta.clone());
        Ok(meta)
    }
}
