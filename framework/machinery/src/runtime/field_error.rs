//! Field errors: one validation failure at one field path, as `k8s.io/apimachinery`'s
//! `field.Error`. A list of them becomes a 422 `Invalid` status with one cause each.

use std::fmt;

/// The kind of a field error; its `reason` string is what clients see in `details.causes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorType {
    /// `FieldValueNotFound`.
    NotFound,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueTypeInvalid`: a value of the wrong type or format, as a structural schema
    /// reports it.
    TypeInvalid,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueTooLong`.
    TooLong,
    /// `FieldValueTooMany`.
    TooMany,
    /// `InternalError`.
    Internal,
}

impl FieldErrorType {
    /// The `reason` of a `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotFound => "FieldValueNotFound",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Invalid => "FieldValueInvalid",
            Self::TypeInvalid => "FieldValueTypeInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::Internal => "InternalError",
        }
    }

    fn phrase(self) -> &'static str {
        match self {
            Self::NotFound => "Not found",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::Internal => "Internal error",
        }
    }
}

/// One validation failure.
///
/// ```
/// use extension_apiserver_machinery::FieldError;
/// let e = FieldError::invalid("spec.referenceType", "Bogus", "must be Flunder or Fischer");
/// assert_eq!(e.to_string(), r#"spec.referenceType: Invalid value: "Bogus": must be Flunder or Fischer"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// What kind of failure.
    pub type_: FieldErrorType,
    /// The field's path, e.g. `spec.reference` or `metadata.labels[app]`.
    pub field: String,
    /// The offending value, rendered for the message (already quoted when a string).
    pub value: Option<String>,
    /// Why it is wrong.
    pub detail: String,
}

impl FieldError {
    fn new(type_: FieldErrorType, field: &str, value: Option<String>, detail: &str) -> Self {
        Self {
            type_,
            field: field.to_string(),
            value,
            detail: detail.to_string(),
        }
    }

    /// `Invalid value: "value": detail`.
    pub fn invalid(field: &str, value: impl fmt::Debug, detail: &str) -> Self {
        Self::new(
            FieldErrorType::Invalid,
            field,
            Some(format!("{value:?}")),
            detail,
        )
    }

    /// `Invalid value: "value": detail` with the reason `FieldValueTypeInvalid`.
    pub fn type_invalid(field: &str, value: impl fmt::Debug, detail: &str) -> Self {
        Self::new(
            FieldErrorType::TypeInvalid,
            field,
            Some(format!("{value:?}")),
            detail,
        )
    }

    /// `Required value: detail`.
    pub fn required(field: &str, detail: &str) -> Self {
        Self::new(FieldErrorType::Required, field, None, detail)
    }

    /// `Forbidden: detail`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::new(FieldErrorType::Forbidden, field, None, detail)
    }

    /// `Duplicate value: "value"`.
    pub fn duplicate(field: &str, value: impl fmt::Debug) -> Self {
        Self::new(
            FieldErrorType::Duplicate,
            field,
            Some(format!("{value:?}")),
            "",
        )
    }

    /// `Unsupported value: "value": supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: impl fmt::Debug, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        let detail = format!("supported values: {}", list.join(", "));
        Self::new(
            FieldErrorType::NotSupported,
            field,
            Some(format!("{value:?}")),
            &detail,
        )
    }

    /// `Too long: may not be more than N bytes`.
    pub fn too_long(field: &str, max: usize) -> Self {
        let detail = format!("may not be more than {max} bytes");
        Self::new(FieldErrorType::TooLong, field, None, &detail)
    }

    /// The message without the field path: `Invalid value: "x": detail`.
    pub fn body(&self) -> String {
        let mut s = self.type_.phrase().to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}
