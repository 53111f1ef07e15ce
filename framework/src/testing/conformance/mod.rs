//! The API-conventions conformance suite: what kube-apiserver promises clients about every
//! resource, checked against your server and your resource, each convention a test.
//!
//! [`conformance!`](crate::testing::conformance!) is the one call a user makes; it expands to
//! one `#[test]` per [`Convention`], each starting the user's groups on a fresh
//! [`TestServer`] (in memory unless [`Suite::sqlite`]) and talking to it through a kube-rs
//! client over TLS. A failing test is named after the convention it found broken, and its
//! message says what kube-apiserver does instead.
//!
//! ```
//! # use apiserver::prelude::*;
//! # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
//! # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
//! # fn api_group() -> APIGroup {
//! #     APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>())
//! # }
//! apiserver::testing::conformance!(
//!     widget_conventions,
//!     group: api_group(),
//!     resource: Widget,
//!     sample: |name| {
//!         let mut widget = Widget::default();
//!         widget.metadata.name = Some(name.into());
//!         widget
//!     },
//! );
//! # fn main() {}
//! ```
//!
//! Optional entries after `sample`: `invalid: |name| …` (an object your validation refuses:
//! a 422 with your causes), `sqlite: true` (run on a SQLite file instead of memory) and
//! `options: |o| …` (change the [`ServerOptions`] of each server).
//! Field selectors are checked on `metadata.name`, `metadata.namespace` and each
//! `selectable_field` of the resource, with values taken from the samples.
//!
//! Without the macro: [`Suite::check`] runs one convention and returns what failed, and
//! [`Suite::check_all`] runs them all; both are `async`.

mod client;
mod lists;
mod status;
mod watch;
mod writes;

use std::fmt;
use std::sync::Arc;

use crate::runtime::Resource;
use crate::server::{APIGroup, ServerOptions};
use crate::testing::TestServer;

use client::Ctx;

/// What a check found: `Err` says what the server did and what kube-apiserver does.
pub type Outcome = Result<(), String>;

/// One convention of the Kubernetes API, as kube-apiserver keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Convention {
    /// Every write gives the object a new `resourceVersion`; reads give back the one the
    /// write returned; an update that changes nothing keeps it; a list's `resourceVersion`
    /// is at least as new as its items (a watch from it starts after them). The suite
    /// compares resourceVersions only for equality, as clients must (they are opaque).
    ResourceVersion,
    /// An update or delete with a stale `resourceVersion` is 409 `Conflict` and changes
    /// nothing.
    StaleUpdateConflict,
    /// Reading, patching or deleting a missing object is 404 `NotFound`, with `details`.
    NotFoundStatus,
    /// Creating an object that exists is 409 `AlreadyExists`, with `details`.
    AlreadyExistsStatus,
    /// An invalid object is 422 `Invalid` with `details.causes`, and is not stored.
    InvalidStatus,
    /// `metadata.generateName` gives a unique name: the prefix and 5 random characters.
    GenerateName,
    /// Deleting an object with finalizers sets `deletionTimestamp` and keeps it until the
    /// finalizers are removed; no finalizer can be added meanwhile.
    Finalizers,
    /// `dryRun=All` answers as the write would and stores nothing.
    DryRun,
    /// `labelSelector` with `=`, `!=`, `in`, `notin`, exists and does-not-exist; a malformed
    /// one is 400; a watch with a selector sees objects leave (DELETED) and enter (ADDED).
    LabelSelectors,
    /// `fieldSelector` on `metadata.name`, `metadata.namespace` and the selectable fields;
    /// an unsupported field is 400.
    FieldSelectors,
    /// `limit` and `continue`: pages at the first page's resourceVersion (a consistent
    /// snapshot), `remainingItemCount`, no token on the last page.
    Pagination,
    /// A `continue` token whose resourceVersion has been compacted is 410 `Expired`.
    ExpiredContinue,
    /// A watch from a resourceVersion sends every later change once, in order, with the
    /// resourceVersions the writes returned; a namespace's watch sees only its namespace.
    WatchOrder,
    /// `allowWatchBookmarks`: the bookmark closing `sendInitialEvents`, and bookmarks whose
    /// resourceVersion a watch can resume from.
    WatchBookmarks,
    /// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` gives a `Table` with the
    /// resource's printer columns, for a list and for one object.
    Table,
}

