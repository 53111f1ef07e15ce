//! The cases of `store_semantics.rs` with the watch cache in front of the backend: every
//! verb must behave the same whether reads and watches come from memory or from storage.

/// Whether the store under test has a watch cache.
const WATCH_CACHE: bool = true;

include!("store_semantics/cases.rs");
