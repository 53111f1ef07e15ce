//! The API-conventions conformance suite: what kube-apiserver promises clients about every
//! resource, checked against your server and your resource, each convention a test.
//!
//! [`conformance!`](crate::conformance!) is the one call a user makes; it expands to
//! one `#[test]` per [`Convention`], each starting the user's groups on a fresh
//! [`TestServer`] (in memory unless [`Suite::sqlite`]) and talking to it through a kube-rs
//! client over TLS. A failing test is named after the convention it found broken, and its
//! message says what kube-apiserver does instead.
//!
//! ```
//! # use extension_apiserver::prelude::*;
//! # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
//! # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
//! # fn api_group() -> APIGroup {
//! #     APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>())
//! # }
//! extension_apiserver_testing::conformance!(
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
//! a 422 with your causes), `sqlite: true` (run on a SQLite file instead of memory),
//! `options: |o| …` (change the [`ServerOptions`] of each server) and
//! `skip: ("convention_name", "why")` (see [`Suite::skip`]; once per convention skipped).
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
use std::io::Write;
use std::str::FromStr;
use std::sync::Arc;

use crate::TestServer;
use extension_apiserver::runtime::Resource;
use extension_apiserver::server::{APIGroup, ServerOptions};

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
    /// resourceVersion a watch can resume from, each an object of the kind and version
    /// watched.
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

impl FromStr for Convention {
    type Err = String;

