//! A backend that refuses values over a size, as etcd refuses requests over its
//! `--max-request-bytes` (1.5 MiB by default): so an object too large for etcd is too large
//! on every backend, and the watch cache, which keeps recent states of each object, holds no
//! object larger.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::backend::{
    Backend, EventStream, KeyValue, ListRequest, ListResult, ProgressStream, Revision, StorageError,
};

/// etcd's default `--max-request-bytes`: the default limit of a stored object.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 3 * 512 * 1024;

/// `inner`, whose creates and updates of a value over `limit` bytes fail with
/// [`StorageError::TooLarge`], writing nothing.
pub struct SizeLimited {
    inner: Arc<dyn Backend>,
    limit: usize,
}

impl SizeLimited {
    /// `inner` refusing values over `limit` bytes; `inner` itself when `limit` is 0.
    pub fn wrap(inner: Arc<dyn Backend>, limit: usize) -> Arc<dyn Backend> {
        if limit == 0 {
            return inner;
        }
        Arc::new(Self { inner, limit })
    }

    fn check(&self, key: &str, value: &Bytes) -> Result<(), StorageError> {
        if value.len() <= self.limit {
            return Ok(());
        }
        tracing::info!(
            key,
            size = value.len(),
            limit = self.limit,
            "refused a stored object over --max-object-size-bytes"
        );
        Err(StorageError::TooLarge {
            key: key.to_string(),
            size: value.len(),
            limit: self.limit,
        })
    }
}

#[async_trait]
impl Backend for SizeLimited {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.inner.get(key).await
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        self.inner.list(request).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        self.check(key, &value)?;
        self.inner.create(key, value).await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        self.check(key, &value)?;
        self.inner.update(key, value, expected).await
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        self.inner.delete(key, expected).await
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
        self.inner.current_revision().await
    }

    fn local_revision(&self) -> Option<Revision> {
        self.inner.local_revision()
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.inner.compact(revision).await
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
    async fn values_over_the_limit_are_refused_and_nothing_changes() {
        let backend = SizeLimited::wrap(Arc::new(MemoryBackend::new()), 8);
        let key = "/r/g/things/ns/a";
        let big = Bytes::from_static(b"123456789");
        let refused = backend.create(key, big.clone()).await.unwrap_err();
        assert!(
            matches!(
                refused,
                StorageError::TooLarge {
                    size: 9,
                    limit: 8,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(backend.get(key).await.unwrap(), None);
        assert_eq!(backend.current_revision().await.unwrap(), 0);

        let kv = backend
            .create(key, Bytes::from_static(b"12345678"))
            .await
            .unwrap();
        let refused = backend.update(key, big, kv.mod_revision).await;
        assert!(matches!(refused, Err(StorageError::TooLarge { .. })));
        assert_eq!(backend.get(key).await.unwrap(), Some(kv.clone()));
        assert_eq!(backend.current_revision().await.unwrap(), kv.mod_revision);
    }

    #[tokio::test]
    async fn zero_is_no_limit() {
        let backend = SizeLimited::wrap(Arc::new(MemoryBackend::new()), 0);
        let big = Bytes::from(vec![b'x'; 4 * DEFAULT_MAX_OBJECT_BYTES]);
        backend.create("/r/big", big).await.unwrap();
    }
}
