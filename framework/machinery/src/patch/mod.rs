//! PATCH bodies applied to stored objects (as `serde_json::Value`s): JSON patch, JSON merge
//! patch and strategic merge patch, with the HTTP code and message kube-apiserver gives for
//! each way a patch can fail.

pub mod json;
pub mod merge;
pub mod schema;
pub mod strategic;

use serde_json::Value;

use crate::runtime::FieldValidation;
use crate::runtime::nesting::{self, TooDeep};

pub use json::{JsonPatch, JsonPatchError, JsonPatchErrorKind, MAX_COPY_BYTES, apply_json_patch};
pub use merge::{apply_merge_patch, merge_patch};
pub use schema::PatchSchema;
pub use strategic::{apply_strategic_merge_patch, strategic_merge_patch};

/// The four patch formats kube-apiserver accepts, told apart by the request's `Content-Type`.
///
/// ```
/// use extension_apiserver_machinery::patch::PatchType;
/// let t = PatchType::from_content_type("application/merge-patch+json; charset=utf-8");
/// assert_eq!(t, Some(PatchType::Merge));
/// assert_eq!(PatchType::StrategicMerge.content_type(), "application/strategic-merge-patch+json");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// RFC 6902 JSON patch: a list of operations.
    Json,
    /// RFC 7386 JSON merge patch: a partial object, `null` deletes.
    Merge,
    /// Kubernetes strategic merge patch: a merge patch whose lists may merge by key.
    StrategicMerge,
    /// Server-side apply (a YAML or JSON configuration owned by a field manager).
    Apply,
}

impl PatchType {
    /// Every patch type, in the order kube-apiserver lists them.
    pub const ALL: [PatchType; 4] = [Self::Json, Self::Merge, Self::StrategicMerge, Self::Apply];

    /// The patch type of a `Content-Type` header value; parameters such as `; charset=utf-8`
    /// are ignored. `None` for any other media type (the server answers 415).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        Self::ALL
            .into_iter()
            .find(|t| t.content_type().eq_ignore_ascii_case(essence))
    }

    /// The media type clients send for this patch type.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json-patch+json",
            Self::Merge => "application/merge-patch+json",
            Self::StrategicMerge => "application/strategic-merge-patch+json",
            Self::Apply => "application/apply-patch+yaml",
        }
    }
}

impl std::fmt::Display for PatchType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.content_type())
    }
}

/// The media types this server accepts for PATCH, as listed in a 415 answer.
const ACCEPTED_PATCH_TYPES: &str = "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json";

/// Why a patch was refused. Each variant carries the HTTP code, `Status` reason and message
/// kube-apiserver answers with for the same failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The body is not a well-formed patch of its type: 400 `BadRequest`.
    #[error("{0}")]
    Malformed(String),
    /// A JSON patch with more operations than kube-apiserver accepts: 413.
    #[error(
        "Request entity too large: The allowed maximum operations in a JSON patch is {max}, got {count}"
    )]
    TooManyOperations {
        /// Operations in the patch.
        count: usize,
        /// The limit, [`json::MAX_OPERATIONS`].
        max: usize,
    },
    /// The patch is well-formed but cannot be applied to this object: 422 `Invalid`.
    /// kube-apiserver sends only the generic sentence; the detail is appended for people.
    #[error("the server rejected our request due to an error in our request: {0}")]
    Invalid(String),
    /// A failure kube-apiserver reports as an unclassified 500 (empty reason) with the bare
    /// message, e.g. a merge list item without its merge key.
    #[error("{0}")]
    Failed(String),
    /// The body's media type is not a patch type: 415 `UnsupportedMediaType`.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: {ACCEPTED_PATCH_TYPES}"
    )]
    UnsupportedMediaType,
    /// `application/apply-patch+yaml`: 415 `UnsupportedMediaType`.
    #[error(
        "server-side apply is not supported yet: the body of the request was in an unknown format - accepted media types include: {ACCEPTED_PATCH_TYPES}"
    )]
    ApplyNotSupported,
}

