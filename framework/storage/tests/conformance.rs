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

/// On the PostgreSQL named by `APISERVER_TEST_POSTGRES` (default
/// `postgres://postgres@127.0.0.1:54320/apiserver`; `.ci/postgres.sh start` runs one). Each
/// case has a PostgreSQL schema of its own, so cases run side by side and the whole suite
/// runs, `fresh_store_is_at_revision_zero` included. An unreachable database fails every
/// case: a skipped suite would hide it.
#[cfg(feature = "postgres")]
mod postgres {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use bytes::Bytes;
    use extension_apiserver_storage::{
        Backend, EventType, PostgresBackend, PostgresOptions, Revision,
    };
    use futures::StreamExt;

    pub(crate) fn url() -> String {
        std::env::var("APISERVER_TEST_POSTGRES")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:54320/apiserver".into())
    }

    /// A schema name no other case uses.
    pub(crate) fn fresh_schema() -> String {
        format!("conformance_{}", uuid::Uuid::new_v4().simple())
    }

    pub(crate) async fn connect(schema: &str) -> PostgresBackend {
        let url = url();
        let options = PostgresOptions {
            url: Some(url.clone()),
            schema: schema.to_owned(),
            pool_size: 4,
            ..PostgresOptions::default()
        };
        match PostgresBackend::connect(options).await {
            Ok(backend) => backend,
            Err(error) => panic!("PostgreSQL at {url} (APISERVER_TEST_POSTGRES): {error}"),
        }
    }

    async fn on_postgres() -> PostgresBackend {
        connect(&fresh_schema()).await
    }

    extension_apiserver_storage::backend_conformance_tests!(on_postgres);

    /// Creates `/shared/{name}`, updates it, deletes it: `WRITES + 1` writes.
    async fn write_and_delete(backend: &PostgresBackend, name: &str) {
        let key = format!("/shared/{name}");
        let mut kv = backend.create(&key, Bytes::from("0")).await.unwrap();
        for i in 1..WRITES {
            kv = backend
                .update(&key, Bytes::from(i.to_string()), kv.mod_revision)
                .await
                .unwrap();
        }
        backend.delete(&key, Some(kv.mod_revision)).await.unwrap();
    }

    const WRITES: usize = 60;

    /// Two servers on one schema, both writing at once: a watch through either sees every
    /// write of both, in revision order, with no gap and no duplicate, and each server's
    /// revisions agree with the other's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_servers_share_one_revision_log_and_its_watches() {
        let schema = fresh_schema();
        let (one, two) = (connect(&schema).await, connect(&schema).await);
        let mut watches = [
            one.watch("/shared/", 0).await.unwrap(),
            two.watch("/shared/", 0).await.unwrap(),
        ];
        tokio::join!(write_and_delete(&one, "a"), write_and_delete(&two, "b"));
        let last = one.current_revision().await.unwrap();
        assert_eq!(last, 2 * (WRITES as Revision + 1));
        assert_eq!(two.current_revision().await.unwrap(), last);
        for watch in &mut watches {
            let mut seen = BTreeMap::new();
            for expected in 1..=last {
                let event = tokio::time::timeout(Duration::from_secs(30), watch.next())
                    .await
                    .expect("an event in time")
                    .expect("the watch goes on")
                    .expect("an event");
                assert_eq!(event.revision(), expected, "a gap or a duplicate");
                *seen
                    .entry((event.kv.key.clone(), event.event_type == EventType::Delete))
                    .or_insert(0) += 1;
            }
            assert_eq!(seen.len(), 4, "{seen:?}");
        }
    }
}
