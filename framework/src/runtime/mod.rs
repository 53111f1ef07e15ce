//! Object model: the [`Resource`] trait, static type information and field errors.

pub mod field_error;
pub mod resource;

pub use field_error::{FieldError, FieldErrorType};
pub use resource::{PrinterColumn, Resource, ResourceInfo, Scope};
