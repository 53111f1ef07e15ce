//! # extension-apiserver
//!
//! A framework for Kubernetes **aggregated API servers**: the extension servers that
//! kube-apiserver's aggregator proxies to for an API group. Write a type, derive
//! [`Resource`](macro@Resource), add it to an [`APIGroup`], run: kubectl, client-go and kube-rs
//! treat the server like kube-apiserver.
//!
//! ```no_run
//! use extension_apiserver::prelude::*;
//!
//! #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced,
//!            shortnames = ["wd"],
//!            printcolumn(name = "Color", type = "string", json_path = ".spec.color"))]
//! struct Widget {
//!     #[serde(default)]
//!     metadata: ObjectMeta,
//!     #[serde(default)]
//!     spec: WidgetSpec,
//! }
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! struct WidgetSpec {
//!     color: Option<String>,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), ServerError> {
//!     APIServer::from_args().resource::<Widget>().run().await
//! }
//! ```
//!
//! [`prelude`] has what the common case needs. The modules follow a request's path:
//! [`server`] (options, TLS configuration, health) →
//! [`filters`] → [`endpoints`] (HTTP and encoding) with [`discovery`] and [`openapi`] →
//! [`admission`] → [`registry`] (API semantics: the generic store and strategies) →
//! [`storage`] (keys, revisions, watches). [`aggregator`] registers the server with
//! kube-apiserver's aggregator and prints its deploy manifests. Beside them: [`auth`]
//! (authentication and authorization), [`audit`] (policy, events and their backends),
//! [`flowcontrol`] (API Priority and Fairness, which a filter runs) and [`core_api`] (the
//! client of the core kube-apiserver). [`metrics_apis`] serves the metrics
//! APIs (`metrics.k8s.io`, `custom.metrics.k8s.io`, `external.metrics.k8s.io`) from providers.
//!
//! This crate is the top of four (book: Architecture), and the one a server depends on: it
//! re-exports the layers below it. `extension-apiserver-machinery` is the object model
//! ([`runtime`], [`error`], [`codec`], the selectors, patches and field management under
//! [`registry`]) with [`tls`], [`metrics`], [`lifecycle`] and [`user`]; `extension-apiserver-storage` is [`storage`];
//! `extension-apiserver-macros` is the derive. `extension-apiserver-testing`, a
//! `[dev-dependencies]` crate, starts a real server in your own tests.
#![warn(missing_docs)]

// `::extension_apiserver` names this crate in its own code too (what the derive expands to).
extern crate self as extension_apiserver;

pub mod admission;
pub mod aggregator;
pub mod audit;
pub mod auth;
pub mod core_api;
pub mod discovery;
pub mod endpoints;
pub mod filters;
pub mod flowcontrol;
// The entry points of the fuzz targets (fuzz/), and their regression tests.
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
pub mod metrics_apis;
pub mod openapi;
pub mod prelude;
pub mod registry;
pub mod server;
#[cfg(test)]
mod test_kinds;

// The layers below, under the names a server's code uses (book: Architecture).
pub(crate) use extension_apiserver_machinery::spans;
pub use extension_apiserver_machinery::{codec, error, lifecycle, metrics, runtime, tls, user};
/// Storage: the [`Backend`](storage::Backend) trait, its backends and the watch cache (the
/// crate `extension-apiserver-storage`).
pub use extension_apiserver_storage as storage;

pub use error::{Error, Result, StatusReason};
pub use extension_apiserver_macros::Resource;
pub use registry::strategy::{Strategy, StrategyContext};
pub use runtime::{
    ColumnType, FieldError, FieldErrorType, GarbageCollectionPolicy, PrinterColumn, Resource,
    ResourceInfo, ScaleInfo, Scope, ValidationRule,
};
pub use server::{APIGroup, APIServer};

/// Re-exports for generated code and users.
pub use async_trait::async_trait;
/// axum, whose types the builder's [`route`](APIServer::route) and
/// [`layer`](APIServer::layer) take (`extension_apiserver::axum::routing::get`).
pub use axum;
pub use k8s_openapi;
pub use kube_core;
pub use schemars;
pub use serde;
pub use serde_json;

/// The crate's README (what crates.io shows), compiled as a doc test so its example stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
