//! What a server needs in one import: `use extension_apiserver::prelude::*;`.
//!
//! The types to declare a resource (the [`Resource`](macro@crate::Resource) derive and trait,
//! `ObjectMeta`, serde's and schemars' derives), to check it ([`FieldError`]), to serve it
//! ([`APIServer`], [`APIGroup`]), and to serve a computed resource ([`Provider`] with
//! [`async_trait`](macro@async_trait), [`ComputedOptions`], and a [`Reader`] of stored objects
//! from the [`StorageConfig`]), and what the builder's extension points take and give
//! ([`NotReady`] for health checks, [`PostStartContext`] and [`HookError`] for post-start
//! hooks, the [`BuiltServer`] of [`APIServer::build`]). serde's and schemars' derives expand
//! to paths of those crates, so a server still lists `serde` and `schemars` among its
//! dependencies.
//!
//! ```no_run
//! use extension_apiserver::prelude::*;
//!
//! #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
//! pub struct Widget {
//!     #[serde(default)]
//!     pub metadata: ObjectMeta,
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), ServerError> {
//!     APIServer::from_args().resource::<Widget>().run().await
//! }
//! ```

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use schemars::JsonSchema;
pub use serde::{Deserialize, Serialize};

pub use crate::admission::{
    AdmissionPlugin, Attributes, MutatingAdmissionPlugin, Operation, Plugin,
};
pub use crate::error::{Error, StatusReason};
pub use crate::lifecycle::NotReady;
pub use crate::registry::computed::{Change, ComputedOptions, Provider};
pub use crate::registry::store::Reader;
pub use crate::registry::strategy::{Strategy, StrategyContext};
pub use crate::runtime::{
    ColumnType, FieldError, FieldErrorType, GarbageCollectionPolicy, Resource, ResourceInfo, Scope,
};
pub use crate::server::{
    APIGroup, APIServer, BuiltServer, HookError, PostStartContext, ServerError, ServerOptions,
    StorageConfig, VersionBuilder,
};
pub use async_trait::async_trait;
pub use extension_apiserver_macros::Resource;
