//! Bucket fan-outs: a config change must reach the buckets that already
//! exist, because the client reads parameters and flags from its bucket
//! items between config-cache refreshes. Every fan-out works from the
//! table's current config (never from the manifest), only updates bucket
//! items that exist (`attribute_exists(PK)`), and finds them through an
//! index queried twice, so a bucket created during the first pass is not
//! missed. One module per kind: [`disabled`], [`cascade`], [`soft`] and
//! [`sync`] (whose parameter stamp is [`params`]); `zae_table::resolve` reads config
//! levels in the client's resolution order.

mod cascade;
mod disabled;
pub mod params;

mod soft;
mod sync;

use crate::manifest::{DEFAULT_RESOURCE, Disabled, Level};
use futures::StreamExt;
use futures::future::BoxFuture;
use std::collections::{BTreeSet, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use zae_table::resolve::Resolver;
// Tokio's clock: a test can pause it and let a slow page take virtual time.
use tokio::time::Instant;
use zae_table::config::LevelConfig;
use zae_table::keys::{self, Index, config_key};
use zae_table::provisioner::{Cursor, Kind};
use zae_table::store::{Query, Returns, Store, StoreError, UpdateBuilder};
use zae_table::{BucketKey, Item};

/// Bucket writes in flight at once, within one page of discovery.
pub const CONCURRENCY: usize = 16;
/// Buckets visited between two looks at the clock: a page of discovery
/// (up to 1 MB of keys) can hold thousands.
const CHUNK: usize = 8 * CONCURRENCY;

/// One bucket's part of a fan-out. Boxed: a future that borrows the
/// fan-out's state stays `Send` for the Lambda's task.
pub type Visit<'v> = BoxFuture<'v, Result<Tally, StoreError>>;

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

/// Buckets a sweep holds at most (their keys, some 150 bytes each); a larger
/// namespace is discovered per level, page by page, in bounded memory.
pub const SWEEP_MAX_BUCKETS: usize = 50_000;

/// Every bucket of the namespace, from one GSI4 query: cheaper than one
/// query per level when an apply owes many fan-outs. `None` past `max`
/// ([`SWEEP_MAX_BUCKETS`]).
pub async fn sweep(
    store: &impl Store,
    namespace: &str,
    max: usize,
) -> Result<Option<Vec<BucketKey>>, StoreError> {
    let query = discovery(namespace, &Level::System);
    let mut found = Vec::new();
    let mut start: Option<Item> = None;
    loop {
        let page = store.query_page(&query, start.as_ref()).await?;
        found.extend(
            page.items
                .iter()
                .filter_map(|item| BucketKey::parse(keys::pk_of(item)?).ok()),
        );
        if found.len() > max {
            return Ok(None);
        }
        match page.next {
            Some(next) => start = Some(next),
            None => return Ok(Some(found)),
        }
    }
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
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub stamped: usize,
    pub skipped: usize,
    /// Out of time before the last bucket: where to go on.
    pub stopped: Option<Cursor>,
}

impl Tally {
    pub fn stamped(written: bool) -> Tally {
        Tally {
            stamped: usize::from(written),
            ..Tally::default()
        }
    }

    pub fn skipped() -> Tally {
        Tally {
            skipped: 1,
            ..Tally::default()
        }
    }

    fn add(mut self, other: Tally) -> Tally {
        self.stamped += other.stamped;
        self.skipped += other.skipped;
        self
    }
}

/// The inputs of one fan-out run beyond the level's live config.
#[derive(Debug, Default, Clone)]
pub struct Directive {
    /// For a `disabled` re-assert: the manifest's value, and skip buckets
    /// already carrying it.
    pub reassert: Option<Disabled>,
    /// For `soft`: names whose soft-ness the write changed.
    pub soft_changed: BTreeSet<String>,
    /// For `sync`: the names of the limits the level held before the write.
    pub previous: BTreeSet<String>,
}

impl Directive {
    /// What a stopped run keeps for whoever goes on with it.
    pub fn carry(&self, cursor: Cursor, config: Option<String>) -> Cursor {
        Cursor {
            config,
            previous: self.previous.clone(),
            soft_changed: self.soft_changed.clone(),
            ..cursor
        }
    }
}

/// A level's config as a fingerprint: a place recorded under one config
/// holds only while the level still has it.
pub fn fingerprint(config: Option<&Item>) -> Option<String> {
    use sha2::{Digest, Sha256};
    let item = config?;
    let digest = Sha256::digest(format!("{item:?}").as_bytes());
    Some(digest.iter().take(12).map(|b| format!("{b:02x}")).collect())
}

pub struct FanOuts<'a, S> {
    pub store: &'a S,
    pub namespace: &'a str,
    /// Buckets already found by a [`sweep`]; `None` queries per level.
    pub known: Option<&'a [BucketKey]>,
    /// Start no page of buckets after this instant.
    pub stop_at: Option<Instant>,
    /// Where the first discovery of a fan-out goes on from.
    pub resume: Option<Cursor>,
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

    fn out_of_time(&self) -> bool {
        super::passed(self.stop_at)
    }

    /// Visits every bucket in the level's reach, [`CONCURRENCY`] at a time.
    /// Found page by page through the level's index, queried twice (the
    /// second pass visits only buckets the first did not see, remembered as
    /// 64-bit hashes), from [`FanOuts::resume`]; or from the sweep. Memory
    /// stays bounded by a page, whatever the namespace holds. Out of time,
    /// it stops between two chunks of [`CHUNK`] buckets and says where to go on.
    async fn each_bucket<'v, F>(&'v self, level: &Level, visit: F) -> Result<Tally, StoreError>
    where
        F: Fn(BucketKey, Item) -> Visit<'v>,
    {
        if let Some(known) = self.known {
            return self.each_known(known, level, visit).await;
        }
        let query = discovery(self.namespace, level);
        let hasher = BuildHasherDefault::<DefaultHasher>::default();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut cursor = self.resume.clone().unwrap_or_else(Cursor::start);
        let mut tally = Tally::default();
        loop {
            if self.out_of_time() {
                tally.stopped = Some(cursor);
                return Ok(tally);
            }
            let page = self.store.query_page(&query, cursor.after.as_ref()).await?;
            for chunk in page.items.chunks(CHUNK) {
                if self.out_of_time() {
                    tally.stopped = Some(cursor);
                    return Ok(tally);
                }
                let fresh = chunk.iter().filter_map(|item| {
                    let pk = keys::pk_of(item)?;
                    let key = BucketKey::parse(pk).ok()?;
                    seen.insert(hasher.hash_one(pk))
                        .then(|| (key, item.clone()))
                });
                tally = tally.add(visit_all(fresh, &visit).await?);
                // Every bucket up to this one is done: go on after it.
                cursor.after = chunk.last().map(|item| query.index.start_key(item));
            }
            match page.next {
                Some(next) => cursor.after = Some(next),
                None if cursor.pass == 1 => {
                    cursor = Cursor {
                        pass: 2,
                        after: None,
                        ..cursor
                    }
                }
                None => return Ok(tally),
            }
        }
    }

    async fn each_known<'v, F>(
        &self,
        known: &[BucketKey],
        level: &Level,
        visit: F,
    ) -> Result<Tally, StoreError>
    where
        F: Fn(BucketKey, Item) -> Visit<'v>,
    {
        let mut tally = Tally::default();
        let scoped: Vec<&BucketKey> = known.iter().filter(|key| in_scope(level, key)).collect();
        for chunk in scoped.chunks(CHUNK) {
            if self.out_of_time() {
                tally.stopped = Some(Cursor::start());
                return Ok(tally);
            }
            // The sweep reads GSI4, which holds keys only: no attributes to pass.
            let chunk = chunk.iter().map(|key| ((*key).clone(), Item::new()));
            tally = tally.add(visit_all(chunk, &visit).await?);
        }
        Ok(tally)
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

/// Runs the visits [`CONCURRENCY`] at a time; the first error ends them.
/// (The futures are made before the first await: an iterator adapter held
/// across it would make the Lambda's future lose `Send`.)
async fn visit_all<'v, F>(
    buckets: impl Iterator<Item = (BucketKey, Item)>,
    visit: &F,
) -> Result<Tally, StoreError>
where
    F: Fn(BucketKey, Item) -> Visit<'v>,
{
    let visits: Vec<Visit<'v>> = buckets.map(|(key, item)| visit(key, item)).collect();
    let mut running = futures::stream::iter(visits).buffer_unordered(CONCURRENCY);
    let mut tally = Tally::default();
    while let Some(one) = running.next().await {
        tally = tally.add(one?);
    }
    Ok(tally)
}
