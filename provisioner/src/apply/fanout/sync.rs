//! The `sync` fan-out: an entity level's parameters stamped on its buckets
//! (or, when the level went away, the parameters they fall back to), with
//! limits no level declares any more stripped.

use super::params::param_update;
use super::{Directive, FanOuts, Tally};
use crate::apply::now_ms;
use crate::manifest::{DEFAULT_RESOURCE, Level};
use futures::FutureExt;
use std::collections::BTreeSet;
use zae_table::config::{LevelConfig, LimitConfig};
use zae_table::resolve::Resolver;
use zae_table::schedule;
use zae_table::store::{Store, StoreError};

/// Refuses to copy a stored schedule the client cannot decode onto a bucket:
/// every later acquire there would fail until the bucket expired. The level
/// is reported and its sync stays pending; the buckets keep what they have.
fn undecodable(level: &Level, config: &LevelConfig) -> Result<(), StoreError> {
    let bad = config.limits.iter().find_map(|limit| {
        [&limit.sched, &limit.rsched]
            .into_iter()
            .flatten()
            .find(|compact| schedule::decode_compact(compact).is_none())
            .map(|compact| (limit.name.as_str(), compact))
    });
    match bad {
        None => Ok(()),
        Some((limit, compact)) => Err(StoreError::Fatal {
            operation: "param sync",
            key: level.describe(),
            message: format!(
                "the stored schedule of limit '{limit}' ({compact:?}) is not one the client \
                 can decode; its buckets are left as they are until the level is fixed"
            ),
        }),
    }
}

impl<S: Store> FanOuts<'_, S> {
    pub(super) async fn sync(
        &self,
        resolver: &Resolver<'_, S>,
        level: &Level,
        live: Option<&LevelConfig>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let Level::Entity { entity, resource } = level else {
            return Ok(Tally::default());
        };
        let declared: Vec<LimitConfig> = live.map(|c| c.limits.clone()).unwrap_or_default();
        // As the reference decodes before it discovers: an undecodable
        // schedule is reported, and the sync kept pending, whether or not
        // a bucket is live. Per bucket below only for `_default_`, whose
        // fallback depends on each bucket's resource.
        match live.filter(|c| !c.limits.is_empty()) {
            Some(config) => undecodable(level, config)?,
            None if resource != DEFAULT_RESOURCE => {
                let fallback: Vec<Level> = Level::resolution(entity, resource, true)
                    .into_iter()
                    .skip(1)
                    .collect();
                if let Some((decided, config)) =
                    resolver.limits(entity, resource, &fallback).await?
                {
                    undecodable(&decided, &config)?;
                }
            }
            None => {}
        }
        let previous = &directive.previous;
        let declared_names: BTreeSet<String> = declared.iter().map(|l| l.name.clone()).collect();
        let (declared, declared_names) = (&declared, &declared_names);
        self.each_bucket(level, |key, _| {
            async move {
                if key.entity != *entity {
                    return Ok(Tally::default());
                }
                let t = now_ms();
                // What this bucket must run on now, and whether an entity level decided it.
                let plan = if resource == DEFAULT_RESOURCE {
                    resolver.limits(entity, &key.resource, &[]).await?
                } else if declared.is_empty() {
                    let fallback = Level::resolution(entity, resource, true)
                        .into_iter()
                        .skip(1)
                        .collect::<Vec<_>>();
                    resolver.limits(entity, resource, &fallback).await?
                } else {
                    Some((level.clone(), live.cloned().unwrap_or_default()))
                };
                // Nothing resolves: the bucket keeps what it has (the client does the same).
                let Some((decided, config)) = plan else {
                    return Ok(Tally::skipped());
                };
                undecodable(&decided, &config)?;
                let entity_decided = matches!(decided, Level::Entity { .. });
                let resolved: BTreeSet<String> =
                    config.limits.iter().map(|l| l.name.clone()).collect();
                let stale: BTreeSet<String> = previous
                    .union(declared_names)
                    .filter(|name| !resolved.contains(*name))
                    .cloned()
                    .collect();
                let update = param_update(&config, entity_decided, &stale, t);
                Ok(Tally::stamped(self.write(&key, update, None).await?))
            }
            .boxed()
        })
        .await
    }
}
