//! API semantics: REST storage traits, the generic store, strategies and group assembly.

pub mod computed;
pub mod context;
pub mod converted;
pub mod fieldmanager;
pub mod group;
pub mod options;
pub mod patch;
pub mod rest;
pub(crate) mod schema_errors;
pub mod selector;
pub mod served;
pub mod store;
pub mod strategy;
pub mod validation;
pub mod warning;