    /// The convention of a [`name`](Convention::name) (`watch_bookmarks`); an unknown name
    /// is an error that lists the known ones.
    fn from_str(name: &str) -> Result<Self, String> {
        let known = Convention::ALL.into_iter().find(|c| c.name() == name);
        known.ok_or_else(|| {
            let names: Vec<_> = Convention::ALL.iter().map(|c| c.name()).collect();
            format!(
                "no API convention is named {name:?}; the conventions are: {}",
                names.join(", ")
            )
        })
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
    /// The conventions not checked, each with why.
    skipped: Vec<(Convention, String)>,
}

impl<K> Clone for Suite<K> {
    fn clone(&self) -> Self {
        Self {
            groups: self.groups.clone(),
            sample: self.sample.clone(),
            invalid: self.invalid.clone(),
            sqlite: self.sqlite,
            options: self.options.clone(),
            skipped: self.skipped.clone(),
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
            skipped: Vec::new(),
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

    /// Changes each server's options (as [`TestServerBuilder::options`](crate::TestServerBuilder::options)),
    /// e.g. an etcd3 backend with a `storage_prefix` of its own. The `expired_continue`
    /// check compacts storage, which on etcd is etcd-wide.
    pub fn options(mut self, options: impl Fn(&mut ServerOptions) + Send + Sync + 'static) -> Self {
        self.options = Some(Arc::new(options));
        self
    }

    /// Does not check the convention named `convention` (its [`name`](Convention::name), as
    /// its test is named: `"watch_bookmarks"`), for `reason`: a convention the resource
    /// cannot keep on purpose, or one broken by a known bug with an issue to link. Its check
    /// passes without a server, and says on the test's standard error, never captured, that
    /// it was skipped and why. An unknown name or an empty reason panics.
    ///
    /// ```
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver_testing::conformance::{Convention, Suite};
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
    /// # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
    /// # fn api_group() -> APIGroup {
    /// #     APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>())
    /// # }
    /// let suite = Suite::<Widget>::new(|| vec![api_group()], |_| Widget::default())
    ///     .skip("table", "widgets are printed by a plugin of their own");
    /// assert_eq!(suite.skip_reason(Convention::Table), Some("widgets are printed by a plugin of their own"));
    /// ```
    #[track_caller]
    pub fn skip(mut self, convention: &str, reason: &str) -> Self {
        let convention: Convention = convention.parse().unwrap_or_else(|e| panic!("{e}"));
        let reason = reason.trim();
        assert!(
            !reason.is_empty(),
            "skipping {convention} needs a reason (it is printed with every run)"
        );
        self.skipped.retain(|(c, _)| *c != convention);
        self.skipped.push((convention, reason.to_string()));
        self
    }

    /// Why `convention` is [skipped](Self::skip), if it is.
    pub fn skip_reason(&self, convention: Convention) -> Option<&str> {
        self.skipped
            .iter()
            .find(|(c, _)| *c == convention)
            .map(|(_, reason)| reason.as_str())
    }

    /// What a skipped check prints: the resource, the convention and why.
    pub fn skip_notice(&self, convention: Convention) -> Option<String> {
        let reason = self.skip_reason(convention)?;
        let info = K::INFO;
        Some(format!(
            "API convention skipped: {} {} ({}): {reason}",
            info.kind,
            convention,
            info.api_version()
        ))
    }

    /// Checks `convention` on a fresh server; `Err` says what broke it. A
    /// [skipped](Self::skip) convention is `Ok` at once, its notice written to the
    /// process's standard error (not the test harness's captured output, so that a skip is
    /// never silent).
    pub async fn check(&self, convention: Convention) -> Outcome {
        if let Some(notice) = self.skip_notice(convention) {
            let _ = writeln!(std::io::stderr().lock(), "{notice}");
            return Ok(());
        }
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

    /// Checks every convention, one after the other (the skipped ones only print why); the
    /// failures, each with its message.
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
    /// test of [`conformance!`](crate::conformance!) calls.
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

/// Every resource (not subresource) that `groups` serve, as `("{group}/{version}",
/// "{plural}")` pairs in order, read from the discovery of a server started for the
/// purpose: what a test compares with the resources its [`conformance!`](crate::conformance!)
/// calls check, so that a version or a resource added without its suite fails.
///
/// ```no_run
/// # use extension_apiserver::prelude::*;
/// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
/// # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
/// # fn api_group() -> APIGroup {
/// #     APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>())
/// # }
/// # async fn t() {
/// use extension_apiserver_testing::conformance::served_resources;
/// let served = served_resources(vec![api_group()]).await;
/// assert_eq!(served, [("example.com/v1".to_string(), "widgets".to_string())]);
/// # }
/// ```
pub async fn served_resources(groups: Vec<APIGroup>) -> Vec<(String, String)> {
    let server = TestServer::builder().groups(groups).start().await;
    let client = server.client();
    let get = |path: String| {
        let client = client.clone();
        async move {
            let request = http::Request::get(&path)
                .body(Vec::new())
                .expect("a request");
            let answer = client.request::<serde_json::Value>(request).await;
            answer.unwrap_or_else(|e| panic!("GET {path}: {e}"))
        }
    };
    let mut served = Vec::new();
    let groups = get("/apis".to_string()).await;
    let versions = groups["groups"].as_array().into_iter().flatten();
    let versions = versions.flat_map(|g| g["versions"].as_array().into_iter().flatten());
    let versions: Vec<String> = versions
        .filter_map(|v| v["groupVersion"].as_str().map(str::to_string))
        .collect();
    for group_version in versions {
        let list = get(format!("/apis/{group_version}")).await;
        for resource in list["resources"].as_array().into_iter().flatten() {
            let name = resource["name"].as_str().unwrap_or_default();
            if !name.contains('/') {
                served.push((group_version.clone(), name.to_string()));
            }
        }
    }
    server.stop().await;
    served.sort();
    served
}

/// Generates the API-conventions conformance tests of one resource: a module `$name` with
/// one `#[test]` per [`Convention`](crate::conformance::Convention).
///
/// ```text
/// conformance!(NAME, group: GROUP, resource: TYPE, sample: |name| OBJECT);
/// conformance!(NAME, groups: [GROUP, ...], resource: TYPE, sample: |name| OBJECT,
///              invalid: |name| OBJECT, sqlite: true, options: |o| CHANGE,
///              skip: ("CONVENTION", "WHY"), ...);
/// ```
///
/// `GROUP` is an expression making an [`APIGroup`](extension_apiserver::APIGroup) (evaluated once per
/// test); `sample` and `invalid` are closures from a name to an object of `TYPE`; each
/// `skip` is a [`Suite::skip`](crate::conformance::Suite::skip). The expressions
/// are evaluated inside the module, which imports the enclosing one (`super::*`).
/// See [`testing::conformance`](mod@crate::conformance).
///
/// ```
/// # use extension_apiserver::prelude::*;
/// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
/// # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
/// # fn api_group() -> APIGroup {
/// #     APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>())
/// # }
/// extension_apiserver_testing::conformance!(
///     widget_conventions,
///     group: api_group(),
///     resource: Widget,
///     sample: |_| Widget::default(),
///     sqlite: true,
///     // Its test passes and prints: "API convention skipped: Widget table (example.com/v1): …"
///     skip: ("table", "widgets have no printer columns yet: issue 12"),
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance {
    ($name:ident, group: $group:expr, resource: $ty:ty, sample: $sample:expr $(, $($entry:tt)*)?) => {
        $crate::conformance!($name, groups: [$group], resource: $ty, sample: $sample $(, $($entry)*)?);
    };
    ($name:ident, groups: [$($group:expr),+ $(,)?], resource: $ty:ty, sample: $sample:expr $(, $($entry:tt)*)?) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance::{Convention, Suite};

            fn suite() -> Suite<$ty> {
                let suite = Suite::<$ty>::new(|| vec![$($group),+], $sample);
                $crate::__conformance_entries!(suite; $($($entry)*)?)
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

/// The optional entries of [`conformance!`](crate::conformance!), each a call of
/// the [`Suite`](crate::conformance::Suite)'s method of that name; `skip` takes two
/// arguments.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_entries {
    ($suite:expr; $(,)?) => { $suite };
    ($suite:expr; skip: ($convention:expr, $reason:expr $(,)?) $(, $($rest:tt)*)?) => {
        $crate::__conformance_entries!($suite.skip($convention, $reason); $($($rest)*)?)
    };
    ($suite:expr; $key:ident : $value:expr $(, $($rest:tt)*)?) => {
        $crate::__conformance_entries!($suite.$key($value); $($($rest)*)?)
    };
}

/// One `#[test]` per convention (for [`conformance!`](crate::conformance!)).
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

#[cfg(test)]
mod tests {
    use super::*;
    use extension_apiserver::prelude::*;

    /// A flunder, which no server of these tests serves.
    #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[resource(
        group = "wardle.example.com",
        version = "v1alpha1",
        kind = "Flunder",
        namespaced
    )]
    struct Flunder {
        #[serde(default)]
        metadata: ObjectMeta,
    }

    /// A suite whose server could not even start: no group serves flunders.
    fn suite() -> Suite<Flunder> {
        Suite::new(Vec::new, |_| Flunder::default())
    }

    #[test]
    fn conventions_are_named_as_their_tests() {
        for convention in Convention::ALL {
            assert_eq!(convention.name().parse::<Convention>(), Ok(convention));
        }
        let unknown = "bookmarks".parse::<Convention>().unwrap_err();
        assert!(unknown.contains("\"bookmarks\""), "{unknown}");
        assert!(unknown.contains("watch_bookmarks"), "{unknown}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_skipped_convention_is_reported_with_its_reason_and_not_checked() {
        let suite = suite().skip("watch_bookmarks", "  bookmarks are sent by a proxy ");
        assert_eq!(
            suite.skip_reason(Convention::WatchBookmarks),
            Some("bookmarks are sent by a proxy")
        );
        assert_eq!(
            suite.skip_notice(Convention::WatchBookmarks).as_deref(),
            Some(
                "API convention skipped: Flunder watch_bookmarks (wardle.example.com/v1alpha1): bookmarks are sent by a proxy"
            )
        );
        // Skipped: passes without a server that serves flunders.
        assert_eq!(suite.check(Convention::WatchBookmarks).await, Ok(()));
        // The others are checked (and fail here: nothing serves flunders).
        assert_eq!(suite.skip_reason(Convention::Table), None);
        assert_eq!(suite.skip_notice(Convention::Table), None);
        let failure = suite.check(Convention::NotFoundStatus).await.unwrap_err();
        assert!(failure.starts_with("Flunder not_found_status"), "{failure}");
    }

    #[test]
    #[should_panic(expected = "no API convention is named \"bookmark\"")]
    fn skipping_an_unknown_convention_panics() {
        let _ = suite().skip("bookmark", "typo");
    }

    #[test]
    #[should_panic(expected = "skipping table needs a reason")]
    fn skipping_without_a_reason_panics() {
        let _ = suite().skip("table", " ");
    }
}
