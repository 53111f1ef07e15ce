//! Object model: the [`Resource`] trait, static type information and field errors.

pub mod convert;
pub mod duration;
pub mod field_error;
pub mod field_validation;
pub mod jsonpath;
pub mod kind;
pub mod nesting;
pub mod object;
pub mod resource;

pub use convert::{ConversionError, Convertible};
pub use field_error::{FieldError, FieldErrorType};
pub use field_validation::FieldValidation;
pub use kind::ObjectKind;
pub use resource::{
    ColumnType, GarbageCollectionPolicy, PrinterColumn, Resource, ResourceInfo, ScaleInfo, Scope,
    ValidationRule,
};
