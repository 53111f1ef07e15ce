//! The writes of a store on their way to its watch cache. The cache encodes every object it
//! receives as clients receive it: the stored JSON with its `resourceVersion` spliced in,
//! which takes a scan of the JSON. A write of this store found the place while it wrote the
//! bytes ([`StoredJson`]); it leaves them here under their key before it stores them, and the
//! cache takes them when the bytes it received for the key are these bytes. Anything else
//! (another writer's bytes, a version converted, a write whose event never came) is
//! scanned as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::codec::StoredJson;
use crate::storage::KeyValue;

/// Writes held for the cache, by key. Its size stays small: a write's entry goes when the
/// cache receives its event, or when the write fails; the entries whose event never comes
/// (the cache listed the store again instead) are dropped when too many are held.
#[derive(Default)]
pub(crate) struct Handoff(Mutex<HashMap<String, Arc<StoredJson>>>);

/// The most entries held: past it they are all dropped (they only save scans).
const MAX_HELD: usize = 4096;

impl Handoff {
    /// Leaves `stored`, about to be written at `key`, for the cache.
    pub(crate) fn offer(&self, key: &str, stored: &Arc<StoredJson>) {
        let Ok(mut held) = self.0.lock() else {
            return;
        };
        if held.len() >= MAX_HELD {
            held.clear();
        }
        held.insert(key.to_owned(), stored.clone());
    }

    /// Takes back what [`offer`](Self::offer) left, when the write failed (no event brings
    /// its bytes), unless the cache or another write took its place.
    pub(crate) fn withdraw(&self, key: &str, stored: &Arc<StoredJson>) {
        let Ok(mut held) = self.0.lock() else {
            return;
        };
        if held.get(key).is_some_and(|h| Arc::ptr_eq(h, stored)) {
            held.remove(key);
        }
    }

    /// What a write left at `kv`'s key, when its bytes are `kv`'s. The entry goes either way:
    /// the cache has received the key's newest bytes.
    pub(crate) fn take(&self, kv: &KeyValue) -> Option<Arc<StoredJson>> {
        let taken = self.0.lock().ok()?.remove(&kv.key)?;
        (taken.bytes == kv.value).then_some(taken)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::registry::store::codec::encode_answerable;

    fn written(name: &str) -> Arc<StoredJson> {
        Arc::new(encode_answerable(&json!({"metadata": {"name": name}})).unwrap())
    }

    fn event(key: &str, value: Bytes) -> KeyValue {
        KeyValue {
            key: key.into(),
            value,
            create_revision: 1,
            mod_revision: 7,
        }
    }

    /// The cache gets a write's places only for the bytes that write stored, once.
    #[test]
    fn the_cache_takes_a_write_only_for_its_own_bytes() {
        let handoff = Handoff::default();
        let (a, b) = (written("a"), written("b"));
        handoff.offer("/k/a", &a);
        // Other bytes at the key (another writer's): not these places, and the entry goes.
        assert!(handoff.take(&event("/k/a", b.bytes.clone())).is_none());
        assert!(handoff.take(&event("/k/a", a.bytes.clone())).is_none());
        handoff.offer("/k/a", &a);
        // The same bytes, copied (as etcd's watch brings them): taken once.
        let copied = Bytes::from(a.bytes.to_vec());
        assert!(Arc::ptr_eq(
            &handoff.take(&event("/k/a", copied.clone())).unwrap(),
            &a
        ));
        assert!(handoff.take(&event("/k/a", copied)).is_none());
    }

    /// A failed write takes back its own entry, not one another write left since.
    #[test]
    fn a_failed_write_withdraws_only_its_own() {
        let handoff = Handoff::default();
        let (a, b) = (written("a"), written("b"));
        handoff.offer("/k/x", &a);
        handoff.offer("/k/x", &b);
        handoff.withdraw("/k/x", &a);
        assert!(handoff.take(&event("/k/x", b.bytes.clone())).is_some());
        handoff.offer("/k/x", &a);
        handoff.withdraw("/k/x", &a);
        assert!(handoff.take(&event("/k/x", a.bytes.clone())).is_none());
    }

    /// Entries whose events never come are dropped when too many are held.
    #[test]
    fn what_is_held_stays_bounded() {
        let handoff = Handoff::default();
        let a = written("a");
        for i in 0..MAX_HELD + 10 {
            handoff.offer(&format!("/k/{i}"), &a);
        }
        assert!(handoff.0.lock().unwrap().len() <= MAX_HELD);
    }
}
