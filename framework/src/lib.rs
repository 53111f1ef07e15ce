//! # apiserver
//!
//! A framework for Kubernetes **aggregated API servers**: the extension servers that
//! kube-apiserver's aggregator proxies to for an API group. Write a type, derive
//! [`Resource`](macro@Resource), add it to an [`APIGroup`], run: kubectl, client-go and kube-rs
//! treat the server like kube-apiserver.
//!
//! ```no_run
//! use apiserver::prelude::*;
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
//!     APIServer::from_args()
//!         .group(APIGroup::new("example.com").version("v1", |v| v.resource::<Widget>()))
//!         .run()
//!         .await
//! }
//! ```
//!
//! [`prelude`] has what the common case needs. The modules follow a request's path:
//! [`server`] (options, TLS configuration, health) →
//! [`filters`] → [`endpoints`] (HTTP and encoding) with [`discovery`] and [`openapi`] →
//! [`admission`] → [`registry`] (API semantics: the generic store and strategies) →
//! [`storage`] (keys, revisions, watches). [`aggregator`] registers the server with
//! kube-apiserver's aggregator and prints its deploy manifests. Below every stage: [`tls`]
//! (certificates and keys), [`audit`] (policy, events and their backends), [`lifecycle`] (shutdown, readiness), [`metrics`] (what `/metrics`
//! serves) and [`core_api`] (the client of the core kube-apiserver). [`testing`] starts a real server for your own tests.
#![warn(missing_docs)]

pub mod admission;
pub mod aggregator;
pub mod audit;
pub mod auth;
pub mod core_api;
pub mod discovery;
pub mod endpoints;
pub mod error;
pub mod filters;
#[cfg(any(fuzzing, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod lifecycle;
pub mod metrics;
pub mod openapi;
pub mod prelude;
pub mod registry;
pub mod runtime;
pub mod server;
mod spans;
pub mod storage;
#[cfg(any(test, doc, feature = "testing"))]
pub mod testing;
pub mod tls;

pub use apiserver_macros::Resource;
pub use error::{Error, Result, StatusReason};
pub use registry::strategy::{Strategy, StrategyContext};
pub use runtime::{
    ColumnType, FieldError, FieldErrorType, GarbageCollectionPolicy, PrinterColumn, Resource,
    ResourceInfo, ScaleInfo, Scope,
};
pub use server::{APIGroup, APIServer};

/// Re-exports for generated code and users.
pub use async_trait::async_trait;
/// axum, whose types the builder's [`route`](APIServer::route) and
/// [`layer`](APIServer::layer) take (`apiserver::axum::routing::get`).
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
