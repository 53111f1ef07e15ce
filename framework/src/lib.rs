//! # apiserver
//!
//! A framework for Kubernetes aggregated API servers.
#![warn(missing_docs)]

pub mod registry;
pub mod runtime;
pub mod storage;

pub use apiserver_macros::Resource;
pub use runtime::{FieldError, FieldErrorType, PrinterColumn, Resource, ResourceInfo, Scope};

/// Re-exports for generated code and users.
pub use k8s_openapi;
pub use kube_core;
pub use schemars;
pub use serde;
pub use serde_json;
