//! Object model: the [`Resource`] trait, static type information and field errors.

pub mod convert;
pub mod duration;
pub mod field_error;
pub mod jsonpath;
pub mod nesting;
pub mod object;
pub mod resource;
#[cfg(test)]
pub(crate) mod test_kinds;

pub use convert::{ConversionError, Convertible};
pub use field_error::{FieldError, FieldErrorType};
pub use resource::{
    ColumnType, GarbageCollectionPolicy, PrinterColumn, Resource, ResourceInfo, ScaleInfo, Scope,
};
