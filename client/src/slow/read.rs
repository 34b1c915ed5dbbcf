//! A slow pass's reads: for each bucket (the entity's and, in a cascade,
//! its parent's) its resolved config, its owner's META and the item.

use super::Target;
use super::plan::cascades;
use crate::bucket::BucketView;
use crate::config;
use crate::error::Error;
use crate::rejection::{disabled, unsupported};
use crate::shared::Shared;
use zae_table::config::Disabled;
use zae_table::entity::Meta;
use zae_table::keys::{self, BucketKey, SK_META, SK_STATE};
use zae_table::store::Store;

impl<S: Store + 'static> Shared<S> {
    /// The entity's bucket and, when it cascades, its parent's: config,
    /// META and the bucket of each; the parent's on `parent_shard` when
    /// that is the parent META names (after a move it is another's shard).
    pub(super) async fn read_targets(
        &self,
        key: &BucketKey,
        cascade: bool,
        consistent: bool,
        parent_shard: Option<&BucketKey>,
    ) -> Result<Vec<(BucketKey, Target)>, Error> {
        let shared = self;
        let child = self.read_target(key, consistent).await?;
        let parent = child.meta.as_ref().and_then(|m| m.parent_id.clone());
        let parent = parent.filter(|_| cascades(&child.resolved, child.meta.as_ref()));
        shared.remember_parent(key, parent.clone());
        let mut targets = vec![(key.clone(), child)];
        if let Some(parent) = parent.filter(|_| cascade) {
            let pkey = match parent_shard {
                Some(pinned) if pinned.entity == parent => pinned.clone(),
                _ => shared.parent_key(key, parent),
            };
            let target = self.read_target(&pkey, consistent).await?;
            targets.push((pkey, target));
        }
        Ok(targets)
    }

    /// One bucket's config, its owner's META and the bucket, as the slow
    /// path reads them.
    async fn read_target(&self, key: &BucketKey, consistent: bool) -> Result<Target, Error> {
        let shared = self;
        let resolved = config::resolve(
            &shared.store,
            &shared.system,
            &shared.namespace,
            &key.entity,
            &key.resource,
        )
        .await?;
        if let Some((Disabled::Yes, level)) = &resolved.disabled {
            return Err(disabled(key, level.kind()));
        }
        let meta_pk = keys::pk_entity(&shared.namespace, &key.entity);
        let keys = vec![
            (meta_pk.clone(), SK_META.to_owned()),
            (key.pk(), SK_STATE.to_owned()),
        ];
        let items = shared
            .store
            .get_many(&keys, consistent)
            .await
            .map_err(Error::store)?;
        let meta = items
            .iter()
            .find(|i| keys::pk_of(i) == Some(&meta_pk))
            .map(Meta::read);
        let view = items
            .iter()
            .find(|i| keys::pk_of(i) == Some(&key.pk()))
            .map(BucketView::read);
        if let Some(v) = &view {
            shared.learn_shards(key, v.shard_count);
            // Disabled first, as on the fast path and in Python.
            if v.disabled {
                return Err(disabled(key, "bucket"));
            }
            if let Some(feature) = v.unsupported {
                return Err(unsupported(key, feature));
            }
        }
        Ok(Target {
            resolved,
            meta,
            view,
        })
    }
}