impl PatchError {
    /// The HTTP status code of the answer.
    pub fn status_code(&self) -> u16 {
        match self {
            Self::Malformed(_) => 400,
            Self::TooManyOperations { .. } => 413,
            Self::Invalid(_) => 422,
            Self::Failed(_) => 500,
            Self::UnsupportedMediaType | Self::ApplyNotSupported => 415,
        }
    }

    /// The `Status.reason`; empty (`StatusReasonUnknown`) where kube-apiserver leaves it empty.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "BadRequest",
            Self::TooManyOperations { .. } => "RequestEntityTooLarge",
            Self::Invalid(_) => "Invalid",
            Self::Failed(_) => "",
            Self::UnsupportedMediaType | Self::ApplyNotSupported => "UnsupportedMediaType",
        }
    }

    /// Whether the client sent a body that is not a valid patch (as opposed to one that does
    /// not apply to the current object).
    pub fn is_malformed(&self) -> bool {
        matches!(self, Self::Malformed(_))
    }
}

impl From<PatchError> for crate::Error {
    fn from(e: PatchError) -> Self {
        crate::Error::new(e.status_code(), e.reason(), e.to_string())
    }
}

/// Applies a PATCH body of `patch_type` to `original` and returns the patched object.
///
/// `schema` drives strategic merge patch (which lists merge by key); the other types ignore it.
/// The result is always a JSON object: a patch that turns the object into anything else is
/// refused with 422.
///
/// ```
/// use extension_apiserver_machinery::patch::{apply_patch, PatchSchema, PatchType};
/// use serde_json::json;
/// let original = json!({"metadata": {"name": "a", "finalizers": ["x"]}});
/// let body = br#"{"metadata": {"finalizers": ["x", "y"]}}"#;
/// let patched = apply_patch(PatchType::StrategicMerge, &original, body, &PatchSchema::empty()).unwrap();
/// assert_eq!(patched["metadata"]["finalizers"], json!(["x", "y"]));
/// ```
pub fn apply_patch(
    patch_type: PatchType,
    original: &Value,
    patch_body: &[u8],
    schema: &PatchSchema,
) -> Result<Value, PatchError> {
    if patch_type == PatchType::Apply {
        return Err(PatchError::ApplyNotSupported);
    }
    DecodedPatch::decode(patch_type, patch_body)?.apply(original, schema)
}

/// A PATCH body decoded once, ready to apply to the object of each attempt of an update.
///
/// ```
/// use extension_apiserver_machinery::patch::{DecodedPatch, PatchSchema, PatchType};
/// use serde_json::json;
/// let patch = DecodedPatch::decode(PatchType::Merge, br#"{"a": null, "b": 2}"#).unwrap();
/// let patched = patch.apply(&json!({"a": 1}), &PatchSchema::empty()).unwrap();
/// assert_eq!(patched, json!({"b": 2}));
/// ```
#[derive(Clone, Debug)]
pub enum DecodedPatch {
    /// JSON patch operations.
    Json(JsonPatch),
    /// A JSON merge patch (an object or a list).
    Merge(Value),
    /// A strategic merge patch.
    StrategicMerge(Value),
}

impl DecodedPatch {
    /// Decodes `body` as a patch of `patch_type`, with the errors [`apply_patch`] gives.
    pub fn decode(patch_type: PatchType, body: &[u8]) -> Result<Self, PatchError> {
        Self::from_value(patch_type, decode_json(patch_type, body)?)
    }

    /// A body already decoded into JSON as a patch of `patch_type`.
    pub fn from_value(patch_type: PatchType, value: Value) -> Result<Self, PatchError> {
        match patch_type {
            PatchType::Json => json::json_patch_from_value(value).map(Self::Json),
            PatchType::Merge => merge::check_merge_patch(value).map(Self::Merge),
            PatchType::StrategicMerge => Ok(Self::StrategicMerge(value)),
            PatchType::Apply => Err(PatchError::ApplyNotSupported),
        }
    }

