//! Label and field selectors as clients send them in `labelSelector` / `fieldSelector`:
//! parsed, matched and printed exactly as kube-apiserver does, so the same query selects
//! the same objects and fails with the same message.

pub mod field;
pub mod label;

pub use field::{FieldOperator, FieldRequirement, FieldSelector, field_value};
pub use label::{LabelSelector, Operator, Requirement};

/// A selector that does not parse or uses an unsupported field. The message is kube's;
/// the request gets a 400 `BadRequest` carrying it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    message: String,
}

impl SelectorError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message, as kube words it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Writes requirements joined by `,`, the form both kinds of selector print in.
fn write_joined(
    f: &mut std::fmt::Formatter<'_>,
    items: &[impl std::fmt::Display],
) -> std::fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}
