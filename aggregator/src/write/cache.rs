//! A cache bounded by us, not by what clients create: the acquire policy
//! lets a client write buckets under any namespace prefix and resource, so
//! a map keyed by either must not grow with them. It keeps at least the
//! latest `N / 2` entries: when the fresh half is full it becomes the old
//! half, and the old one is dropped whole (counted and logged).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

pub struct Bounded<K, V, const N: usize> {
    fresh: HashMap<K, V>,
    old: HashMap<K, V>,
    /// Entries dropped so far.
    evicted: u64,
}

impl<K, V, const N: usize> Default for Bounded<K, V, N> {
    fn default() -> Self {
        Bounded {
            fresh: HashMap::new(),
            old: HashMap::new(),
            evicted: 0,
        }
    }
}

impl<K: Hash + Eq, V: Clone, const N: usize> Bounded<K, V, N> {
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.fresh.get(key).or_else(|| self.old.get(key)).cloned()
    }

    pub fn insert(&mut self, key: K, value: V) {
        if self.fresh.len() >= N / 2 && !self.fresh.contains_key(&key) {
            let dropped = self.old.len() as u64;
            self.old = std::mem::take(&mut self.fresh);
            self.evicted = self.evicted.saturating_add(dropped);
            tracing::warn!(
                kept = N / 2,
                evicted_total = self.evicted,
                "a cache's older half was dropped: more keys than it holds"
            );
        }
        self.fresh.insert(key, value);
    }

    pub fn remove<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.fresh.remove(key);
        self.old.remove(key);
    }

    /// Entries dropped so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    pub fn len(&self) -> usize {
        self.fresh.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_n_entries_keeps_the_latest_half_and_counts_what_it_drops() {
        let mut map: Bounded<String, usize, 8> = Bounded::default();
        for i in 0..1_000 {
            map.insert(format!("ns-{i}"), i);
            assert!(map.len() <= 8, "{}", map.len());
        }
        for i in 996..1_000 {
            assert_eq!(map.get(format!("ns-{i}").as_str()), Some(i));
        }
        assert_eq!(map.evicted() + map.len() as u64, 1_000);
        // Updating a key it holds never drops anything.
        let before = map.evicted();
        map.insert("ns-999".into(), 0);
        assert_eq!(map.evicted(), before);
    }
}