    /// Applies the patch to `original` (see [`apply_patch`]).
    pub fn apply(&self, original: &Value, schema: &PatchSchema) -> Result<Value, PatchError> {
        let patched = match self {
            Self::Json(patch) => json::apply_operations(original, patch)?,
            Self::Merge(patch) => {
                let mut patched = original.clone();
                merge_patch(&mut patched, patch);
                patched
            }
            Self::StrategicMerge(patch) => strategic_merge_patch(original, patch, schema)?,
        };
        if !patched.is_object() {
            return Err(PatchError::Invalid(format!(
                "the patched object must be a JSON object, not {}",
                kind_of(&patched)
            )));
        }
        Ok(patched)
    }
}

/// Parses a JSON body of a patch of `patch_type`, its nesting checked first.
pub(crate) fn decode_json(patch_type: PatchType, body: &[u8]) -> Result<Value, PatchError> {
    nesting::check_json(body)
        .map_err(|e: TooDeep| too_deep(patch_type, FieldValidation::default(), e))?;
    serde_json::from_slice(body).map_err(|e| malformed(patch_type, e))
}

/// A patch body that is not JSON, in the words this server has long used for each type.
pub fn malformed(patch_type: PatchType, e: impl std::fmt::Display) -> PatchError {
    PatchError::Malformed(match patch_type {
        PatchType::Json => format!("error decoding patch: {e}"),
        PatchType::Merge => format!("{}: {e}", merge::BAD_MERGE_PATCH),
        _ => e.to_string(),
    })
}

/// A patch body nested past the decoder's limit, answered as kube-apiserver's patch handler
/// answers its decoder's error: for JSON and merge patches decoded strictly (`Warn` and
/// `Strict`) `error decoding patch: …`, for a merge patch decoded by json-patch (`Ignore`)
/// its `Invalid JSON Patch`, otherwise the bare error.
pub fn too_deep(
    patch_type: PatchType,
    validation: FieldValidation,
    e: impl std::fmt::Display,
) -> PatchError {
    let strict = validation != FieldValidation::Ignore;
    PatchError::Malformed(match patch_type {
        PatchType::Json | PatchType::Merge if strict => format!("error decoding patch: {e}"),
        PatchType::Merge => merge::BAD_MERGE_PATCH.to_string(),
        _ => e.to_string(),
    })
}

/// The strict decoding errors of a patch body itself, as kube's strict decode of it
/// (`kjson.UnmarshalStrict`) finds them: its duplicate fields, and for a JSON patch the
/// members of an operation that are none of `op`, `path`, `from` and `value` (both then
/// prefixed `json patch`). At most 100, as that decoder keeps.
pub fn body_strict_errors(
    patch_type: PatchType,
    body: &Value,
    duplicates: &[String],
) -> Vec<String> {
    const MAX: usize = 100;
    let prefix = if patch_type == PatchType::Json {
        "json patch "
    } else {
        ""
    };
    let mut errors: Vec<String> = duplicates
        .iter()
        .map(|path| format!("{prefix}duplicate field {path:?}"))
        .collect();
    if patch_type == PatchType::Json {
        let ops = body.as_array().map(Vec::as_slice).unwrap_or_default();
        for (i, op) in ops.iter().enumerate() {
            let Some(op) = op.as_object() else { continue };
            for key in op.keys() {
                if !matches!(key.as_str(), "op" | "path" | "from" | "value") {
                    let path = format!("[{i}].{key}");
                    errors.push(format!("{prefix}unknown field {path:?}"));
                }
            }
            if errors.len() >= MAX {
                break;
            }
        }
    }
    errors.truncate(MAX);
    errors
}

