//! A cascade on the fast path: the entity's bucket took the debit, and its
//! parent's follows when the bucket says it cascades (sent at once when
//! the process already knew, else now); a parent that refuses takes the
//! child's debit back.

use super::Fast;
use super::update::{self, Refusal};
use crate::bucket::BucketView;
use crate::lease::{Outcome, entry_from_view};
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
            Ok(mut parent) => {
                let mut entries = vec![child];
                entries.append(&mut parent);
                Ok(entries)
            }
            Err(e) => {
                self.refund(&child).await;
                Err(e)
            }
        }
    }

    /// The parent's fast-path write, as it ended: its entry, a rejection
    /// of both buckets, or the slow path on the parent alone.
    async fn parent(
        &self,
        key: &BucketKey,
        view: &BucketView,
        pkey: BucketKey,
        sent: Fast,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        match sent {
            Fast::Admitted(pview) => Ok(vec![self.fast_entry(&pkey, &pview, consume, now).await]),
            Fast::Refused(pview) => match update::classify(&pview, consume, now) {
                Refusal::Exhausted if !update::refill_would_help(&pview, consume, now) => Err(
                    rejection::cascade((key, view), (&pkey, &pview), consume, now),
                ),
                Refusal::Disabled => Err(disabled(&pkey, "bucket")),
                Refusal::Unsupported(feature) => Err(unsupported(&pkey, feature)),
                _ => self.slow(&pkey, consume, false).await,
            },
            Fast::Missing | Fast::Conflict => self.slow(&pkey, consume, false).await,
        }
    }
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
