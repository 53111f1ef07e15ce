//! # apiserver
//!
//! A framework for Kubernetes aggregated API servers.
#![warn(missing_docs)]

pub mod auth;
pub mod discovery;
pub mod endpoints;
pub mod error;
pub mod filters;
pub mod openapi;
pub mod registry;
pub mod runtime;
pub mod server;
pub mod storage;
pub mod testing;

pub use apiserver_macros::Resource;
pub use error::{Error, Result};
pub use runtime::{FieldError, FieldErrorType, PrinterColumn, Resource, ResourceInfo, Scope};
pub use server::{ApiGroup, ApiServer};

/// Re-exports for generated code and users.
pub use k8s_openapi;
pub use kube_core;
pub use schemars;
pub use serde;
pub use serde_json;
