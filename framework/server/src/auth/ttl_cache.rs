//! A small cache whose entries expire, for the answers of TokenReview and
//! SubjectAccessReview (`k8s.io/apiserver`'s token cache and the webhook authorizer's LRU with
//! TTLs), and [`Flights`], which shares one review among concurrent askers. Keys are SHA-256 digests, so neither tokens nor review bodies are kept in clear.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt as _, Shared};
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
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Shares one call among concurrent askers of the same key (Go's `singleflight`, which the
/// token cache uses): a burst of requests with one new token makes one review, not one each.
pub struct Flights<V> {
    inflight: Mutex<HashMap<[u8; 32], Shared<BoxFuture<'static, V>>>>,
}

impl<V> Default for Flights<V> {
    fn default() -> Self {
        Self {
            inflight: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: Clone + Send + Sync + 'static> Flights<V> {
    /// Awaits the call in flight under `key`, or starts `call` and awaits that; then
    /// `remember`s the value (fills the cache) before the flight is forgotten, so that an
    /// asker arriving in between finds one or the other, never neither (Go's cached token
    /// authenticator sets its cache inside the singleflight for the same reason).
    pub async fn run<F>(
        &self,
        key: [u8; 32],
        call: impl FnOnce() -> F,
        remember: impl FnOnce(&V),
    ) -> V
    where
        F: Future<Output = V> + Send + 'static,
    {
        let flight = {
            let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
            inflight
                .entry(key)
                .or_insert_with(|| call().boxed().shared())
                .clone()
        };
        let value = flight.clone().await;
        remember(&value);
        let mut inflight = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if inflight.get(&key).is_some_and(|f| f.ptr_eq(&flight)) {
            inflight.remove(&key);
        }
        value
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

    /// The value is remembered while the flight is still there to join: an asker that missed
    /// the cache just before can never also miss the flight and start a second call.
    #[test]
    fn the_value_is_remembered_before_the_flight_is_forgotten() {
        let flights = Flights::<u32>::default();
        let mut in_flight_while_remembering = None;
        let value = futures::executor::block_on(flights.run(
            [1; 32],
            || async { 5 },
            |v| {
                let inflight = flights.inflight.lock().unwrap();
                in_flight_while_remembering = Some((*v, inflight.contains_key(&[1; 32])));
            },
        ));
        assert_eq!(value, 5);
        assert_eq!(in_flight_while_remembering, Some((5, true)));
        assert!(flights.inflight.lock().unwrap().is_empty());
    }

    #[test]
    fn concurrent_askers_share_one_call() {
        let flights = std::sync::Arc::new(Flights::<u32>::default());
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let (release, released) = futures::channel::oneshot::channel::<()>();
        let released = released.shared();
        let ask = |flights: std::sync::Arc<Flights<u32>>| {
            let calls = calls.clone();
            let released = released.clone();
            async move {
                flights
                    .run(
                        [7; 32],
                        move || async move {
                            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let _ = released.await;
                            42
                        },
                        |_| {},
                    )
                    .await
            }
        };
        let first = ask(flights.clone()).boxed();
        let second = ask(flights.clone()).boxed();
        let both = futures::future::join(first, second);
        let answers = futures::executor::block_on(async move {
            let release = async move {
                let _ = release.send(());
            };
            futures::future::join(both, release).await.0
        });
        assert_eq!(answers, (42, 42));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(flights.inflight.lock().unwrap().is_empty());
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
