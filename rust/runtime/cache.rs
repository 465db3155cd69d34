//! A small LRU of byte buffers bounded by total size (for dictionary pages).
//! Dictionary pages are few (one per column chunk), so an O(n) eviction scan over a
//! HashMap is simpler than a linked list and costs nothing measurable.

use std::collections::HashMap;

use bytes::Bytes;

/// (index uid, file id, byte offset, length)
pub type CacheKey = (u64, u32, u64, u32);

pub struct ByteLru {
    capacity: usize,
    used: usize,
    tick: u64,
    map: HashMap<CacheKey, (Bytes, u64)>,
    pub hits: u64,
    pub misses: u64,
}

impl ByteLru {
    pub fn new(capacity: usize) -> Self {
        ByteLru { capacity, used: 0, tick: 0, map: HashMap::new(), hits: 0, misses: 0 }
    }

    pub fn get(&mut self, key: &CacheKey) -> Option<Bytes> {
        self.tick += 1;
        let tick = self.tick;
        match self.map.get_mut(key) {
            Some(entry) => {
                entry.1 = tick;
                self.hits += 1;
                Some(entry.0.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Whether `key` is cached (without counting a hit or a miss).
    pub fn contains(&self, key: &CacheKey) -> bool {
        self.map.contains_key(key)
    }

    pub fn insert(&mut self, key: CacheKey, value: Bytes) {
        if value.len() > self.capacity {
            return;
        }
        self.tick += 1;
        if let Some((old, _)) = self.map.insert(key, (value.clone(), self.tick)) {
            self.used -= old.len();
        }
        self.used += value.len();
        while self.used > self.capacity {
            let Some((&victim, _)) = self.map.iter().min_by_key(|(_, (_, t))| *t) else { break };
            if let Some((b, _)) = self.map.remove(&victim) {
                self.used -= b.len();
            }
        }
    }

    pub fn used(&self) -> usize {
        self.used
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_within_capacity() {
        let mut c = ByteLru::new(10);
        c.insert((0, 0, 0, 4), Bytes::from_static(b"aaaa"));
        c.insert((0, 0, 4, 4), Bytes::from_static(b"bbbb"));
        assert!(c.get(&(0, 0, 0, 4)).is_some()); // a is now more recent than b
        c.insert((0, 0, 8, 4), Bytes::from_static(b"cccc"));
        assert!(c.get(&(0, 0, 4, 4)).is_none());
        assert!(c.get(&(0, 0, 0, 4)).is_some());
        assert!(c.used() <= 10);
    }

    #[test]
    fn oversized_values_are_not_cached() {
        let mut c = ByteLru::new(3);
        c.insert((0, 0, 0, 4), Bytes::from_static(b"aaaa"));
        assert!(c.is_empty());
    }
}
