//! What every acquire and lease of one limiter shares: the store, the
//! namespace, the settings the paths read, and what the process has
//! learnt of each entity's cascade and shards. The lease needs only this
//! part of the limiter (the store and the clock), so it depends on it and
//! not on `limiter`.

use crate::bucket::BucketView;
use crate::clock::Clock;
use crate::config::{OnUnavailable, SystemCache};
use crate::rejection_cache::RejectionCache;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zae_table::bucket::shard::MAX_SHARD_COUNT;
use zae_table::keys::BucketKey;

/// `Options::shard_draw`: the number of candidates in, an index out.
pub type ShardDraw = Arc<dyn Fn(usize) -> usize + Send + Sync>;

/// The limiter's state behind its `Arc`: `Options` taken apart, so this
/// module needs nothing of `limiter`.
pub(crate) struct Shared<S> {
    pub(crate) store: S,
    pub(crate) namespace: String,
    pub(crate) system: SystemCache,
    pub(crate) clock: Arc<dyn Clock>,
    /// `Options::on_unavailable`.
    pub(crate) on_unavailable: Option<OnUnavailable>,
    /// `Options::speculative_writes`.
    pub(crate) speculative_writes: bool,
    /// `Options::stamp_ttl`.
    pub(crate) stamp_ttl: Duration,
    /// `Options::stamp_draw`.
    pub(crate) stamp_draw: Option<f64>,
    /// `Options::shard_draw`.
    pub(crate) shard_draw: Option<ShardDraw>,
    /// `Options::ttl_multiplier`.
    pub(crate) ttl_multiplier: i64,
    /// The largest shard count seen per (entity, resource).
    pub(crate) shards: Mutex<HashMap<(String, String), i64>>,
    /// The parent an entity's bucket cascades to, as its images said.
    pub(crate) parents: Mutex<HashMap<(String, String), Option<String>>>,
    /// The (entity, resource) pairs whose last image carried a `bypass`
    /// stamp: their fast writes take the bypass shape (`fast::bypass`).
    pub(crate) bypassed: Mutex<HashSet<(String, String)>>,
    /// The last image of each shard, to refuse a repeat with no request.
    pub(crate) rejections: RejectionCache,
}

impl<S> Shared<S> {
    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub(crate) fn deadline(&self, now: i64) -> i64 {
        let draw = self
            .stamp_draw
            .unwrap_or_else(|| 0.8 + 0.2 * fastrand::f64());
        let ttl_ms = self.stamp_ttl.as_millis() as f64;
        now + (ttl_ms * draw) as i64
    }

    pub(crate) fn known_shards(&self, entity: &str, resource: &str) -> i64 {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards
            .get(&(entity.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(1)
    }

    pub(crate) fn known_parent(&self, entity: &str, resource: &str) -> Option<String> {
        let parents = self.parents.lock().unwrap_or_else(|p| p.into_inner());
        parents
            .get(&(entity.to_owned(), resource.to_owned()))
            .cloned()
            .flatten()
    }

    /// What a bucket image says of its owner's cascade.
    pub(crate) fn learn(&self, key: &BucketKey, view: &BucketView) {
        self.learn_shards(key, view.shard_count);
        self.remember_parent(key, view.parent_id.clone().filter(|_| view.cascade));
    }

    pub(crate) fn remember_parent(&self, key: &BucketKey, parent: Option<String>) {
        let mut parents = self.parents.lock().unwrap_or_else(|p| p.into_inner());
        parents.insert((key.entity.clone(), key.resource.clone()), parent);
    }

    pub(crate) fn learn_shards(&self, key: &BucketKey, count: i64) {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let known = shards
            .entry((key.entity.clone(), key.resource.clone()))
            .or_insert(1);
        *known = (*known).max(count.min(MAX_SHARD_COUNT));
    }

    /// The parent's bucket, on a shard drawn from its known count.
    pub(crate) fn parent_key(&self, key: &BucketKey, parent: String) -> BucketKey {
        let count = self.known_shards(&parent, &key.resource);
        BucketKey {
            entity: parent,
            shard: self.draw(count, &[]),
            ..key.clone()
        }
    }

    /// A shard of `count`, avoiding `tried` while any is left: one of the
    /// candidates in ascending order, picked at random or by
    /// `Options::shard_draw` (the 0.17.0 client draws from the same lists).
    pub(crate) fn draw(&self, count: i64, tried: &[u32]) -> u32 {
        let count = u32::try_from(count.clamp(1, 32)).unwrap_or(1);
        let mut left: Vec<u32> = (0..count).filter(|s| !tried.contains(s)).collect();
        if left.is_empty() {
            left = (0..count).collect();
        }
        let pick = match &self.shard_draw {
            Some(pin) => pin(left.len()) % left.len(),
            None => fastrand::usize(0..left.len()),
        };
        left[pick]
    }
}

/// Full-jitter waits before each resend of a conflicting write (both paths).
pub(crate) const CONFLICT_WAITS_MS: [u64; 3] = [25, 50, 100];

pub(crate) async fn conflict_wait(attempt: usize) {
    if let Some(cap) = CONFLICT_WAITS_MS.get(attempt) {
        let wait = Duration::from_millis(fastrand::u64(0..=*cap));
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::time::sleep(wait).await;
        } else {
            off_runtime_sleep(wait).await;
        }
    }
}

/// A wait for a custom `Store` driven outside Tokio, whose timer panics
/// there: a thread sleeps and wakes the task, which never blocks its
/// executor. A thread per wait is dear, but waits are rare (a conflict).
async fn off_runtime_sleep(wait: Duration) {
    let (sender, receiver) = futures::channel::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("zae-conflict-wait".into())
        .spawn(move || {
            std::thread::sleep(wait);
            let _ = sender.send(());
        });
    match spawned {
        // Sent or dropped, the wait is over either way.
        Ok(_) => {
            let _ = receiver.await;
        }
        Err(e) => tracing::warn!(error = %e, "no thread for a conflict's wait; resent at once"),
    }
}
