//! Runs the storage conformance suite on every embedded backend.

mod memory {
    use apiserver::storage::MemoryBackend;

    apiserver::backend_conformance_tests!(|| async { MemoryBackend::new() });
}

mod sqlite {
    use apiserver::storage::conformance::Subject;
    use apiserver::storage::SqliteBackend;

    /// A backend on a new file in a temporary directory that lives as long as the case.
    async fn temporary() -> Subject {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let backend = SqliteBackend::open(dir.path().join("store.db")).expect("open sqlite");
        Subject::with_guard(backend, dir)
    }

    apiserver::backend_conformance_tests!(temporary);
}
