//! Runs the storage conformance suite on every embedded backend.

mod memory {
    use extension_apiserver_storage::MemoryBackend;

    extension_apiserver_storage::backend_conformance_tests!(|| async { MemoryBackend::new() });
}

mod sqlite {
    use extension_apiserver_storage::SqliteBackend;
    use extension_apiserver_storage::conformance::Subject;

    /// A backend on a new file in a temporary directory that lives as long as the case.
    async fn temporary() -> Subject {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let backend = SqliteBackend::open(dir.path().join("store.db")).expect("open sqlite");
        Subject::with_guard(backend, dir)
    }

    extension_apiserver_storage::backend_conformance_tests!(temporary);
}

/// On the etcd named by `APISERVER_TEST_ETCD` (default `http://127.0.0.1:23790`; `.ci/etcd.sh
/// start` runs one). An unreachable etcd fails every case: a skipped suite would hide it.
#[cfg(feature = "etcd")]
mod etcd3 {
    use std::sync::{Arc, OnceLock};

    use extension_apiserver_storage::conformance::Subject;
    use extension_apiserver_storage::{Backend, Etcd3Backend, Etcd3Options};
    use tokio::sync::Mutex;

    /// Cases share one etcd and so one revision counter and one compaction; they count
    /// revisions and compact, so they take turns. A tokio mutex, because its owned guard can
    /// live in the `Subject` and outlast each case's own runtime.
    fn turn() -> Arc<Mutex<()>> {
        static TURN: OnceLock<Arc<Mutex<()>>> = OnceLock::new();
        Arc::clone(TURN.get_or_init(Arc::default))
    }

    /// A backend whose keys live under a prefix of their own, so cases never see each other.
    async fn on_etcd() -> Subject {
        let guard = turn().lock_owned().await;
        let endpoint = std::env::var("APISERVER_TEST_ETCD")
            .unwrap_or_else(|_| "http://127.0.0.1:23790".into());
        let options = Etcd3Options {
            key_prefix: format!("/apiserver-conformance/{}", uuid::Uuid::new_v4()),
            ..Etcd3Options::default()
        };
        let backend = Etcd3Backend::connect(std::slice::from_ref(&endpoint), options)
            .await
            .expect("an etcd client");
        // The client connects lazily; fail here, clearly, when nothing answers.
        if let Err(error) = backend.ready().await {
            panic!("etcd at {endpoint} (APISERVER_TEST_ETCD) is not ready: {error}");
        }
        Subject::with_guard(backend, guard)
    }

    // Every case but `fresh_store_is_at_revision_zero`, which needs an empty etcd.
    extension_apiserver_storage::backend_conformance_tests!(shared on_etcd);
}
