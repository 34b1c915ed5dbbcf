//! Local rejections (§7.4 of the protocol): before the fast write, each
//! trusted cached image of the bucket's shards is refilled to now, as a
//! refusal's refill check would. Every shard short is a rejection with no
//! request, unless the bucket cascades to a parent the cache cannot vouch
//! for (a disabled parent answers `ResourceDisabled`, which outranks it);
//! every parent shard short, for a bucket whose own image says it
//! cascades, is one too. Otherwise the shards known short are not drawn.

use crate::error::{Error, LimitStatus, RateLimitExceeded};
use crate::rejection::image_statuses;
use crate::shared::Shared;
use crate::status::Consume;
use std::collections::BTreeMap;
use zae_table::keys::BucketKey;
use zae_table::store::Store;

/// Statuses by shard.
type ByShard = BTreeMap<u32, Vec<LimitStatus>>;

impl<S: Store + 'static> Shared<S> {
    /// The shards known short (not to be drawn), or the rejection the cache
    /// already knows.
    pub(crate) fn precheck(
        &self,
        entity: &str,
        resource: &str,
        consume: &Consume,
        now: i64,
    ) -> Result<Vec<u32>, Error> {
        let cache = &self.rejections;
        if !cache.enabled() {
            return Ok(Vec::new());
        }
        let (short, judged, count) = self.shortfall(entity, resource, consume, now);
        let parent = cache.parent_of(entity, resource, now);
        let vouched = |p: &String| {
            !cache.views(p, resource, now).is_empty() && !cache.known_disabled(p, resource)
        };
        if all_of(&short, count) && parent.as_ref().is_none_or(vouched) {
            return Err(refused(soonest(&short)));
        }
        if let Some(parent) = parent {
            let (pshort, _, pcount) = self.shortfall(&parent, resource, consume, now);
            if all_of(&pshort, pcount) {
                let mut statuses = soonest(&judged);
                statuses.extend(soonest(&pshort));
                return Err(refused(statuses));
            }
        }
        Ok(short.into_keys().collect())
    }

    /// Each trusted cached shard judged at `now`: the short ones, every one
    /// judged, and the shard count (the larger of the known and the cached).
    /// A shard whose image lacks a consumed limit is not judged (the slow
    /// path would seed it).
    fn shortfall(
        &self,
        entity: &str,
        resource: &str,
        consume: &Consume,
        now: i64,
    ) -> (ByShard, ByShard, i64) {
        let views = self.rejections.views(entity, resource, now);
        let count = views
            .values()
            .map(|v| v.shard_count)
            .fold(self.known_shards(entity, resource), i64::max);
        let (mut short, mut judged) = (ByShard::new(), ByShard::new());
        for (shard, view) in views {
            if i64::from(shard) >= count || consume.keys().any(|n| !view.limits.contains_key(n)) {
                continue;
            }
            let key = BucketKey {
                namespace: self.namespace.clone(),
                entity: entity.to_owned(),
                resource: resource.to_owned(),
                shard,
            };
            let statuses = image_statuses(&key, &view, consume, now);
            // Judged as the refusal's refill check judges: a soft stamp,
            // live or not, is never short (a past one is the slow path's).
            let exceeded = statuses
                .iter()
                .any(|s| s.exceeded && consume.contains_key(&s.limit));
            if exceeded {
                short.insert(shard, statuses.clone());
            }
            judged.insert(shard, statuses);
        }
        (short, judged, count)
    }
}

fn all_of(short: &ByShard, count: i64) -> bool {
    !short.is_empty() && i64::try_from(short.len()).is_ok_and(|n| n >= count)
}

/// The statuses of the shard that fits soonest.
fn soonest(by_shard: &ByShard) -> Vec<LimitStatus> {
    by_shard
        .values()
        .min_by_key(|st| st.iter().map(|s| s.retry_after_ms).max().unwrap_or(0))
        .cloned()
        .unwrap_or_default()
}

fn refused(statuses: Vec<LimitStatus>) -> Error {
    Error::RateLimitExceeded(RateLimitExceeded {
        statuses,
        contended: false,
    })
}
