//! A cascade on the fast path: the entity's bucket took the debit, and its
//! parent's follows when the bucket says it cascades (sent at once when
//! the process already knew, else now); a parent that refuses takes the
//! child's debit back.

use super::Fast;
use super::update::{self, Refusal};
use crate::bucket::BucketView;
use crate::error::Error;
use crate::lease::{Entry, Outcome, entry_from_view};
use crate::rejection::{self, disabled, unsupported};
use crate::shared::Shared;
use crate::status::Consume;
use zae_table::keys::BucketKey;
use zae_table::store::Store;

impl<S: Store + 'static> Shared<S> {
    /// The entity's bucket took the debit; its parent's follows when the
    /// bucket says it cascades.
    pub(crate) async fn admitted(
        &self,
        key: BucketKey,
        view: BucketView,
        parent_sent: Option<(BucketKey, Fast)>,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        let child = self.fast_entry(&key, &view, consume, now).await;
        let parent = view.parent_id.clone().filter(|_| view.cascade);
        // A debit sent to a parent the bucket no longer names goes back.
        if let Some((pkey, Fast::Admitted(pview))) = &parent_sent
            && parent.as_ref() != Some(&pkey.entity)
        {
            self.refund(&entry_from_view(pkey, pview, consume, now))
                .await;
        }
        let Some(parent) = parent else {
            return Ok(vec![child]);
        };
        let (pkey, parent_fast) = match parent_sent {
            Some((pkey, sent)) if pkey.entity == parent => (pkey, Ok(sent)),
            _ => {
                let pkey = self.parent_key(&key, parent);
                let sent = self.fast(&pkey, consume, now).await;
                (pkey, sent)
            }
        };
        if let Ok(sent) = &parent_fast
            && needs_both(sent, consume, now)
        {
            self.refund(&child).await;
            return self.slow(&key, consume, true).await;
        }
        let parent_result = match parent_fast {
            Ok(sent) => self.parent(&key, &view, pkey, sent, consume, now).await,
            Err(e) => Err(e),
        };
        match parent_result {
            Ok(Parent::Admitted(mut parent)) => {
                let mut entries = vec![child];
                entries.append(&mut parent);
                Ok(entries)
            }
            Ok(Parent::Both(pinned)) => {
                // Both buckets in one slow pass, on the shard a doubling
                // added, else on a parent shard drawn again (uniformly, as
                // the Python client draws it).
                self.refund(&child).await;
                self.slow_pinned(&key, consume, true, pinned.as_ref()).await
            }
            Err(e) => {
                self.refund(&child).await;
                Err(e)
            }
        }
    }

    /// The parent's fast-path write, as it ended: its entry, a rejection
    /// of both buckets, the slow path on the parent's shard alone, or both
    /// buckets to the slow path (`Parent::Both`).
    async fn parent(
        &self,
        key: &BucketKey,
        view: &BucketView,
        pkey: BucketKey,
        sent: Fast,
        consume: &Consume,
        now: i64,
    ) -> Result<Parent, Error> {
        if needs_both(&sent, consume, now) {
            return Ok(Parent::Both(None));
        }
        let pview = match sent {
            Fast::Admitted(pview) => {
                let entry = self.fast_entry(&pkey, &pview, consume, now).await;
                return Ok(Parent::Admitted(vec![entry]));
            }
            Fast::Missing | Fast::Conflict => return self.parent_alone(&pkey, consume).await,
            Fast::Refused(pview) => pview,
        };
        match update::classify(&pview, consume, now) {
            Refusal::Disabled => Err(disabled(&pkey, "bucket")),
            Refusal::Unsupported(feature) => Err(unsupported(&pkey, feature)),
            Refusal::Exhausted | Refusal::WcuShort { .. }
                if !update::refill_would_help(&pview, consume, now) =>
            {
                Err(rejection::cascade(
                    (key, view),
                    (&pkey, &pview),
                    consume,
                    now,
                ))
            }
            // A hot parent spreads as a hot child does: a new shard, which
            // the slow path creates beside the child's write.
            Refusal::WcuShort {
                refilled: false, ..
            } => match self.grow(&pkey, &pview, consume, now).await? {
                Some(fresh) => Ok(Parent::Both(Some(fresh))),
                None => self.parent_alone(&pkey, consume).await,
            },
            _ => self.parent_alone(&pkey, consume).await,
        }
    }

    /// The slow path on the parent's shard alone; both buckets to the slow
    /// path when it rejects (other writers' contention aside).
    async fn parent_alone(&self, pkey: &BucketKey, consume: &Consume) -> Result<Parent, Error> {
        match self.slow(pkey, consume, false).await {
            Ok(entries) => Ok(Parent::Admitted(entries)),
            Err(Error::RateLimitExceeded(e)) if !e.contended => Ok(Parent::Both(None)),
            Err(e) => Err(e),
        }
    }
}

/// How a cascade parent's part ended, when it did not refuse.
enum Parent {
    /// Its debit, on the shard the fast path wrote.
    Admitted(Vec<Entry>),
    /// Neither bucket keeps its debit: the slow path writes both, the
    /// parent on this shard (one a doubling added) or on one drawn again.
    Both(Option<BucketKey>),
}

/// The parent's write failed where only a pass over both buckets settles
/// it, as 0.17.0 decides (it refunds the child's debit and takes the slow
/// path for both): no parent item, no image (a conflict), an expired
/// stamp, or a consumed limit the parent's item lacks. A parent-only pass
/// would keep the child's fast debit unrefilled.
fn needs_both(sent: &Fast, consume: &Consume, now: i64) -> bool {
    match sent {
        Fast::Admitted(_) => false,
        Fast::Missing | Fast::Conflict => true,
        Fast::Refused(pview) => {
            matches!(update::classify(pview, consume, now), Refusal::Boundary)
                || consume.keys().any(|n| !pview.limits.contains_key(n))
        }
    }
}
