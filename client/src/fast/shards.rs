//! A sharded bucket on the fast path: a shard whose limit is short sends
//! the debit to other shards; one whose write budget is spent doubles the
//! bucket's shard count (§5.3).

use super::Fast;
use super::update::{self, Refusal};
use crate::bucket::BucketView;
use crate::error::Error;
use crate::lease::{Outcome, entry_from_view};
use crate::rejection::{contended_on, disabled, rejection, unsupported};
use crate::shared::Shared;
use crate::status::Consume;
use zae_table::bucket::shard::{self, MAX_SHARD_COUNT};
use zae_table::keys::BucketKey;
use zae_table::store::{Returns, Store, StoreError, Updated};

impl<S: Store + 'static> Shared<S> {
    /// The shard's write budget is spent and a refill would not bring one
    /// write back: double the bucket's shard count and take a new shard in
    /// the slow path (§5.3); at 32 shards, the slow path on this shard.
    pub(super) async fn double(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        match self.grow(key, view, consume, now).await? {
            Some(fresh) => self.slow(&fresh, consume, true).await,
            None => self.slow(key, consume, true).await,
        }
    }

    /// Doubles the bucket's shard count on shard 0 (a loser of that race
    /// adopts the winner's count) and raises the other shards' counts; the
    /// new shard to take, or `None` when it stays this one (32 shards
    /// already, or shard 0 gone). A cascade parent grows the same way.
    pub(super) async fn grow(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Result<Option<BucketKey>, Error> {
        let (store, count) = (&self.store, view.shard_count);
        if count >= MAX_SHARD_COUNT {
            tracing::warn!(bucket = %key.pk(), "write budget spent at the most shards a bucket may have");
            return Ok(None);
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
            Updated::Refused(None) => return Ok(None),
        };
        self.learn_shards(key, now_count);
        let old: Vec<u32> = (0..u32::try_from(count).unwrap_or(1)).collect();
        Ok(Some(key.shard(self.draw(now_count, &old))))
    }

    /// A consumed limit is short on this shard: other shards first (up to
    /// two, when the bucket does not cascade), then the refill check. A
    /// cascading child whose refill would help takes the slow path on
    /// another shard, as the Python client hands it one: a probe is a
    /// child-only write.
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
        if view.shard_count > 1 && view.cascade {
            if !update::refill_would_help(&view, consume, now) {
                return Err(rejection(&key, &view, consume, now));
            }
            let other = key.shard(self.draw(view.shard_count, &[key.shard]));
            return self.slow(&other, consume, true).await;
        }
        if view.shard_count > 1
            && let Some(outcome) = self.probe(&key, view.shard_count, consume, now).await
        {
            return outcome;
        }
        if update::refill_would_help(&view, consume, now) {
            return self.slow(&key, consume, true).await;
        }
        Err(rejection(&key, &view, consume, now))
    }

    /// Up to two other shards of a bucket that does not cascade; `None`
    /// when each was short too. A probed shard whose own stamp says the
    /// bucket cascades (shards disagree while a policy change fans out)
    /// gives its child-only debit back and takes the slow path, which
    /// debits the parent too; one that failed only on a trimming `vu = 0`
    /// takes its own slow path, the only pass that clears it.
    async fn probe(
        &self,
        key: &BucketKey,
        count: i64,
        consume: &Consume,
        now: i64,
    ) -> Option<Outcome> {
        let mut tried = vec![key.shard];
        for _ in 0..2 {
            if tried.len() as i64 >= count {
                break;
            }
            let other = key.shard(self.draw(count, &tried));
            tried.push(other.shard);
            let sent = match self.fast(&other, consume, now).await {
                Ok(sent) => sent,
                Err(e) => return Some(Err(e)),
            };
            return Some(match sent {
                Fast::Admitted(v) if v.cascade && v.parent_id.is_some() => {
                    self.refund(&entry_from_view(&other, &v, consume, now))
                        .await;
                    self.slow(&other, consume, true).await
                }
                Fast::Admitted(v) => Ok(vec![self.fast_entry(&other, &v, consume, now).await]),
                Fast::Missing | Fast::Conflict => self.slow(&other, consume, true).await,
                Fast::Refused(v) => match update::classify(&v, consume, now) {
                    Refusal::Exhausted
                        if v.vu.is_some() && update::fits_now(&v, consume, now, false) =>
                    {
                        self.slow(&other, consume, true).await
                    }
                    Refusal::Exhausted => continue,
                    Refusal::Disabled => Err(disabled(&other, "bucket")),
                    Refusal::Unsupported(f) => Err(unsupported(&other, f)),
                    _ => self.slow(&other, consume, true).await,
                },
            });
        }
        None
    }
}