/// "an array", "a string", …: for messages about a value of the wrong kind.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_round_trip() {
        for t in PatchType::ALL {
            assert_eq!(PatchType::from_content_type(t.content_type()), Some(t));
            assert_eq!(t.to_string(), t.content_type());
        }
    }

    #[test]
    fn content_type_parameters_and_case_are_ignored() {
        let t = PatchType::from_content_type("application/json-patch+json; charset=utf-8");
        assert_eq!(t, Some(PatchType::Json));
        let t = PatchType::from_content_type(" Application/Strategic-Merge-Patch+JSON ;x=y");
        assert_eq!(t, Some(PatchType::StrategicMerge));
    }

    #[test]
    fn other_media_types_are_not_patches() {
        for ct in [
            "application/json",
            "application/yaml",
            "",
            "application/merge-patch",
        ] {
            assert_eq!(PatchType::from_content_type(ct), None, "{ct}");
        }
    }

    #[test]
    fn apply_is_refused_with_415() {
        let e =
            apply_patch(PatchType::Apply, &json!({}), b"{}", &PatchSchema::empty()).unwrap_err();
        assert_eq!(e.status_code(), 415);
        assert_eq!(e.reason(), "UnsupportedMediaType");
        assert!(e.to_string().contains("server-side apply is not supported"));
    }

    #[test]
    fn dispatches_each_patch_type() {
        let original = json!({"a": 1, "list": [1, 2]});
        let schema = PatchSchema::empty();
        let json_patch = br#"[{"op": "replace", "path": "/a", "value": 2}]"#;
        let patched = apply_patch(PatchType::Json, &original, json_patch, &schema).unwrap();
        assert_eq!(patched, json!({"a": 2, "list": [1, 2]}));
        let patched = apply_patch(PatchType::Merge, &original, br#"{"a": null}"#, &schema).unwrap();
        assert_eq!(patched, json!({"list": [1, 2]}));
        let body = br#"{"list": [3]}"#;
        let patched = apply_patch(PatchType::StrategicMerge, &original, body, &schema).unwrap();
        assert_eq!(patched, json!({"a": 1, "list": [3]}));
    }

    #[test]
    fn a_patch_must_leave_an_object() {
        let schema = PatchSchema::empty();
        let body = br#"[{"op": "replace", "path": "", "value": [1]}]"#;
        let e = apply_patch(PatchType::Json, &json!({}), body, &schema).unwrap_err();
        assert_eq!(e.status_code(), 422);
        assert!(
            e.to_string()
                .ends_with("must be a JSON object, not an array"),
            "{e}"
        );
        let e = apply_patch(PatchType::Merge, &json!({}), b"[1]", &schema).unwrap_err();
        assert_eq!(e.status_code(), 422);
    }

    #[test]
    fn errors_carry_kube_codes_and_reasons() {
        let cases = [
            (PatchError::Malformed("m".into()), 400, "BadRequest"),
            (
                PatchError::TooManyOperations { count: 2, max: 1 },
                413,
                "RequestEntityTooLarge",
            ),
            (PatchError::Invalid("i".into()), 422, "Invalid"),
            (PatchError::Failed("f".into()), 500, ""),
            (
                PatchError::UnsupportedMediaType,
                415,
                "UnsupportedMediaType",
            ),
        ];
        for (e, code, reason) in cases {
            assert_eq!((e.status_code(), e.reason()), (code, reason), "{e:?}");
            let api = crate::Error::from(e.clone());
            assert_eq!(
                (api.code(), api.reason(), api.message()),
                (code, reason, &*e.to_string())
            );
        }
        assert!(PatchError::Malformed("m".into()).is_malformed());
        assert!(!PatchError::Invalid("i".into()).is_malformed());
    }

    #[test]
    fn error_messages_keep_kube_wording() {
        let e = PatchError::Invalid("test failed".into());
        assert_eq!(
            e.to_string(),
            "the server rejected our request due to an error in our request: test failed"
        );
        let e = PatchError::TooManyOperations {
            count: 10001,
            max: 10000,
        };
        assert_eq!(
            e.to_string(),
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        assert_eq!(
            PatchError::UnsupportedMediaType.to_string(),
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, \
             application/strategic-merge-patch+json"
        );
    }
}
