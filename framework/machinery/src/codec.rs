//! Typed objects to and from their JSON (with `apiVersion` and `kind`), and the conversions
//! of a served version to and from its storage version: what the registry stores and
//! admission shows plugins and webhooks.

use std::cell::RefCell;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::runtime::{Resource, ResourceInfo};

pub mod unknown;

/// The most a thread keeps of the buffer [`to_json_vec`] encodes into.
const SCRATCH_KEPT: usize = 1 << 20;

thread_local! {
    /// What [`to_json_vec`] encodes into on this thread, reused.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `value` as JSON, in a vector exactly its size: what `serde_json::to_vec` gives, with one
/// allocation. `to_vec` grows its vector while it writes (from 128 bytes, doubling), so an
/// object of a few hundred bytes cost an allocation and three reallocations, and on a busy
/// server each of those waits for the allocator's lock (book: Benchmarks, the stored JSON
/// written at its size). Here the JSON is written into a buffer the thread keeps (up to
/// 1 MiB of it between calls) and copied out once. JSON larger than that (a table of many
/// objects) is not copied: the buffer itself is handed out, shrunk to its size in place.
pub fn to_json_vec<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    to_json_vec_with(|buffer| serde_json::to_writer(buffer, value)).map(|(encoded, ())| encoded)
}

/// What `write` writes, in a vector exactly its size, written as [`to_json_vec`] writes: into
/// the thread's buffer, copied out once. With what `write` returned besides (where in the
/// JSON something is, found while writing it).
pub fn to_json_vec_with<R>(
    write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<R>,
) -> serde_json::Result<(Vec<u8>, R)> {
    SCRATCH.with(|scratch| {
        // Called again from inside a `Serialize` impl: that call gets a vector of its own.
        let Ok(mut buffer) = scratch.try_borrow_mut() else {
            let mut own = Vec::new();
            return write(&mut own).map(|found| (own, found));
        };
        buffer.clear();
        let encoded = write(&mut buffer).map(|found| {
            let encoded = if buffer.len() > SCRATCH_KEPT {
                let mut encoded = std::mem::take(&mut *buffer);
                encoded.shrink_to_fit();
                encoded
            } else {
                buffer.to_vec()
            };
            (encoded, found)
        });
        if buffer.capacity() > SCRATCH_KEPT {
            *buffer = Vec::new();
        }
        encoded
    })
}

/// `T` back to JSON, with `apiVersion` and `kind`.
pub fn encode_typed<T: Resource>(typed: &T) -> Result<Value> {
    let mut value = serde_json::to_value(typed).map_err(Error::internal)?;
    set_type_meta(&T::INFO, &mut value);
    Ok(value)
}

/// An object as `T`. `apiVersion` and `kind` are not fields of `T`: taken out first, so a
/// type that denies unknown fields decodes too.
pub fn from_object<T: Resource>(mut object: Value) -> serde_json::Result<T> {
    if let Some(map) = object.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
    }
    serde_json::from_value(object)
}

/// Sets `apiVersion` and `kind`.
pub fn set_type_meta(info: &ResourceInfo, object: &mut Value) {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), serde_json::json!(info.api_version()));
        map.insert("kind".into(), serde_json::json!(info.kind));
    }
}

/// The conversions of one served version to and from its storage version, as JSON: what
/// admission webhooks need to see an object in the version their rules matched (kube's
/// `ObjectConvertor`). Pure conversions: no defaulting, no strategy.
pub trait VersionConvertor: Send + Sync {
    /// A stored object as this version, with its `apiVersion` and `kind`.
    fn to_served(&self, stored: &Value) -> Result<Value>;
    /// An object of this version as the storage version, with its `apiVersion` and `kind`.
    fn to_storage(&self, served: &Value) -> Result<Value>;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn to_json_vec_is_to_vec_in_a_vector_of_its_size() {
        let small = json!({"metadata": {"name": "a\"b", "labels": {"x": "é\n"}}, "n": [1, 2.5]});
        let large = json!({"data": "x".repeat(2 * SCRATCH_KEPT)});
        // Small after large: the large one was handed out, not kept, and what it held does
        // not leak into the next.
        for value in [&small, &large, &small] {
            let encoded = to_json_vec(value).unwrap();
            assert_eq!(encoded, serde_json::to_vec(value).unwrap());
            assert_eq!(encoded.capacity(), encoded.len());
        }
        SCRATCH.with(|scratch| assert!(scratch.borrow().capacity() <= SCRATCH_KEPT));
    }
}
