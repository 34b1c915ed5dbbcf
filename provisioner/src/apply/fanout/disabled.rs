//! The `disabled` fan-out: `disabled: true` or `bypass` (a deadline the
//! client renews) stamped on the buckets in a level's reach, except where an
//! entity level carves out its own.

use super::{Directive, FanOuts, Tally, deadline};
use crate::apply::now_ms;
use crate::manifest::{DEFAULT_RESOURCE, Disabled, Level};
use futures::FutureExt;
use zae_table::bucket::{BYPASS, DISABLED};
use zae_table::config::LevelConfig;
use zae_table::keys;
use zae_table::resolve::Resolver;
use zae_table::store::{Store, StoreError, UpdateBuilder};
use zae_table::{Attr, BucketKey, Item};

/// Whether a bucket already carries the `disabled` stamp wanted.
fn carries(item: &Item, wanted: Disabled) -> bool {
    let disabled = matches!(item.get(DISABLED), Some(Attr::Bool(true)));
    let bypass = item.contains_key(BYPASS);
    match wanted {
        Disabled::Yes => disabled && !bypass,
        Disabled::Bypass => bypass && !disabled,
        Disabled::No => !disabled && !bypass,
    }
}

fn stamp_update(disabled: Disabled, t_ms: i64) -> UpdateBuilder {
    let mut update = UpdateBuilder::new();
    match disabled {
        Disabled::Yes => {
            update.set(DISABLED, Attr::Bool(true)).remove(BYPASS);
        }
        Disabled::Bypass => {
            update.set(BYPASS, Attr::n(deadline(t_ms))).remove(DISABLED);
        }
        Disabled::No => {
            update.remove(DISABLED).remove(BYPASS);
        }
    }
    update
}

impl<S: Store> FanOuts<'_, S> {
    async fn stamp(
        &self,
        key: &BucketKey,
        wanted: Disabled,
        t_ms: i64,
    ) -> Result<Tally, StoreError> {
        let written = self.write(key, stamp_update(wanted, t_ms), None).await?;
        Ok(Tally::stamped(written))
    }

    pub(super) async fn disabled(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
        live: Option<&LevelConfig>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let started = now_ms();
        match level {
            Level::System => Ok(Tally::default()),
            Level::Resource(resource) => {
                let wanted = directive
                    .reassert
                    .or_else(|| live.and_then(|c| c.disabled))
                    .unwrap_or(Disabled::No);
                self.each_bucket(level, |key, item| {
                    async move {
                        if directive.reassert.is_some() && carries(&item, wanted) {
                            return Ok(Tally::skipped());
                        }
                        // An entity-level `disabled` is a carve-out the resource does not override.
                        let t = now_ms();
                        if resolver.disabled(&key.entity, resource).await? != wanted {
                            return Ok(Tally::skipped());
                        }
                        self.stamp(&key, wanted, t).await
                    }
                    .boxed()
                })
                .await
            }
            Level::Entity { entity, resource } => {
                self.each_bucket(level, |key, _| {
                    async move {
                        if key.entity != *entity {
                            return Ok(Tally::default());
                        }
                        let bucket_resource = if resource == DEFAULT_RESOURCE {
                            key.resource.as_str()
                        } else {
                            resource.as_str()
                        };
                        let wanted = resolver.disabled(entity, bucket_resource).await?;
                        // A repair pass only writes what is missing; GSI3 projects
                        // keys only, so the bucket is read to know.
                        if directive.reassert.is_some() {
                            let current = self.store.get(&key.pk(), keys::SK_STATE, true).await?;
                            if current.is_none_or(|item| carries(&item, wanted)) {
                                return Ok(Tally::skipped());
                            }
                        }
                        self.stamp(&key, wanted, started).await
                    }
                    .boxed()
                })
                .await
            }
        }
    }
}
