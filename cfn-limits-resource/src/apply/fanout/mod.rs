//! Bucket fan-outs: a config change must reach the buckets that already
//! exist, because the client reads parameters and flags from its bucket
//! items between config-cache refreshes. Every fan-out works from the
//! table's current config (never from the manifest), only updates bucket
//! items that exist (`attribute_exists(PK)`), and finds them through an
//! index queried twice, so a bucket created during the first pass is not
//! missed. One module per kind: [`disabled`], [`cascade`], [`soft`] and
//! [`sync`] (whose parameter stamp is [`params`]); [`resolver`] reads config
//! levels in the client's resolution order.

mod cascade;
mod disabled;
pub mod params;
pub mod resolver;
mod soft;
mod sync;

use crate::manifest::{DEFAULT_RESOURCE, Disabled, Level};
use resolver::Resolver;
use std::collections::{BTreeSet, HashSet};
use zae_table::config::LevelConfig;
use zae_table::keys::{self, Index, config_key};
use zae_table::provisioner::Kind;
use zae_table::store::{Query, Returns, Store, StoreError, UpdateBuilder};
use zae_table::{BucketKey, Item};

/// Soft and bypass stamps are deadlines: the client renews or drops them
/// from fresh config on its slow path.
pub const STAMP_TTL_MS: i64 = 60_000;

/// `t + 60 s × U(0.8, 1)`: staggered, so stamped buckets do not all fall
/// back to the slow path in the same instant.
pub fn deadline(t_ms: i64) -> i64 {
    t_ms + (STAMP_TTL_MS as f64 * (0.8 + 0.2 * fastrand::f64())) as i64
}

/// Whether a bucket is one a level's fan-out must reach.
fn in_scope(level: &Level, key: &BucketKey) -> bool {
    match level {
        Level::System => true,
        Level::Resource(resource) => key.resource == *resource,
        Level::Entity { entity, resource } => {
            key.entity == *entity && (resource == DEFAULT_RESOURCE || key.resource == *resource)
        }
    }
}

/// Every bucket of the namespace, from one GSI4 query: cheaper than one
/// query per level when an apply owes many fan-outs.
pub async fn sweep(
    store: &impl Store,
    namespace: &str,
) -> Result<Vec<(BucketKey, Item)>, StoreError> {
    let items = store.query(&discovery(namespace, &Level::System)).await?;
    Ok(items
        .into_iter()
        .filter_map(|item| {
            let key = BucketKey::parse(keys::pk_of(&item)?).ok()?;
            Some((key, item))
        })
        .collect())
}

/// Where a fan-out looks for buckets.
fn discovery(namespace: &str, level: &Level) -> Query {
    let prefix = keys::BUCKET_PREFIX.to_owned();
    match level {
        Level::System => Query {
            index: &Index::GSI4,
            pk: namespace.to_owned(),
            sk_prefix: prefix,
            consistent: false,
        },
        Level::Resource(resource) => Query {
            index: &Index::GSI2,
            pk: keys::pk_resource(namespace, resource),
            sk_prefix: prefix,
            consistent: false,
        },
        Level::Entity { entity, resource } => Query {
            index: &Index::GSI3,
            pk: keys::pk_entity(namespace, entity),
            sk_prefix: if resource == DEFAULT_RESOURCE {
                prefix
            } else {
                format!("{prefix}{resource}#")
            },
            consistent: false,
        },
    }
}

/// What one fan-out did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub stamped: usize,
    pub skipped: usize,
}

/// The inputs of one fan-out run beyond the level's live config.
#[derive(Debug, Default, Clone)]
pub struct Directive {
    /// For a `disabled` re-assert: the manifest's value, and skip buckets
    /// already carrying it.
    pub reassert: Option<Disabled>,
    /// For `soft`: names whose soft-ness the write changed.
    pub soft_changed: BTreeSet<String>,
    /// For `sync`: the limits the level held before this apply wrote it.
    pub previous: Option<LevelConfig>,
}

pub struct FanOuts<'a, S> {
    pub store: &'a S,
    pub namespace: &'a str,
    /// Buckets already found by a [`sweep`]; `None` queries per level.
    pub known: Option<&'a [(BucketKey, Item)]>,
}

impl<S: Store> FanOuts<'_, S> {
    /// Runs one fan-out of `kind` for `level`, from its config as read now.
    pub async fn run(
        &self,
        kind: Kind,
        level: &Level,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let (pk, sk) = config_key(self.namespace, level);
        let live = self.store.get(&pk, &sk, true).await?;
        self.run_on(kind, level, live.as_ref(), directive).await
    }

    /// Runs one fan-out from a config item the caller has just read.
    pub async fn run_on(
        &self,
        kind: Kind,
        level: &Level,
        live: Option<&Item>,
        directive: &Directive,
    ) -> Result<Tally, StoreError> {
        let resolver = Resolver::new(self.store, self.namespace);
        let live = live.map(LevelConfig::decode);
        resolver.seed(level, live.clone());
        match kind {
            Kind::Disabled => {
                self.disabled(&resolver, level, live.as_ref(), directive)
                    .await
            }
            Kind::Cascade => self.cascade(&resolver, level).await,
            Kind::Soft => self.soft(&resolver, level, live.as_ref(), directive).await,
            Kind::Sync => self.sync(&resolver, level, live.as_ref(), directive).await,
        }
    }

    /// The buckets in the level's reach: from the sweep, or from its index,
    /// queried twice over, each PK once.
    async fn buckets(&self, level: &Level) -> Result<Vec<(BucketKey, Item)>, StoreError> {
        if let Some(known) = self.known {
            return Ok(known
                .iter()
                .filter(|(key, _)| in_scope(level, key))
                .cloned()
                .collect());
        }
        let query = &discovery(self.namespace, level);
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for _pass in 0..2 {
            for item in self.store.query(query).await? {
                let Some(pk) = keys::pk_of(&item) else {
                    continue;
                };
                let Ok(key) = BucketKey::parse(pk) else {
                    continue;
                };
                if seen.insert(pk.to_owned()) {
                    found.push((key, item));
                }
            }
        }
        Ok(found)
    }

    async fn write(
        &self,
        key: &BucketKey,
        update: UpdateBuilder,
        condition: Option<String>,
    ) -> Result<bool, StoreError> {
        let pk = key.pk();
        let mut update = update;
        let exists = update.name(Index::TABLE.pk);
        let condition = match condition {
            Some(extra) => format!("attribute_exists({exists}) AND ({extra})"),
            None => format!("attribute_exists({exists})"),
        };
        let update = update.build(&pk, keys::SK_STATE, Some(condition));
        match self.store.update(&update, Returns::Nothing).await {
            Ok(_) => Ok(true),
            // The bucket went away (TTL, reset) or never existed: nothing to stamp.
            Err(StoreError::ConditionFailed { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }
}
