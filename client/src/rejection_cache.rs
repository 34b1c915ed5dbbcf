//! The rejection cache (§7.4 of the protocol): the last image each fast
//! write returned, per (entity, resource, shard), so that a request no
//! cached shard can fit is refused with no request at all. It only ever
//! refuses; an admission always needs a write that landed. Its one error is
//! a bounded under-admission: tokens that came back by a route this process
//! cannot see (another process's refund, an operator raising a limit) are
//! missed for at most the cache's TTL (1 s by default, monotonic).
//!
//! An image is not trusted once it is older than the TTL, past its `vu`
//! (except a trimming `vu = 0`), past its bucket TTL, or stamped disabled
//! (`ResourceDisabled` stays the server's answer); a bypassed bucket is never
//! kept. This process's own writes to a shard (a lease's commit or
//! rollback, a refund, a slow pass) forget it.

use crate::bucket::BucketView;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use zae_table::keys::BucketKey;

/// At most this many shards are remembered; the least recently stored go.
pub const MAX_ENTRIES: usize = 10_000;

/// A shard's place: (entity, resource) and its shard number.
type Key = (String, String, u32);

struct Cached {
    view: BucketView,
    stored_at: Instant,
    /// Its place in the store order (eviction).
    seq: u64,
}

/// Indexed by bucket, so an acquire reads its own shards only.
#[derive(Default)]
struct Inner {
    buckets: HashMap<(String, String), BTreeMap<u32, Cached>>,
    /// Every shard by store order, oldest first.
    order: BTreeMap<u64, Key>,
    next: u64,
}

impl Inner {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn shards(&self, entity: &str, resource: &str) -> impl Iterator<Item = &Cached> {
        self.buckets
            .get(&(entity.to_owned(), resource.to_owned()))
            .into_iter()
            .flat_map(|shards| shards.values())
    }

    fn insert(&mut self, (entity, resource, shard): Key, view: &BucketView) {
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        let cached = Cached {
            view: view.clone(),
            stored_at: Instant::now(),
            seq,
        };
        let bucket = (entity.clone(), resource.clone());
        let shards = self.buckets.entry(bucket).or_default();
        if let Some(old) = shards.insert(shard, cached) {
            self.order.remove(&old.seq);
        }
        self.order.insert(seq, (entity, resource, shard));
        while self.len() > MAX_ENTRIES {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.remove(&oldest);
        }
    }

    fn remove(&mut self, (entity, resource, shard): &Key) {
        let bucket = (entity.clone(), resource.clone());
        let Some(shards) = self.buckets.get_mut(&bucket) else {
            return;
        };
        if let Some(old) = shards.remove(shard) {
            self.order.remove(&old.seq);
        }
        if shards.is_empty() {
            self.buckets.remove(&bucket);
        }
    }
}

/// The images an acquire may be refused on; off when its TTL is zero.
pub struct RejectionCache {
    ttl: Duration,
    inner: Mutex<Inner>,
}

