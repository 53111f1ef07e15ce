//! RFC 6902 JSON patch (`application/json-patch+json`): a list of add, remove, replace, move,
//! copy and test operations, applied all or nothing. Built on the `json-patch` crate; this
//! module adds kube-apiserver's limits and error codes.

use json_patch::{Patch, PatchOperation};
use serde_json::Value;

use super::{PatchError, PatchType};

/// The most operations one JSON patch may hold, as in kube-apiserver (more → 413).
pub const MAX_OPERATIONS: usize = 10_000;

/// Parses a JSON patch body. A body that is not a list of valid operations is 400.
pub fn parse_json_patch(body: &[u8]) -> Result<Patch, PatchError> {
    let value = super::decode_json(PatchType::Json, body)?;
    json_patch_from_value(value)
}

/// A decoded JSON patch body as operations (400 when it is not a list of valid ones, 413
/// past [`MAX_OPERATIONS`]).
pub(crate) fn json_patch_from_value(value: Value) -> Result<Patch, PatchError> {
    let patch: Patch = serde_json::from_value(value)
        .map_err(|e| PatchError::Malformed(format!("error decoding patch: {e}")))?;
    if patch.0.len() > MAX_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            count: patch.0.len(),
            max: MAX_OPERATIONS,
        });
    }
    Ok(patch)
}

/// Applies the JSON patch in `body` to `original`. The patch applies as a whole or not at
/// all; an operation that fails (a missing path, a `test` that does not match) is 422.
///
/// ```
/// use extension_apiserver_machinery::patch::apply_json_patch;
/// use serde_json::json;
/// let body = br#"[{"op": "test", "path": "/n", "value": 1}, {"op": "replace", "path": "/n", "value": 2}]"#;
/// assert_eq!(apply_json_patch(&json!({"n": 1}), body).unwrap(), json!({"n": 2}));
/// assert_eq!(apply_json_patch(&json!({"n": 3}), body).unwrap_err().status_code(), 422);
/// ```
pub fn apply_json_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    apply_operations(original, &parse_json_patch(body)?)
}

/// Applies parsed operations to `original` (see [`apply_json_patch`]).
pub(crate) fn apply_operations(original: &Value, patch: &Patch) -> Result<Value, PatchError> {
    let mut patched = original.clone();
    // Working on a copy makes the crate's undo log unnecessary: on failure the copy is dropped.
    json_patch::patch_unsafe(&mut patched, &patch.0).map_err(|e| {
        let op = patch.0.get(e.operation).map_or("unknown", op_name);
        PatchError::Invalid(format!(
            "json patch {op} operation {} failed at path \"{}\": {}",
            e.operation, e.path, e.kind
        ))
    })?;
    Ok(patched)
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(original: Value, ops: Value) -> Result<Value, PatchError> {
        apply_json_patch(&original, ops.to_string().as_bytes())
    }

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "labels": {"app": "a"}}, "spec": {"list": [1, 2, 3]}})
    }

    #[test]
    fn add_sets_members_and_inserts_into_lists() {
        let ops = json!([
            {"op": "add", "path": "/metadata/labels/tier", "value": "web"},
            {"op": "add", "path": "/spec/list/1", "value": 9},
            {"op": "add", "path": "/spec/list/-", "value": 4},
        ]);
        let patched = apply(pod(), ops).unwrap();
        assert_eq!(
            patched["metadata"]["labels"],
            json!({"app": "a", "tier": "web"})
        );
        assert_eq!(patched["spec"]["list"], json!([1, 9, 2, 3, 4]));
    }

    #[test]
    fn remove_and_replace() {
        let ops = json!([
            {"op": "remove", "path": "/metadata/labels/app"},
            {"op": "remove", "path": "/spec/list/0"},
            {"op": "replace", "path": "/metadata/name", "value": "q"},
        ]);
        let patched = apply(pod(), ops).unwrap();
        assert_eq!(patched["metadata"], json!({"name": "q", "labels": {}}));
        assert_eq!(patched["spec"]["list"], json!([2, 3]));
    }

    #[test]
    fn move_and_copy() {
        let ops = json!([
            {"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"},
            {"op": "move", "from": "/spec/list", "path": "/spec/items"},
        ]);
        let patched = apply(pod(), ops).unwrap();
        assert_eq!(patched["metadata"]["annotations"], json!({"app": "a"}));
        assert_eq!(patched["spec"], json!({"items": [1, 2, 3]}));
    }

    #[test]
    fn a_passing_test_changes_nothing() {
        let ops = json!([{"op": "test", "path": "/spec/list", "value": [1, 2, 3]}]);
        assert_eq!(apply(pod(), ops).unwrap(), pod());
    }

    #[test]
    fn a_failing_test_is_422_and_nothing_applies() {
        let ops = json!([
            {"op": "replace", "path": "/metadata/name", "value": "q"},
            {"op": "test", "path": "/metadata/name", "value": "p"},
        ]);
        let e = apply(pod(), ops).unwrap_err();
        assert_eq!(e.status_code(), 422);
        assert_eq!(e.reason(), "Invalid");
        let text = e.to_string();
        assert!(text.starts_with("the server rejected our request due to an error in our request"));
        assert!(
            text.contains("test operation 1 failed at path \"/metadata/name\""),
            "{text}"
        );
    }

    #[test]
    fn operations_on_missing_paths_are_422() {
        for ops in [
            json!([{"op": "remove", "path": "/spec/missing"}]),
            json!([{"op": "replace", "path": "/nothing/here", "value": 1}]),
            json!([{"op": "add", "path": "/a/b/c", "value": 1}]),
            json!([{"op": "add", "path": "/spec/list/7", "value": 1}]),
            json!([{"op": "move", "from": "/nope", "path": "/x"}]),
            json!([{"op": "copy", "from": "/spec", "path": "/spec/list/x/y"}]),
        ] {
            let e = apply(pod(), ops.clone()).unwrap_err();
            assert_eq!(e.status_code(), 422, "{ops}: {e}");
        }
    }

    #[test]
    fn malformed_patches_are_400() {
        for body in [
            "not json",
            r#"{"op": "add", "path": "/a", "value": 1}"#,
            r#"[{"op": "frobnicate", "path": "/a"}]"#,
            r#"[{"op": "add", "value": 1}]"#,
            r#"[{"op": "add", "path": "no-slash", "value": 1}]"#,
        ] {
            let e = apply_json_patch(&pod(), body.as_bytes()).unwrap_err();
            assert_eq!(e.status_code(), 400, "{body}: {e}");
            assert!(e.is_malformed());
        }
    }

    #[test]
    fn too_many_operations_is_413() {
        let op = json!({"op": "test", "path": "/metadata/name", "value": "p"});
        let ops = Value::Array(vec![op; MAX_OPERATIONS + 1]);
        let e = apply(pod(), ops).unwrap_err();
        assert_eq!(
            e,
            PatchError::TooManyOperations {
                count: MAX_OPERATIONS + 1,
                max: MAX_OPERATIONS
            }
        );
        assert_eq!(e.status_code(), 413);
    }

    #[test]
    fn an_empty_patch_is_the_identity() {
        assert_eq!(apply(pod(), json!([])).unwrap(), pod());
    }
}
