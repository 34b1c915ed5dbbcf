//! A sharded bucket on the fast path: a shard whose limit is short sends
//! the debit to other shards; one whose write budget is spent doubles the
//! bucket's shard count (§5.3).

use super::Fast;
use super::update::{self, Refusal};
use crate::bucket::BucketView;
use crate::error::Error;
use crate::lease::Outcome;
use crate::rejection::{contended_on, disabled, rejection, unsupported};
use crate::shared::Shared;
use crate::status::Consume;
use zae_table::bucket::shard::{self, MAX_SHARD_COUNT};
use zae_table::keys::BucketKey;
use zae_table::store::{Returns, Store, StoreError, Updated};

impl<S: Store + 'static> Shared<S> {
    /// The shard's write budget is spent and a refill would not bring one
    /// write back: double the bucket's shard count on shard 0 (a loser of
    /// that race adopts the winner's count), raise the other shards' counts,
    /// and take a new shard in the slow path (§5.3). At 32 shards, the slow
    /// path on this shard.
    pub(super) async fn double(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        let (store, count) = (&self.store, view.shard_count);
        if count >= MAX_SHARD_COUNT {
            tracing::warn!(bucket = %key.pk(), "write budget spent at the most shards a bucket may have");
            return self.slow(key, consume, true).await;
        }
        let doubled = (count * 2).min(MAX_SHARD_COUNT);
        let first = key.shard(0).pk();
        let busy = |e: StoreError| {
            if e.is_conflict() {
                contended_on(key, view, consume, now)
            } else {
                Error::store(e)
            }
        };
        let now_count = match store
            .update_or_old(&shard::double(&first, Some(count), doubled))
            .await
            .map_err(busy)?
        {
            Updated::Applied(_) => {
                // A shard not created yet fails its condition harmlessly.
                for other in 1..count {
                    let raise = shard::raise_count(&key.shard(other as u32).pk(), doubled, &[]);
                    match store.update(&raise, Returns::Nothing).await {
                        Ok(_) | Err(StoreError::ConditionFailed { .. }) => {}
                        Err(e) => return Err(busy(e)),
                    }
                }
                doubled
            }
            Updated::Refused(Some(item)) => BucketView::read(&item).shard_count,
            Updated::Refused(None) => return self.slow(key, consume, true).await,
        };
        self.learn_shards(key, now_count);
        let old: Vec<u32> = (0..u32::try_from(count).unwrap_or(1)).collect();
        let fresh = key.shard(self.draw(now_count, &old));
        self.slow(&fresh, consume, true).await
    }

    /// A consumed limit is short on this shard: other shards first (up to
    /// two, when the bucket does not cascade), then the refill check.
    pub(super) async fn exhausted(
        &self,
        key: BucketKey,
        view: BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        // Failed on a trimming `vu = 0` only: this shard's slow path trims it.
        if view.vu.is_some() && update::fits_now(&view, consume, now, true) {
            return self.slow(&key, consume, true).await;
        }
        if view.shard_count > 1 && !view.cascade {
            let mut tried = vec![key.shard];
            for _ in 0..2 {
                if tried.len() as i64 >= view.shard_count {
                    break;
                }
                let other = key.shard(self.draw(view.shard_count, &tried));
                tried.push(other.shard);
                match self.fast(&other, consume, now).await? {
                    Fast::Admitted(v) => {
                        return Ok(vec![self.fast_entry(&other, &v, consume, now).await]);
                    }
                    Fast::Missing | Fast::Conflict => {
                        return self.slow(&other, consume, true).await;
                    }
                    Fast::Refused(v) => match update::classify(&v, consume, now) {
                        Refusal::Exhausted => continue,
                        Refusal::Disabled => return Err(disabled(&other, "bucket")),
                        Refusal::Unsupported(f) => return Err(unsupported(&other, f)),
                        _ => return self.slow(&other, consume, true).await,
                    },
                }
            }
        }
        if update::refill_would_help(&view, consume, now) {
            return self.slow(&key, consume, true).await;
        }
        Err(rejection(&key, &view, consume, now))
    }
}
