//! The API-conventions conformance suite of the test kit on every version wardle serves:
//! Flunder in v1alpha1 (namespaced, in memory, without the watch cache) and in v1beta1
//! (converted, with the cache), and Fischer (cluster-scoped, SQLite, with the cache), one
//! test per convention; proof that every served resource of every version has its suite;
//! and proof that the suite fails a server that breaks a convention, and skips only what it
//! is told to, saying why.

use std::sync::Arc;

use extension_apiserver::APIGroup;
use extension_apiserver::registry::context::RequestContext;
use extension_apiserver::registry::options::ListOptions;
use extension_apiserver::registry::options::WriteOptions;
use extension_apiserver::registry::rest::{Lister, ObjectList, UpdateFn, Updater};
use extension_apiserver::registry::store::Store;
use extension_apiserver::storage::MemoryBackend;
use extension_apiserver_testing::conformance::{Convention, Suite, served_resources};
use wardle::{Fischer, Flunder, FlunderSpec, v1beta1};

/// The resources of each version that a `conformance!` above checks.
const CHECKED: [(&str, &str); 3] = [
    ("v1alpha1", "fischers"),
    ("v1alpha1", "flunders"),
    ("v1beta1", "flunders"),
];

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

extension_apiserver_testing::conformance!(
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

/// A valid v1beta1 flunder: it refers to a fischer named after it, which field selectors
/// on `spec.fischerReference` select.
fn flunder_v1beta1(name: &str) -> v1beta1::Flunder {
    v1beta1::Flunder {
        spec: v1beta1::FlunderSpec {
            reference_type: Some("Fischer".into()),
            fischer_reference: Some(format!("fischer-of-{name}")),
            flunder_reference: None,
        },
        ..v1beta1::Flunder::default()
    }
}

// v1beta1 is served converted from v1alpha1's store: every object, list item, watch event
// and bookmark goes through the conversion.
extension_apiserver_testing::conformance!(
    flunder_v1beta1_conventions,
    group: wardle::api_group(),
    resource: v1beta1::Flunder,
    sample: flunder_v1beta1,
    // sample-apiserver's v1beta1 validation: not both references.
    invalid: |name| {
        let mut f = flunder_v1beta1(name);
        f.spec.flunder_reference = Some("another".into());
        f
    },
);

extension_apiserver_testing::conformance!(
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
        extension_apiserver::registry::rest::RestStorage,
        Store<Flunder>,
    ) -> extension_apiserver::registry::rest::RestStorage,
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
    ) -> extension_apiserver::Result<ObjectList> {
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
    ) -> extension_apiserver::Result<(serde_json::Value, bool)> {
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

/// The suite on flunders whose lister ignores `limit`.
fn ignoring_limit() -> Suite<Flunder> {
    Suite::<Flunder>::new(
        || {
            vec![broken_group(|s, store| {
                s.with_lister(Arc::new(IgnoresLimit(store)))
            })]
        },
        flunder,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_fails_a_server_that_ignores_limit() {
    let suite = ignoring_limit();
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

/// Every resource of every version wardle serves has its suite above: a version added
/// without one fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_version_of_every_resource_has_the_suite() {
    let served = served_resources(vec![wardle::api_group()]).await;
    assert_eq!(
        served,
        CHECKED.map(|(v, r)| (format!("{}/{v}", wardle::GROUP), r.to_string()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_convention_is_not_checked_and_says_why() {
    let broken = ignoring_limit();
    let skipping = broken
        .clone()
        .skip("pagination", "this lister pages elsewhere");
    skipping.check(Convention::Pagination).await.unwrap();
    assert_eq!(
        skipping.skip_notice(Convention::Pagination).unwrap(),
        "API convention skipped: Flunder pagination (wardle.example.com/v1alpha1): this lister pages elsewhere"
    );
    // Only what it was told: skipping another convention hides nothing of this one.
    let other = broken.skip("not_found_status", "unrelated");
    let failure = other.check(Convention::Pagination).await.unwrap_err();
    assert!(failure.contains("Flunder pagination: limit=2"), "{failure}");
}
