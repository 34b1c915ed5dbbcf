//! The fast path (§2 of the protocol): one conditional UpdateItem per
//! bucket, never reading first; a refusal is judged on the item it
//! returns. Its modules, in the order an acquire meets them:
//! - `update`: the write and what a refusal says (pure);
//! - `bypass`: the bypass-shaped write, for a pair known stamped;
//! - here: the write on one shard, conflicts resent, and a refusal sent on
//!   (to a rejection, to other shards, to the slow path);
//! - `local`: a rejection the rejection cache already knows, before any write;
//! - `cascade`: the parent's bucket after the entity's took the debit;
//! - `shards`: other shards of an exhausted bucket, and doubling the count
//!   when the write budget is spent.
//!
//! Its I/O is `impl Shared` blocks, as the slow path's is: a path falls
//! to the other (and a cascade needs both), so one receiver keeps those
//! calls plain method calls; and it is the limiter's shared state, not
//! `RateLimiter`, so the paths need nothing of `limiter` (which dispatches
//! to them).

pub(crate) mod bypass;
mod cascade;
mod local;
mod shards;
pub(crate) mod update;

use crate::bucket::BucketView;
use crate::error::Error;
use crate::lease::{self, Entry, Outcome, Part, entry_from_view, negated};
use crate::rejection::{disabled, rejection, unsupported};
use crate::shared::{CONFLICT_WAITS_MS, Shared, conflict_wait};
use crate::status::Consume;
use update::Refusal;
use zae_table::keys::BucketKey;
use zae_table::store::{Store, Update, Updated};

/// One shard's fast-path write, as it ended.
pub(crate) enum Fast {
    Admitted(BucketView),
    Refused(BucketView),
    Missing,
    /// Still in other transactions after three resends.
    Conflict,
}

impl<S: Store + 'static> Shared<S> {
    /// The fast path on one shard, conflicts resent up to three times; in
    /// the bypass shape when the pair is known stamped (`bypass`).
    pub(crate) async fn fast(
        &self,
        key: &BucketKey,
        consume: &Consume,
        now: i64,
    ) -> Result<Fast, Error> {
        if self.knows_bypass(key)
            && let Some(done) = self.fast_bypassed(key, consume, now).await?
        {
            return Ok(done);
        }
        self.send(key, &update::update(key, consume, now)).await
    }

    /// One fast-path write, conflicts resent up to three times; what its
    /// image says of the owner's cascade, shards and bypass is learnt.
    async fn send(&self, key: &BucketKey, update: &Update) -> Result<Fast, Error> {
        let store = &self.store;
        for attempt in 0..=CONFLICT_WAITS_MS.len() {
            match store.update_or_old(update).await {
                Ok(Updated::Applied(Some(item))) => {
                    let view = BucketView::read(&item);
                    self.learn(key, &view);
                    self.learn_bypass(key, &view);
                    self.rejections
                        .store(&key.entity, &key.resource, key.shard, &view);
                    return Ok(Fast::Admitted(view));
                }
                Ok(Updated::Applied(None)) | Ok(Updated::Refused(None)) => {
                    return Ok(Fast::Missing);
                }
                Ok(Updated::Refused(Some(item))) => {
                    let view = BucketView::read(&item);
                    self.learn(key, &view);
                    self.learn_bypass(key, &view);
                    self.rejections
                        .store(&key.entity, &key.resource, key.shard, &view);
                    return Ok(Fast::Refused(view));
                }
                Err(e) if e.is_conflict() => conflict_wait(attempt).await,
                Err(e) => return Err(Error::store(e)),
            }
        }
        Ok(Fast::Conflict)
    }

    /// The lease entry of a fast-path debit; a bypassed bucket gets its
    /// tokens back at once (only the count stays).
    pub(crate) async fn fast_entry(
        &self,
        key: &BucketKey,
        view: &BucketView,
        consume: &Consume,
        now: i64,
    ) -> Entry {
        let mut entry = entry_from_view(key, view, consume, now);
        if view.counted_only {
            // The bypass shape debited nothing: nothing to give back.
            entry.bypassed = true;
        } else if view.bypassed(now) {
            self.rejections.forget_key(key);
            let refund = negated(&entry.debited);
            if let Err(e) = lease::write_net(&self.store, &entry, &refund, Part::Tokens).await {
                tracing::warn!(bucket = %key.pk(), error = %e, "the refund of a bypassed debit failed");
            }
            for (name, d) in &entry.debited {
                if let Some(l) = entry.limits.get_mut(name) {
                    l.tk = l.tk.saturating_add(*d);
                }
            }
            entry.bypassed = true;
        }
        entry
    }

    /// Takes back an entry's initial debit (its count alone when it was
    /// admitted bypassed: its tokens went back at once); failures are logged.
    pub(crate) async fn refund(&self, entry: &Entry) {
        self.rejections.forget_key(&entry.key);
        let refund = negated(&entry.debited);
        let part = Part::of(entry);
        if let Err(e) = lease::write_net(&self.store, entry, &refund, part).await {
            tracing::warn!(bucket = %entry.key.pk(), error = %e, "a compensating refund failed");
        }
    }

    /// A fast-path write that failed its condition, by what the item shows.
    pub(crate) async fn refused(
        &self,
        key: BucketKey,
        view: BucketView,
        consume: &Consume,
        now: i64,
    ) -> Outcome {
        match update::classify(&view, consume, now) {
            Refusal::Disabled => Err(disabled(&key, "bucket")),
            Refusal::Unsupported(feature) => Err(unsupported(&key, feature)),
            Refusal::Boundary => self.slow(&key, consume, true).await,
            Refusal::WcuShort {
                refilled,
                limits_short,
            } => {
                if limits_short && !update::refill_would_help(&view, consume, now) {
                    return Err(rejection(&key, &view, consume, now));
                }
                if refilled {
                    // The slow path refills the write budget and never spends it.
                    return self.slow(&key, consume, true).await;
                }
                self.double(&key, &view, consume, now).await
            }
            Refusal::Exhausted => self.exhausted(key, view, consume, now).await,
        }
    }
}