impl RejectionCache {
    pub fn new(ttl: Duration) -> Self {
        RejectionCache {
            ttl,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps the image a fast write returned; a bypassed bucket's balance
    /// says nothing about admission, so its shard is forgotten instead.
    pub fn store(&self, entity: &str, resource: &str, shard: u32, view: &BucketView) {
        if !self.enabled() {
            return;
        }
        let key = (entity.to_owned(), resource.to_owned(), shard);
        if view.bypass_present {
            self.lock().remove(&key);
        } else {
            self.lock().insert(key, view);
        }
    }

    /// Forgets one shard: tokens came back (or may have) by this process.
    pub fn forget(&self, entity: &str, resource: &str, shard: u32) {
        if self.enabled() {
            self.lock()
                .remove(&(entity.to_owned(), resource.to_owned(), shard));
        }
    }

    pub fn forget_key(&self, key: &BucketKey) {
        self.forget(&key.entity, &key.resource, key.shard);
    }

    /// Forgets everything: an operator's change may have moved any limit.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.buckets.clear();
        inner.order.clear();
    }

    /// The trusted images of one bucket's shards, at `now` (epoch ms).
    pub fn views(&self, entity: &str, resource: &str, now: i64) -> BTreeMap<u32, BucketView> {
        if !self.enabled() {
            return BTreeMap::new();
        }
        let inner = self.lock();
        let Some(shards) = inner.buckets.get(&(entity.to_owned(), resource.to_owned())) else {
            return BTreeMap::new();
        };
        shards
            .iter()
            .filter(|(_, c)| self.trusted(c, now) && !c.view.disabled)
            .map(|(shard, c)| (*shard, c.view.clone()))
            .collect()
    }

    /// Any cached shard of the bucket, of any age, stamped disabled.
    pub fn known_disabled(&self, entity: &str, resource: &str) -> bool {
        self.lock()
            .shards(entity, resource)
            .any(|c| c.view.disabled)
    }

    /// The parent a trusted cached shard of the bucket cascades to; none
    /// for a bucket known disabled (its answer is the server's).
    pub fn parent_of(&self, entity: &str, resource: &str, now: i64) -> Option<String> {
        if !self.enabled() || self.known_disabled(entity, resource) {
            return None;
        }
        self.lock()
            .shards(entity, resource)
            .filter(|c| self.trusted(c, now))
            .find_map(|c| c.view.parent_id.clone().filter(|_| c.view.cascade))
    }

    /// Inside the TTL, before its `vu` (a trimming `vu = 0` aside) and
    /// before its bucket TTL.
    fn trusted(&self, cached: &Cached, now: i64) -> bool {
        let view = &cached.view;
        let fresh = cached.stored_at.elapsed() < self.ttl;
        let vu_passed = view.vu.is_some_and(|vu| vu <= now && !vu_only_trims(view));
        let ttl_passed = view.ttl.is_some_and(|t| t <= now.div_euclid(1000));
        fresh && !vu_passed && !ttl_passed
    }
}

/// `vu = 0` on an item with no schedule, quota or window only trims a
/// balance to its ceiling: what cannot fit before that pass cannot after.
fn vu_only_trims(view: &BucketView) -> bool {
    view.vu == Some(0) && view.unsupported.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Feature;

    const NOW: i64 = 1_796_186_400_000;

    fn cache() -> RejectionCache {
        RejectionCache::new(Duration::from_secs(1))
    }

    fn trusted_after(view: BucketView) -> bool {
        let cache = cache();
        cache.store("u1", "gpt", 0, &view);
        !cache.views("u1", "gpt", NOW).is_empty()
    }

    #[test]
    fn an_image_past_its_vu_or_its_ttl_or_stamped_disabled_is_not_trusted() {
        assert!(trusted_after(BucketView::default()));
        let past_vu = BucketView {
            vu: Some(NOW),
            ..BucketView::default()
        };
        assert!(!trusted_after(past_vu));
        let ahead_vu = BucketView {
            vu: Some(NOW + 1),
            ..BucketView::default()
        };
        assert!(trusted_after(ahead_vu));
        let trimming = BucketView {
            vu: Some(0),
            ..BucketView::default()
        };
        assert!(trusted_after(trimming), "vu = 0 on a plain item only trims");
        let scheduled_zero = BucketView {
            vu: Some(0),
            unsupported: Some(Feature::Schedule),
            ..BucketView::default()
        };
        assert!(!trusted_after(scheduled_zero));
        let expired = BucketView {
            ttl: Some(NOW / 1000),
            ..BucketView::default()
        };
        assert!(!trusted_after(expired));
        let disabled = BucketView {
            disabled: true,
            ..BucketView::default()
        };
        assert!(!trusted_after(disabled));
    }

    #[test]
    fn a_bypassed_image_is_never_kept_and_forgets_the_shard() {
        let cache = cache();
        cache.store("u1", "gpt", 0, &BucketView::default());
        let stamped = BucketView {
            bypass: Some(NOW - 1),
            bypass_present: true,
            ..BucketView::default()
        };
        cache.store("u1", "gpt", 0, &stamped);
        assert!(cache.views("u1", "gpt", NOW).is_empty());
    }

    #[test]
    fn at_most_ten_thousand_shards_are_kept_the_oldest_going_first() {
        let cache = cache();
        for i in 0..=MAX_ENTRIES {
            cache.store(&format!("e{i}"), "gpt", 0, &BucketView::default());
        }
        assert_eq!(cache.lock().len(), MAX_ENTRIES);
        assert!(cache.views("e0", "gpt", NOW).is_empty(), "the oldest went");
        assert_eq!(cache.views("e1", "gpt", NOW).len(), 1);
        cache.forget("e1", "gpt", 0);
        assert!(cache.views("e1", "gpt", NOW).is_empty());
        cache.clear();
        assert!(cache.lock().buckets.is_empty() && cache.lock().len() == 0);
    }

    #[test]
    fn an_off_cache_keeps_nothing() {
        let cache = RejectionCache::new(Duration::ZERO);
        cache.store("u1", "gpt", 0, &BucketView::default());
        assert_eq!(cache.lock().len(), 0);
    }
}