impl Convention {
    /// Every convention, in the order the suite runs them.
    pub const ALL: [Convention; 15] = [
        Convention::ResourceVersion,
        Convention::StaleUpdateConflict,
        Convention::NotFoundStatus,
        Convention::AlreadyExistsStatus,
        Convention::InvalidStatus,
        Convention::GenerateName,
        Convention::Finalizers,
        Convention::DryRun,
        Convention::LabelSelectors,
        Convention::FieldSelectors,
        Convention::Pagination,
        Convention::ExpiredContinue,
        Convention::WatchOrder,
        Convention::WatchBookmarks,
        Convention::Table,
    ];

    /// The snake-case name the macro gives its test.
    pub fn name(self) -> &'static str {
        match self {
            Convention::ResourceVersion => "resource_version",
            Convention::StaleUpdateConflict => "stale_update_conflict",
            Convention::NotFoundStatus => "not_found_status",
            Convention::AlreadyExistsStatus => "already_exists_status",
            Convention::InvalidStatus => "invalid_status",
            Convention::GenerateName => "generate_name",
            Convention::Finalizers => "finalizers",
            Convention::DryRun => "dry_run",
            Convention::LabelSelectors => "label_selectors",
            Convention::FieldSelectors => "field_selectors",
            Convention::Pagination => "pagination",
            Convention::ExpiredContinue => "expired_continue",
            Convention::WatchOrder => "watch_order",
            Convention::WatchBookmarks => "watch_bookmarks",
            Convention::Table => "table",
        }
    }
}

impl fmt::Display for Convention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

type GroupsFn = Arc<dyn Fn() -> Vec<APIGroup> + Send + Sync>;
type SampleFn<K> = Arc<dyn Fn(&str) -> K + Send + Sync>;
type OptionsFn = Arc<dyn Fn(&mut ServerOptions) + Send + Sync>;

/// The suite for resource `K` of the user's groups.
pub struct Suite<K> {
    groups: GroupsFn,
    sample: SampleFn<K>,
    invalid: Option<SampleFn<K>>,
    sqlite: bool,
    options: Option<OptionsFn>,
}

impl<K> Clone for Suite<K> {
    fn clone(&self) -> Self {
        Self {
            groups: self.groups.clone(),
            sample: self.sample.clone(),
            invalid: self.invalid.clone(),
            sqlite: self.sqlite,
            options: self.options.clone(),
        }
    }
}

impl<K: Resource> Suite<K> {
    /// The suite of `K`, served by the groups `groups` makes (called once per check, each
    /// on a fresh server), with `sample(name)` a valid object named `name` (its namespace
    /// is set by the suite).
    pub fn new(
        groups: impl Fn() -> Vec<APIGroup> + Send + Sync + 'static,
        sample: impl Fn(&str) -> K + Send + Sync + 'static,
    ) -> Self {
        Self {
            groups: Arc::new(groups),
            sample: Arc::new(sample),
            invalid: None,
            sqlite: false,
            options: None,
        }
    }

    /// `invalid(name)`: an object named `name` that the resource's validation refuses; the
    /// suite expects 422 `Invalid` with causes for it.
    pub fn invalid(mut self, invalid: impl Fn(&str) -> K + Send + Sync + 'static) -> Self {
        self.invalid = Some(Arc::new(invalid));
        self
    }

    /// Runs on a SQLite file (`true`) instead of in memory.
    pub fn sqlite(mut self, sqlite: bool) -> Self {
        self.sqlite = sqlite;
        self
    }

    /// Changes each server's options (as [`TestServerBuilder::options`](crate::testing::TestServerBuilder::options)),
    /// e.g. an etcd3 backend with a `storage_prefix` of its own. The `expired_continue`
    /// check compacts storage, which on etcd is etcd-wide.
    pub fn options(mut self, options: impl Fn(&mut ServerOptions) + Send + Sync + 'static) -> Self {
        self.options = Some(Arc::new(options));
        self
    }

