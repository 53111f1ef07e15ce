//! The `fieldValidation` option of writes: what a decoder does with unknown and duplicate
//! fields.

/// Server-side field validation of request bodies (`fieldValidation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Unknown or duplicate fields are dropped silently.
    Ignore,
    /// Dropped, with a `Warning` header (the default).
    #[default]
    Warn,
    /// Rejected, as kube-apiserver rejects them: 400 for a create or update body, 422
    /// `Invalid` (at the field `patch`) for a patch.
    Strict,
}
