//! A stamping pass: every bucket of one (resource, limit), found through the
//! resource's index (GSI2, whole items), page by page from a cursor, each
//! stamped ([`super::stamp`]) with what the level deciding its limits asks
//! for, in the client's resolution order: the target's factor when that
//! level opted in, base otherwise (a level that stopped being adaptive, a
//! target being retired, a reset). Each write is a compare-and-set on the
//! amount read, re-read and retried when it loses. Shared by the
//! controller, the provisioner's apply and `zae-limits adaptive reset`.

use super::declaration::Declaration;
use super::law::Factor;
use super::stamp::{Stamp, stamp};
use super::target::Target;
use crate::bucket::{field, limit_attr};
use crate::keys::{self, BucketKey, Index, SK_STATE};
use crate::level::{DEFAULT_RESOURCE, Level};
use crate::resolve::Resolver;
use crate::store::{Query, Returns, Store, StoreError};
use crate::value::{Attr, Item};

/// Compare-and-set attempts per bucket before it is left to the next pass.
const ATTEMPTS: usize = 3;

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pass {
    pub stamped: usize,
    /// Buckets whose writes kept losing: the next pass reaches them.
    pub lost: usize,
    /// The pass reached the last bucket.
    pub finished: bool,
    /// Where to go on when it did not (`None`: from the start).
    pub cursor: Option<Item>,
}

/// Stamps `target`'s buckets from its cursor on, under `declaration`
/// (`None`: every bucket to base). Stops between pages once `out_of_time`.
pub async fn run<S: Store>(
    store: &S,
    namespace: &str,
    declaration: Option<&Declaration>,
    target: &Target,
    out_of_time: impl Fn() -> bool,
) -> Result<Pass, StoreError> {
    let query = Query {
        index: &Index::GSI2,
        pk: keys::pk_resource(namespace, &target.resource),
        sk_prefix: keys::BUCKET_PREFIX.to_owned(),
        consistent: false,
    };
    let resolver = Resolver::new(store, namespace);
    let configured = entities_with_config(store, namespace, &target.resource).await?;
    let mut pass = Pass::default();
    let mut start = target.cursor.clone();
    loop {
        if out_of_time() {
            pass.cursor = start;
            return Ok(pass);
        }
        let page = store.query_page(&query, start.as_ref()).await?;
        for bucket in &page.items {
            seed_unconfigured(&resolver, &configured, bucket);
            match stamp_bucket(store, &resolver, declaration, target, bucket).await? {
                Some(true) => pass.stamped += 1,
                Some(false) => pass.lost += 1,
                None => {}
            }
        }
        match page.next {
            Some(next) => start = Some(next),
            None => {
                pass.finished = true;
                return Ok(pass);
            }
        }
    }
}

/// The entities with a config of their own for `resource` and for
/// `_default_`, from the entity-config index (GSI3): every other bucket is
/// decided by the resource or system level, read once, instead of two reads
/// per entity. The index is eventually consistent: a config written moments
/// ago may be missed, and its buckets then stamped from the level below only
/// if they carry that level's capacity, until the next pass.
async fn entities_with_config<S: Store>(
    store: &S,
    namespace: &str,
    resource: &str,
) -> Result<[std::collections::HashSet<String>; 2], StoreError> {
    let mut sets: [std::collections::HashSet<String>; 2] = Default::default();
    for (set, r) in sets.iter_mut().zip([resource, DEFAULT_RESOURCE]) {
        let query = Query {
            index: &Index::GSI3,
            pk: keys::gsi3_pk_entity_config(namespace, r),
            sk_prefix: String::new(),
            consistent: false,
        };
        for item in store.query(&query).await? {
            if let Some(entity) = item.get(Index::GSI3.sk).and_then(Attr::as_s) {
                set.insert(entity.to_owned());
            }
        }
    }
    Ok(sets)
}

/// Records that a bucket's entity has no config of its own, where it has none.
fn seed_unconfigured<S: Store>(
    resolver: &Resolver<'_, S>,
    [own, default]: &[std::collections::HashSet<String>; 2],
    bucket: &Item,
) {
    let Some(key) = keys::pk_of(bucket).and_then(|pk| BucketKey::parse(pk).ok()) else {
        return;
    };
    for (set, resource) in [(own, key.resource.as_str()), (default, DEFAULT_RESOURCE)] {
        if !set.contains(&key.entity) {
            let level = Level::Entity {
                entity: key.entity.clone(),
                resource: resource.to_owned(),
            };
            resolver.seed(&level, None);
        }
    }
}

/// `Some(true)` when written, `Some(false)` when every attempt lost,
/// `None` when the bucket needs nothing.
async fn stamp_bucket<S: Store>(
    store: &S,
    resolver: &Resolver<'_, S>,
    declaration: Option<&Declaration>,
    target: &Target,
    bucket: &Item,
) -> Result<Option<bool>, StoreError> {
    let limit = target.limit.as_str();
    let Some(key) = keys::pk_of(bucket).and_then(|pk| BucketKey::parse(pk).ok()) else {
        return Ok(None);
    };
    if !bucket.contains_key(&limit_attr(limit, field::CAPACITY)) {
        return Ok(None);
    }
    let Some((level, config)) = resolver.limits(&key.entity, &key.resource, &[]).await? else {
        return Ok(None);
    };
    let Some(base) = config.limits.iter().find(|l| l.name == limit) else {
        return Ok(None);
    };
    let (factor, max_scale) = match declaration.and_then(|d| d.scaling(&level, limit)) {
        Some(opt_in) => (target.factor, opt_in.max_scale),
        None => (Factor::ONE, None),
    };
    let mut current = bucket.clone();
    for _ in 0..ATTEMPTS {
        let Stamp::Write { update, .. } = stamp(&current, base, factor, max_scale) else {
            return Ok(None);
        };
        match store.update(&update, Returns::Nothing).await {
            Ok(_) => return Ok(Some(true)),
            Err(StoreError::ConditionFailed { .. }) => {
                // Written since it was read: read it again.
                match store.get(&key.pk(), SK_STATE, true).await? {
                    Some(item) => current = item,
                    None => return Ok(None),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(false))
}