    /// Checks `convention` on a fresh server; `Err` says what broke it.
    pub async fn check(&self, convention: Convention) -> Outcome {
        let mut builder = TestServer::builder().groups((self.groups)());
        if self.sqlite {
            builder = builder.sqlite();
        }
        if let Some(options) = self.options.clone() {
            builder = builder.options(move |o| options(o));
        }
        let server = builder.start().await;
        let ctx = Ctx {
            server: &server,
            client: server.client(),
            sample: &*self.sample,
        };
        let outcome = match convention {
            Convention::ResourceVersion => writes::resource_versions(&ctx).await,
            Convention::StaleUpdateConflict => writes::stale_update_conflict(&ctx).await,
            Convention::NotFoundStatus => status::not_found(&ctx).await,
            Convention::AlreadyExistsStatus => status::already_exists(&ctx).await,
            Convention::InvalidStatus => status::invalid(&ctx, self.invalid.as_deref()).await,
            Convention::GenerateName => writes::generate_name(&ctx).await,
            Convention::Finalizers => writes::finalizers(&ctx).await,
            Convention::DryRun => writes::dry_run(&ctx).await,
            Convention::LabelSelectors => lists::label_selectors(&ctx).await,
            Convention::FieldSelectors => lists::field_selectors(&ctx).await,
            Convention::Pagination => lists::pagination(&ctx).await,
            Convention::ExpiredContinue => lists::expired_continue(&ctx).await,
            Convention::WatchOrder => watch::watch_order(&ctx).await,
            Convention::WatchBookmarks => watch::watch_bookmarks(&ctx).await,
            Convention::Table => lists::table(&ctx).await,
        };
        server.stop().await;
        outcome.map_err(|e| format!("{} {}: {e}", K::INFO.kind, convention))
    }

    /// Checks every convention, one after the other; the failures, each with its message.
    pub async fn check_all(&self) -> Vec<(Convention, String)> {
        let mut failures = Vec::new();
        for convention in Convention::ALL {
            if let Err(e) = self.check(convention).await {
                failures.push((convention, e));
            }
        }
        failures
    }

    /// Checks `convention` on a runtime of its own and panics with the failure: what each
    /// test of [`conformance!`](crate::testing::conformance!) calls.
    #[track_caller]
    pub fn run(&self, convention: Convention) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        if let Err(e) = runtime.block_on(self.check(convention)) {
            panic!("API convention broken: {e}");
        }
    }
}

/// Generates the API-conventions conformance tests of one resource: a module `$name` with
/// one `#[test]` per [`Convention`](crate::testing::conformance::Convention).
///
/// ```text
/// conformance!(NAME, group: GROUP, resource: TYPE, sample: |name| OBJECT);
/// conformance!(NAME, groups: [GROUP, ...], resource: TYPE, sample: |name| OBJECT,
///              invalid: |name| OBJECT, sqlite: true, options: |o| CHANGE);
/// ```
///
/// `GROUP` is an expression making an [`APIGroup`](crate::APIGroup) (evaluated once per
/// test); `sample` and `invalid` are closures from a name to an object of `TYPE`. The
/// expressions are evaluated inside the module, which imports the enclosing one (`super::*`).
/// See [`testing::conformance`](mod@crate::testing::conformance).
#[macro_export]
macro_rules! conformance {
    ($name:ident, group: $group:expr, resource: $ty:ty, sample: $sample:expr $(, $key:ident : $value:expr)* $(,)?) => {
        $crate::conformance!($name, groups: [$group], resource: $ty, sample: $sample $(, $key: $value)*);
    };
    ($name:ident, groups: [$($group:expr),+ $(,)?], resource: $ty:ty, sample: $sample:expr $(, $key:ident : $value:expr)* $(,)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::testing::conformance::{Convention, Suite};

            fn suite() -> Suite<$ty> {
                Suite::<$ty>::new(|| vec![$($group),+], $sample)$(.$key($value))*
            }

            $crate::__conformance_tests!(
                resource_version: ResourceVersion,
                stale_update_conflict: StaleUpdateConflict,
                not_found_status: NotFoundStatus,
                already_exists_status: AlreadyExistsStatus,
                invalid_status: InvalidStatus,
                generate_name: GenerateName,
                finalizers: Finalizers,
                dry_run: DryRun,
                label_selectors: LabelSelectors,
                field_selectors: FieldSelectors,
                pagination: Pagination,
                expired_continue: ExpiredContinue,
                watch_order: WatchOrder,
                watch_bookmarks: WatchBookmarks,
                table: Table,
            );
        }
    };
}

/// One `#[test]` per convention (for [`conformance!`](crate::testing::conformance!)).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($($test:ident: $convention:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                suite().run(Convention::$convention)
            }
        )*
    };
}
