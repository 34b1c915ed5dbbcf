//! The `cascade` fan-out: each bucket's cascade flag and parent, from the
//! resolved policy and the entity's `#META`, pinned so a newer stamp of the
//! same entity incarnation is never overwritten (the stamp is
//! `zae_table::entity::cascade_stamp`, which the client's move writes too).

use super::{FanOuts, Tally};
use crate::manifest::Level;
use futures::FutureExt;
use std::collections::HashMap;
use std::sync::Mutex;
use zae_table::entity as entity_meta;
use zae_table::keys::{self, SK_META};
use zae_table::resolve::Resolver;
use zae_table::store::{Store, StoreError};
use zae_table::{Attr, Item};

/// Entities' `#META` items kept for one fan-out; forgotten whole past this
/// many, so memory stays bounded on any namespace.
const METAS_KEPT: usize = 10_000;

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
                let (update, pin) = entity_meta::cascade_stamp(&meta, policy);
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
