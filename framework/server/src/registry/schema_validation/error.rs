//! Why a schema cannot be enforced.

use std::fmt;

/// A schema that cannot be enforced: a rule that does not compile or costs too much, a
/// `pattern` that is no regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SchemaError {
    kind: Option<String>,
    path: String,
    message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(kind) = &self.kind {
            write!(f, "the schema of {kind}: ")?;
        }
        let at = if self.path.is_empty() {
            "<root>"
        } else {
            &self.path
        };
        write!(f, "{at}: {}", self.message)
    }
}

impl SchemaError {
    pub(super) fn new(path: &str, message: impl Into<String>) -> Self {
        Self {
            kind: None,
            path: path.to_string(),
            message: message.into(),
        }
    }

    /// The same error, naming the kind whose schema it is.
    pub(super) fn for_kind(mut self, kind: &str) -> Self {
        self.kind = Some(kind.to_string());
        self
    }
}
