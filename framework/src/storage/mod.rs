//! Storage: keys, bytes, revisions and watches. Nothing here knows HTTP or API semantics.

pub mod backend;

pub use backend::{
    Backend, Event, EventStream, EventType, KeyValue, ListRequest, ListResult, Revision,
    StorageError,
};
