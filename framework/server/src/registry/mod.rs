//! API semantics: REST storage traits, the generic store, strategies and group assembly.

pub mod computed;
pub mod context;
pub mod converted;
pub mod group;
pub mod options;
pub mod rest;
pub(crate) mod schema;
pub mod schema_validation;
pub mod served;
pub mod store;
pub(crate) mod stores;
pub mod strategy;
pub mod subresource;

// The machinery's parts of API semantics (apimachinery and structured-merge-diff in
// Kubernetes), where the registry's code names them.
pub(crate) use extension_apiserver_machinery::schema_errors;
pub use extension_apiserver_machinery::{fieldmanager, patch, selector, validation, warning};
