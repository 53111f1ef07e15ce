//! A backend that records how long each request to the backend under it takes, as
//! kube-apiserver's `etcd_request_duration_seconds` (by operation and the group-resource the
//! key belongs to), whichever backend that is, and traces each in a `storage` span.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use tracing::Instrument;

use super::backend::{
    Backend, EventStream, KeyValue, ListRequest, ListResult, ProgressStream, Revision, StorageError,
};
use crate::metrics::{global, write_group_resource_of_key};

/// `inner`, timed.
pub struct Instrumented {
    inner: Arc<dyn Backend>,
    /// The key prefix (`/registry`), to tell the group-resource of a key.
    prefix: String,
}

impl Instrumented {
    /// `inner` with its requests timed; keys are under `prefix`.
    pub fn wrap(inner: Arc<dyn Backend>, prefix: &str) -> Arc<dyn Backend> {
        Arc::new(Self {
            inner,
            prefix: prefix.to_string(),
        })
    }

    fn observe(&self, operation: &str, key: &str, started: Instant) {
        thread_local! {
            /// The group-resource label of the request being observed: one buffer per
            /// thread, not a string per request.
            static TYPE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        let elapsed = started.elapsed().as_secs_f64();
        TYPE.with_borrow_mut(|type_| {
            type_.clear();
            write_group_resource_of_key(&self.prefix, key, type_);
            global()
                .storage_duration
                .with_label_values(&[operation, type_.as_str()])
                .observe(elapsed);
        });
    }
}

#[async_trait]
impl Backend for Instrumented {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        let started = Instant::now();
        let result = self
            .inner
            .get(key)
            .instrument(crate::spans::child_span!("storage", operation = "get", key))
            .await;
        self.observe("get", key, started);
        result
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        let started = Instant::now();
        let result = self
            .inner
            .list(request)
            .instrument(
                crate::spans::child_span!("storage", operation = "list", prefix = %request.prefix),
            )
            .await;
        self.observe("list", &request.prefix, started);
        result
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        let started = Instant::now();
        let result = self
            .inner
            .create(key, value)
            .instrument(crate::spans::child_span!(
                "storage",
                operation = "create",
                key
            ))
            .await;
        self.observe("create", key, started);
        result
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        let started = Instant::now();
        let result = self
            .inner
            .update(key, value, expected)
            .instrument(crate::spans::child_span!(
                "storage",
                operation = "update",
                key
            ))
            .await;
        self.observe("update", key, started);
        result
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        let started = Instant::now();
        let result = self
            .inner
            .delete(key, expected)
            .instrument(crate::spans::child_span!(
                "storage",
                operation = "delete",
                key
            ))
            .await;
        self.observe("delete", key, started);
        result
    }

    async fn watch(&self, prefix: &str, after: Revision) -> Result<EventStream, StorageError> {
        self.inner.watch(prefix, after).await
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        self.inner.watch_with_progress(prefix, after).await
    }

    async fn request_progress(&self) {
        self.inner.request_progress().await
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        let started = Instant::now();
        let result = self.inner.current_revision().await;
        self.observe("getRevision", "", started);
        result
    }

    fn local_revision(&self) -> Option<Revision> {
        self.inner.local_revision()
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        let started = Instant::now();
        let result = self.inner.compact(revision).await;
        self.observe("compact", "", started);
        result
    }

    async fn ready(&self) -> Result<(), StorageError> {
        self.inner.ready().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    #[tokio::test]
    async fn requests_are_timed_by_operation_and_resource() {
        let backend = Instrumented::wrap(Arc::new(MemoryBackend::new()), "/timed");
        let key = "/timed/g.example.com/things/ns/a";
        backend
            .create(key, Bytes::from_static(b"{}"))
            .await
            .unwrap();
        backend.get(key).await.unwrap();
        let count = |op: &str| {
            global()
                .storage_duration
                .with_label_values(&[op, "things.g.example.com"])
                .get_sample_count()
        };
        assert_eq!((count("create"), count("get")), (1, 1));
    }
}
