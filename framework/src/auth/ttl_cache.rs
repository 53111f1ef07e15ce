//! A small cache whose entries expire, for the answers of TokenReview and
//! SubjectAccessReview (`k8s.io/apiserver`'s token cache and the webhook authorizer's LRU with
//! TTLs). Keys are SHA-256 digests, so neither tokens nor review bodies are kept in clear.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Bound on entries; past it expired entries are dropped, and if that is not enough, all
/// (a miss only costs one more review call).
const MAX_ENTRIES: usize = 8192;

/// A digest-keyed cache of values that expire.
pub struct TtlCache<V> {
    entries: Mutex<HashMap<[u8; 32], (V, Instant)>>,
}

impl<V> Default for TtlCache<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<V> std::fmt::Debug for TtlCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlCache").finish_non_exhaustive()
    }
}

impl<V: Clone> TtlCache<V> {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The digest of length-prefixed `parts` (so `["ab", "c"]` and `["a", "bc"]` differ).
    pub fn key<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        hasher.finalize().into()
    }

    /// The value under `key` unless it expired.
    pub fn get(&self, key: &[u8; 32]) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(v, _)| v.clone())
    }

    /// Stores `value` for `ttl`; a zero TTL stores nothing.
    pub fn insert(&self, key: [u8; 32], value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, until)| *until > now);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + ttl));
    }

    /// How many entries are stored (expired ones included).
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_for_a_ttl_and_never_for_zero() {
        let cache = TtlCache::new();
        let a = TtlCache::<u8>::key([b"ab".as_slice(), b"c"]);
        let b = TtlCache::<u8>::key([b"a".as_slice(), b"bc"]);
        assert_ne!(a, b);
        cache.insert(a, 1u8, Duration::from_secs(60));
        cache.insert(b, 2u8, Duration::ZERO);
        assert_eq!(cache.get(&a), Some(1));
        assert_eq!(cache.get(&b), None);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn bounded() {
        let cache = TtlCache::new();
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            cache.insert(
                TtlCache::<u64>::key([i.to_be_bytes().as_slice()]),
                i,
                Duration::from_secs(60),
            );
        }
        assert!(cache.len() <= MAX_ENTRIES);
    }
}
