//! The generic `Store<T>` on a `MemoryBackend`, verb by verb, against kube-apiserver's
//! semantics (`registry/generic/registry/store.go`, `storage/etcd3/store.go`,
//! `storage/cacher`). `store_semantics_cached.rs` runs the same cases with the watch cache.

/// Whether the store under test has a watch cache.
const WATCH_CACHE: bool = false;

include!("store_semantics/cases.rs");
