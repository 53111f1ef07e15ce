//! The API-conventions conformance suite of the test kit on wardle's resources: Flunder
//! (namespaced, in memory, without the watch cache) and Fischer (cluster-scoped, SQLite, with
//! the cache), one test per convention; and proof that the suite fails a server that breaks
//! a convention.

use std::sync::Arc;

use apiserver::registry::context::RequestContext;
use apiserver::registry::options::ListOptions;
use apiserver::registry::options::WriteOptions;
use apiserver::registry::rest::{Lister, ObjectList, UpdateFn, Updater};
use apiserver::registry::store::Store;
use apiserver::storage::MemoryBackend;
use apiserver::testing::conformance::{Convention, Suite};
use apiserver::APIGroup;
use wardle::{Fischer, Flunder, FlunderSpec};

/// A valid flunder; its reference differs per name, so field selectors on it select.
fn flunder(name: &str) -> Flunder {
    Flunder {
        spec: FlunderSpec {
            reference: Some(format!("ref-{name}")),
            reference_type: None,
        },
        ..Flunder::default()
    }
}

apiserver::testing::conformance!(
    flunder_conventions,
    group: wardle::api_group(),
    resource: Flunder,
    sample: flunder,
    // wardle's validation: a reference type must be Flunder or Fischer.
    invalid: |name| {
        let mut f = flunder(name);
        f.spec.reference_type = Some("Bogus".into());
        f
    },
    // Every read from storage, not the watch cache (Fischer's suite keeps the cache).
    options: |o| o.watch_cache = false,
);

apiserver::testing::conformance!(
    fischer_conventions,
    groups: [wardle::api_group()],
    resource: Fischer,
    sample: |name| Fischer {
        disallowed_flunders: vec![format!("not-{name}")],
        ..Fischer::default()
    },
    sqlite: true,
);

/// Flunders served by the generic store with one verb replaced by a broken one.
fn broken_group(
    break_it: fn(
        apiserver::registry::rest::RestStorage,
        Store<Flunder>,
    ) -> apiserver::registry::rest::RestStorage,
) -> APIGroup {
    let store = Store::<Flunder>::new(Arc::new(MemoryBackend::new()), "/registry");
    let storage = break_it(store.rest_storage(), store);
    APIGroup::new(wardle::GROUP).version("v1alpha1", |v| v.storage("flunders", storage))
}

/// Ignores `limit`, as metrics-server's lister did (metrics-server#87).
struct IgnoresLimit(Store<Flunder>);

#[async_trait::async_trait]
impl Lister for IgnoresLimit {
    async fn list(
        &self,
        ctx: &RequestContext,
        options: &ListOptions,
    ) -> apiserver::Result<ObjectList> {
        let options = ListOptions {
            limit: 0,
            ..options.clone()
        };
        self.0.list(ctx, &options).await
    }
}

/// Last write wins: an update takes the stored resourceVersion instead of the client's.
struct LastWriteWins(Store<Flunder>);

#[async_trait::async_trait]
impl Updater for LastWriteWins {
    async fn update(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> apiserver::Result<(serde_json::Value, bool)> {
        let blind: UpdateFn = Arc::new(move |current| {
            let mut new = update(current)?;
            if let Some(current) = current {
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            }
            Ok(new)
        });
        self.0.update(ctx, name, blind, options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_fails_a_server_that_ignores_limit() {
    let suite = Suite::<Flunder>::new(
        || {
            vec![broken_group(|s, store| {
                s.with_lister(Arc::new(IgnoresLimit(store)))
            })]
        },
        flunder,
    );
    let failure = suite.check(Convention::Pagination).await.unwrap_err();
    assert!(failure.contains("Flunder pagination: limit=2"), "{failure}");
    // The rest of the server keeps the conventions it does not break.
    suite.check(Convention::NotFoundStatus).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_fails_a_server_where_the_last_write_wins() {
    let suite = Suite::<Flunder>::new(
        || {
            vec![broken_group(|s, store| {
                s.with_updater(Arc::new(LastWriteWins(store)))
            })]
        },
        flunder,
    );
    let failure = suite
        .check(Convention::StaleUpdateConflict)
        .await
        .unwrap_err();
    assert!(
        failure.contains("PUT with a stale resourceVersion: expected HTTP 409 Conflict"),
        "{failure}"
    );
    suite.check(Convention::AlreadyExistsStatus).await.unwrap();
}
