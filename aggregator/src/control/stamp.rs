//! The stamping pass of one target: every bucket of the resource, found by
//! the resource's index (GSI2, whole items), page by page from the target's
//! cursor. A bucket is stamped when the level that decides its limits (the
//! client's resolution order) opted in and it carries that level's
//! parameters ([`zae_table::adaptive::stamp`]); each write is a
//! compare-and-set on the amount read, re-read and retried when it loses.

use super::Controller;
use zae_table::adaptive::Declaration;
use zae_table::adaptive::stamp::{Stamp, stamp};
use zae_table::adaptive::target::Target;
use zae_table::bucket::{field, limit_attr};
use zae_table::keys::{self, BucketKey, Index, SK_STATE};
use zae_table::resolve::Resolver;
use zae_table::store::{Query, Returns, Store, StoreError};
use zae_table::{Attr, Item};

/// Compare-and-set attempts per bucket before it is left to the next pass.
const ATTEMPTS: usize = 3;

/// What a pass did.
#[derive(Debug, Default)]
pub struct Pass {
    pub stamped: usize,
    /// Buckets whose writes kept losing; the aggregator's repair and the
    /// next pass reach them.
    pub lost: usize,
    /// The pass reached the last bucket.
    pub finished: bool,
    /// Where to go on when it did not (`None`: from the start).
    pub cursor: Option<Item>,
}

impl<S: Store> Controller<'_, S> {
    /// Stamps the target's buckets from its cursor on.
    pub async fn stamp(
        &self,
        namespace: &str,
        declaration: &Declaration,
        target: &Target,
    ) -> Result<Pass, StoreError> {
        let query = Query {
            index: &Index::GSI2,
            pk: keys::pk_resource(namespace, &target.resource),
            sk_prefix: keys::BUCKET_PREFIX.to_owned(),
            consistent: false,
        };
        let resolver = Resolver::new(self.store, namespace);
        let mut pass = Pass::default();
        let mut start = target.cursor.clone();
        loop {
            if super::passed(self.stop_at) {
                pass.cursor = start;
                return Ok(pass);
            }
            let page = self.store.query_page(&query, start.as_ref()).await?;
            for bucket in &page.items {
                let stamped = self
                    .stamp_bucket(&resolver, declaration, target, bucket)
                    .await?;
                match stamped {
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

    /// `Some(true)` when written, `Some(false)` when every attempt lost,
    /// `None` when the bucket needs nothing.
    async fn stamp_bucket(
        &self,
        resolver: &Resolver<'_, S>,
        declaration: &Declaration,
        target: &Target,
        bucket: &Item,
    ) -> Result<Option<bool>, StoreError> {
        let limit = target.limit.as_str();
        let Some(key) = bucket
            .get("PK")
            .and_then(Attr::as_s)
            .and_then(|pk| BucketKey::parse(pk).ok())
        else {
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
        let Some(opt_in) = declaration.opt_in(&level, limit) else {
            return Ok(None);
        };
        let mut current = bucket.clone();
        for _ in 0..ATTEMPTS {
            let Stamp::Write { update, .. } =
                stamp(&current, base, target.factor, opt_in.max_scale)
            else {
                return Ok(None);
            };
            match self.store.update(&update, Returns::Nothing).await {
                Ok(_) => return Ok(Some(true)),
                Err(StoreError::ConditionFailed { .. }) => {
                    // Someone wrote the bucket since it was read: read it again.
                    match self.store.get(&key.pk(), SK_STATE, true).await? {
                        Some(item) => current = item,
                        None => return Ok(None),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Some(false))
    }
}
