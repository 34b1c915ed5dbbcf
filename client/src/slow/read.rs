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
        // The pass writes what it read: those cached images will not hold.
        for (k, _) in &targets {
            self.rejections.forget_key(k);
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
        let mut view = items
            .iter()
            .find(|i| keys::pk_of(i) == Some(&key.pk()))
            .map(BucketView::read);
        let quotas = resolved.limits.iter().any(config::is_quota);
        if let Some(v) = &mut view {
            judge_by_config(v, &resolved);
            shared.learn_shards(key, v.shard_count);
            // Disabled first, as on the fast path and in Python.
            if v.disabled {
                return Err(disabled(key, "bucket"));
            }
            if let Some(feature) = v.unsupported {
                return Err(unsupported(key, feature));
            }
        }
        let shards = view.as_ref().map_or(1, |v| v.shard_count);
        if quotas && (key.shard > 0 || shards > 1) {
            // A quota's allowance moves between shards are not built.
            return Err(unsupported(key, crate::error::Feature::Quota));
        }
        Ok(Target {
            resolved,
            meta,
            view,
        })
    }
}

/// A slow pass judges each configured limit by the config's schedules, not
/// the item's (an operator's change reaches the bucket here); a limit the
/// config no longer has keeps the item's.
fn judge_by_config(view: &mut BucketView, resolved: &crate::config::Resolved) {
    let configured = resolved.schedules();
    for limit in &resolved.limits {
        match configured.get(&limit.name) {
            Some(schedule) => view.schedules.insert(limit.name.clone(), schedule.clone()),
            None => view.schedules.remove(&limit.name),
        };
        // The window length in force is the config's.
        if let Some(l) = view.limits.get_mut(&limit.name) {
            l.rsa = limit.reset_after_seconds;
        }
    }
}
