//! RFC 6902 JSON patch (`application/json-patch+json`): a list of add, remove, replace, move,
//! copy and test operations, applied all or nothing.
//!
//! kube-apiserver applies these with `gopkg.in/evanphx/json-patch.v4` (the PATCH verb in
//! `endpoints/handlers/patch.go` and MutatingAdmissionPolicy's `patch/json_patch.go`); this is
//! our own applier that walks a document as v4 does (`findObject`, `decodePatchKey`, its array
//! index rules with negative indices off, the copy size limit kube sets) with v4's quirks (a
//! `replace` or `copy` of a missing object key, a `test` against `null`) and error texts (the
//! Go `%w` chain: `...: missing value`, `...: invalid index referenced`, `...: test failed`).

use serde_json::{Map, Value};

use super::{PatchError, PatchType};

/// The most operations one JSON patch may hold, as in kube-apiserver (more → 413).
pub const MAX_OPERATIONS: usize = 10_000;

/// How many bytes the `copy` operations of one patch may add, as kube-apiserver sets v4's
/// `AccumulatedCopySizeLimit` (`JSONPatchMaxCopyBytes`, 3 MiB, `server/config.go`).
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// A decoded JSON patch: its operations as the objects they were sent as. As v4's
/// `DecodePatch`, decoding only checks the shape (a list of objects); an operation with an
/// unknown `op` or a bad `path` fails when it is applied.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JsonPatch(pub Vec<Map<String, Value>>);

impl JsonPatch {
    /// The number of operations.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the patch has no operations.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Applies the operations to a copy of `document` as v4's `Patch.Apply` does, with
    /// [`MAX_COPY_BYTES`]. `document` must be an object or a list.
    pub fn apply(&self, document: &Value) -> Result<Value, JsonPatchError> {
        self.apply_with_copy_limit(document, MAX_COPY_BYTES)
    }

    /// [`JsonPatch::apply`] with another copy size limit (0: none, as v4).
    pub fn apply_with_copy_limit(
        &self,
        document: &Value,
        copy_limit: usize,
    ) -> Result<Value, JsonPatchError> {
        if !document.is_object() && !document.is_array() {
            return Err(JsonPatchError::other(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.partialDoc",
                go_kind(document)
            )));
        }
        let mut doc = document.clone();
        let mut copied = 0usize;
        for op in &self.0 {
            let kind = op.get("op").and_then(Value::as_str).unwrap_or("unknown");
            match kind {
                "add" => add(&mut doc, op)?,
                "remove" => remove(&mut doc, op)?,
                "replace" => replace(&mut doc, op)?,
                "move" => move_(&mut doc, op)?,
                "test" => test(&doc, op)?,
                "copy" => copy(&mut doc, op, &mut copied, copy_limit)?,
                other => return Err(JsonPatchError::other(format!("Unexpected kind: {other}"))),
            }
        }
        Ok(doc)
    }
}

/// Why a JSON patch did not apply; `Display` is v4's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JsonPatchError {
    kind: JsonPatchErrorKind,
    message: String,
}

/// The v4 sentinel a [`JsonPatchError`] wraps (Go's `errors.Is`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonPatchErrorKind {
    /// `ErrMissing`: a path or field that is not there.
    Missing,
    /// `ErrInvalidIndex`: a list index out of range or negative.
    InvalidIndex,
    /// `ErrTestFailed`: a `test` operation whose value differs.
    TestFailed,
    /// The `copy` operations added more than the copy size limit.
    CopySizeExceeded,
    /// Anything else (an unknown `op`, a list index that is not a number).
    Other,
}

impl JsonPatchError {
    fn new(kind: JsonPatchErrorKind, message: String) -> Self {
        let suffix = match kind {
            JsonPatchErrorKind::Missing => ": missing value",
            JsonPatchErrorKind::InvalidIndex => ": invalid index referenced",
            JsonPatchErrorKind::TestFailed => ": test failed",
            _ => "",
        };
        Self {
            kind,
            message: message + suffix,
        }
    }

    fn other(message: String) -> Self {
        Self::new(JsonPatchErrorKind::Other, message)
    }

    /// Wraps this error in v4's `fmt.Errorf("<prefix>: %w", err)`, keeping its kind.
    fn wrap(self, prefix: String) -> Self {
        Self {
            kind: self.kind,
            message: format!("{prefix}: {}", self.message),
        }
    }

    /// The sentinel this error wraps.
    pub fn kind(&self) -> JsonPatchErrorKind {
        self.kind
    }

    /// Whether a `test` operation failed (v4's `ErrTestFailed`).
    pub fn is_test_failed(&self) -> bool {
        self.kind == JsonPatchErrorKind::TestFailed
    }
}

fn go_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// v4's `Operation.Path`/`From`: the field as a string; `missing` is the error for an absent
/// (or null) field, a non-string is Go's unmarshal error.
fn field<'a>(op: &'a Map<String, Value>, name: &str) -> Result<&'a str, JsonPatchError> {
    match op.get(name) {
        None | Some(Value::Null) => Err(JsonPatchError::new(
            JsonPatchErrorKind::Missing,
            if name == "path" {
                "operation missing path field".to_string()
            } else {
                "operation, missing from field".to_string()
            },
        )),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(JsonPatchError::other(format!(
            "json: cannot unmarshal {} into Go value of type string",
            go_kind(other)
        ))),
    }
}

/// v4's `decodePatchKey`: `~1` is `/`, then `~0` is `~`.
fn decode_key(part: &str) -> String {
    part.replace("~1", "/").replace("~0", "~")
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits in an `int`.
fn atoi(key: &str) -> Result<i64, JsonPatchError> {
    let digits = key.strip_prefix(['+', '-']).unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(JsonPatchError::other(format!(
            "strconv.Atoi: parsing {key:?}: invalid syntax"
        )));
    }
    key.parse::<i64>().map_err(|_| {
        JsonPatchError::other(format!("strconv.Atoi: parsing {key:?}: value out of range"))
    })
}

fn invalid_index(idx: i64) -> JsonPatchError {
    JsonPatchError::new(
        JsonPatchErrorKind::InvalidIndex,
        format!("Unable to access invalid index: {idx}"),
    )
}

/// v4's `findObject` split: the segments leading to the parent and the last one decoded;
/// `None` when `path` has no `/`. As in v4 whatever precedes the first `/` is ignored.
fn split_path(path: &str) -> Option<(Vec<&str>, String)> {
    let split: Vec<&str> = path.split('/').collect();
    if split.len() < 2 {
        return None;
    }
    let key = decode_key(split[split.len() - 1]);
    Some((split[1..split.len() - 1].to_vec(), key))
}

/// One step of v4's `findObject`: the member or element `part` names, when it is an object
/// or a list (a missing, null or scalar one, or a bad index, ends the walk).
fn step_index(current: &Value, part: &str) -> Option<Step> {
    let step = match current {
        Value::Object(map) => {
            let key = decode_key(part);
            map.get(&key)?;
            Step::Key(key)
        }
        Value::Array(items) => {
            let idx = usize::try_from(atoi(&decode_key(part)).ok()?).ok()?;
            items.get(idx)?;
            Step::Index(idx)
        }
        _ => return None,
    };
    Some(step)
}

enum Step {
    Key(String),
    Index(usize),
}

fn child_mut<'a>(current: &'a mut Value, step: &Step) -> &'a mut Value {
    match step {
        Step::Key(key) => &mut current[key.as_str()],
        Step::Index(idx) => &mut current[*idx],
    }
}

fn is_container(value: &Value) -> bool {
    value.is_object() || value.is_array()
}

/// v4's `findObject`: the object or list holding the last segment of `path`, and that
/// segment decoded. `None` when `path` has no `/`, or a segment on the way is missing, null,
/// a scalar or not a valid index.
fn find_object<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let (parts, key) = split_path(path)?;
    let mut current = doc;
    for part in parts {
        let step = step_index(current, part)?;
        let next = child_mut(current, &step);
        if !is_container(next) {
            return None;
        }
        current = next;
    }
    Some((current, key))
}

/// [`find_object`] for reading.
fn find_object_ref<'a>(doc: &'a Value, path: &str) -> Option<(&'a Value, String)> {
    let (parts, key) = split_path(path)?;
    let mut current = doc;
    for part in parts {
        let next = match step_index(current, part)? {
            Step::Key(key) => &current[key.as_str()],
            Step::Index(idx) => &current[idx],
        };
        if !is_container(next) {
            return None;
        }
        current = next;
    }
    Some((current, key))
}

/// v4's `container.get`: an object's missing key is `Ok(None)` (as a null member), a list
/// index must be in range.
fn get(container: &Value, key: &str) -> Result<Option<Value>, JsonPatchError> {
    match container {
        Value::Object(map) => Ok(map.get(key).cloned()),
        Value::Array(items) => {
            let idx = atoi(key)?;
            if idx < 0 || idx >= items.len() as i64 {
                return Err(invalid_index(idx));
            }
            Ok(Some(items[idx as usize].clone()))
        }
        _ => Ok(None),
    }
}

/// v4's `container.add`: sets an object member; inserts into a list (`-` appends).
fn add_to(container: &mut Value, key: &str, value: Value) -> Result<(), JsonPatchError> {
    match container {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            let idx = atoi(key)
                .map_err(|e| e.wrap(format!("value was not a proper array index: '{key}'")))?;
            if idx > items.len() as i64 || idx < 0 {
                return Err(invalid_index(idx));
            }
            items.insert(idx as usize, value);
        }
        _ => {}
    }
    Ok(())
}

/// v4's `container.remove`.
fn remove_from(container: &mut Value, key: &str) -> Result<Option<Value>, JsonPatchError> {
    match container {
        Value::Object(map) => match map.remove(key) {
            Some(v) => Ok(Some(v)),
            None => Err(JsonPatchError::new(
                JsonPatchErrorKind::Missing,
                format!("Unable to remove nonexistent key: {key}"),
            )),
        },
        Value::Array(items) => {
            let idx = atoi(key)?;
            if idx >= items.len() as i64 || idx < 0 {
                return Err(invalid_index(idx));
            }
            Ok(Some(items.remove(idx as usize)))
        }
        _ => Ok(None),
    }
}

fn missing(message: String) -> JsonPatchError {
    JsonPatchError::new(JsonPatchErrorKind::Missing, message)
}

/// v4's `Operation.value`: an absent `value` is nil, which v4 writes as `null`.
fn value_of(op: &Map<String, Value>) -> Value {
    op.get("value").cloned().unwrap_or(Value::Null)
}

fn add(doc: &mut Value, op: &Map<String, Value>) -> Result<(), JsonPatchError> {
    let path = field(op, "path")
        .map_err(|_| missing("add operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(missing(format!(
            "add operation does not apply: doc is missing path: \"{path}\""
        )));
    };
    add_to(con, &key, value_of(op)).map_err(|e| e.wrap(format!("error in add for path: '{path}'")))
}

fn remove(doc: &mut Value, op: &Map<String, Value>) -> Result<(), JsonPatchError> {
    let path = field(op, "path")
        .map_err(|_| missing("remove operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(missing(format!(
            "remove operation does not apply: doc is missing path: \"{path}\""
        )));
    };
    remove_from(con, &key)
        .map(drop)
        .map_err(|e| e.wrap(format!("error in remove for path: '{path}'")))
}

fn replace(doc: &mut Value, op: &Map<String, Value>) -> Result<(), JsonPatchError> {
    let path = field(op, "path")
        .map_err(|e| e.wrap("replace operation failed to decode path".to_string()))?;
    if path.is_empty() {
        // The whole document; v4 formats its nil error with `%w`.
        let value = value_of(op);
        if !value.is_object() && !value.is_array() {
            return Err(JsonPatchError::other(
                "replace operation value must be object or array: %!w(<nil>)".to_string(),
            ));
        }
        *doc = value;
        return Ok(());
    }
    let Some((con, key)) = find_object(doc, path) else {
        return Err(missing(format!(
            "replace operation does not apply: doc is missing path: {path}"
        )));
    };
    if get(con, &key).is_err() {
        return Err(missing(format!(
            "replace operation does not apply: doc is missing key: {path}"
        )));
    }
    // v4 quirk: an object's missing key reads as null, so `replace` adds it.
    match con {
        Value::Object(map) => {
            map.insert(key, value_of(op));
        }
        Value::Array(items) => {
            let idx = atoi(&key)? as usize;
            items[idx] = value_of(op);
        }
        _ => {}
    }
    Ok(())
}

fn move_(doc: &mut Value, op: &Map<String, Value>) -> Result<(), JsonPatchError> {
    let from = field(op, "from")
        .map_err(|e| e.wrap("move operation failed to decode from".to_string()))?;
    let Some((con, key)) = find_object(doc, from) else {
        return Err(missing(format!(
            "move operation does not apply: doc is missing from path: {from}"
        )));
    };
    // v4 names the key, not the path, in these two messages.
    get(con, &key).map_err(|e| e.wrap(format!("error in move for path: '{key}'")))?;
    let value = remove_from(con, &key)
        .map_err(|e| e.wrap(format!("error in move for path: '{key}'")))?
        .unwrap_or(Value::Null);
    let path = field(op, "path")
        .map_err(|e| e.wrap("move operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(missing(format!(
            "move operation does not apply: doc is missing destination path: {path}"
        )));
    };
    add_to(con, &key, value).map_err(|e| e.wrap(format!("error in move for path: '{path}'")))
}

fn test(doc: &Value, op: &Map<String, Value>) -> Result<(), JsonPatchError> {
    let path = field(op, "path")
        .map_err(|e| e.wrap("test operation failed to decode path".to_string()))?;
    let failed = || {
        JsonPatchError::new(
            JsonPatchErrorKind::TestFailed,
            format!("testing value {path} failed"),
        )
    };
    if path.is_empty() {
        return if op.get("value") == Some(doc) {
            Ok(())
        } else {
            Err(failed())
        };
    }
    let Some((con, key)) = find_object_ref(doc, path) else {
        return Err(missing(format!(
            "test operation does not apply: is missing path: {path}"
        )));
    };
    let found = get(con, &key).map_err(|e| e.wrap(format!("error in test for path: '{path}'")))?;
    let expected = op.get("value");
    match (found, expected) {
        // v4: a missing or null member equals a null or absent value.
        (None | Some(Value::Null), None | Some(Value::Null)) => Ok(()),
        (Some(found), Some(expected)) if &found == expected => Ok(()),
        _ => Err(failed()),
    }
}

fn copy(
    doc: &mut Value,
    op: &Map<String, Value>,
    copied: &mut usize,
    limit: usize,
) -> Result<(), JsonPatchError> {
    let from = field(op, "from")
        .map_err(|e| e.wrap("copy operation failed to decode from".to_string()))?;
    let Some((con, key)) = find_object(doc, from) else {
        return Err(missing(format!(
            "copy operation does not apply: doc is missing from path: {from}"
        )));
    };
    // v4 quirk: copying an object's missing key copies null (and adds nothing to the size).
    let value = get(con, &key).map_err(|e| e.wrap(format!("error in copy for from: '{from}'")))?;
    let path = field(op, "path")
        .map_err(|_| missing("copy operation failed to decode path".to_string()))?;
    let Some((con, key)) = find_object(doc, path) else {
        return Err(missing(format!(
            "copy operation does not apply: doc is missing destination path: {path}"
        )));
    };
    let size = value
        .as_ref()
        .map_or(0, |v| serde_json::to_vec(v).map_or(0, |b| b.len()));
    *copied += size;
    if limit > 0 && *copied > limit {
        return Err(JsonPatchError::new(
            JsonPatchErrorKind::CopySizeExceeded,
            format!(
                "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {limit}"
            ),
        ));
    }
    add_to(con, &key, value.unwrap_or(Value::Null))
        .map_err(|e| e.wrap("error while adding value during copy".to_string()))
}

/// Parses a JSON patch body. A body that is not a list of objects is 400; 413 past
/// [`MAX_OPERATIONS`]. The operations themselves are checked when applied (422).
pub fn parse_json_patch(body: &[u8]) -> Result<JsonPatch, PatchError> {
    let value = super::decode_json(PatchType::Json, body)?;
    json_patch_from_value(value)
}

/// A decoded JSON patch body as operations, as v4's `DecodePatch` reads it (a null element
/// is an operation without fields).
pub(crate) fn json_patch_from_value(value: Value) -> Result<JsonPatch, PatchError> {
    let Value::Array(items) = value else {
        return Err(super::malformed(
            PatchType::Json,
            format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                go_kind(&value)
            ),
        ));
    };
    if items.len() > MAX_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            count: items.len(),
            max: MAX_OPERATIONS,
        });
    }
    let mut operations = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::Object(op) => operations.push(op),
            Value::Null => operations.push(Map::new()),
            other => {
                return Err(super::malformed(
                    PatchType::Json,
                    format!(
                        "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                        go_kind(&other)
                    ),
                ));
            }
        }
    }
    Ok(JsonPatch(operations))
}

/// Applies the JSON patch in `body` to `original`. The patch applies as a whole or not at
/// all; an operation that fails (a missing path, a `test` that does not match) is 422
/// `Invalid` with v4's message, as kube-apiserver's patch handler answers `patchObj.Apply`.
///
/// ```
/// use extension_apiserver_machinery::patch::apply_json_patch;
/// use serde_json::json;
/// let body = br#"[{"op": "test", "path": "/n", "value": 1}, {"op": "replace", "path": "/n", "value": 2}]"#;
/// assert_eq!(apply_json_patch(&json!({"n": 1}), body).unwrap(), json!({"n": 2}));
/// let e = apply_json_patch(&json!({"n": 3}), body).unwrap_err();
/// assert_eq!(e.status_code(), 422);
/// assert!(e.to_string().ends_with("testing value /n failed: test failed"));
/// ```
pub fn apply_json_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    apply_operations(original, &parse_json_patch(body)?)
}

/// Applies parsed operations to `original` (see [`apply_json_patch`]).
pub(crate) fn apply_operations(original: &Value, patch: &JsonPatch) -> Result<Value, PatchError> {
    patch
        .apply(original)
        .map_err(|e| PatchError::Invalid(e.to_string()))
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

    /// v4's message for `ops` applied to `pod()`.
    fn v4_error(ops: Value) -> JsonPatchError {
        let patch = json_patch_from_value(ops).unwrap();
        patch.apply(&pod()).unwrap_err()
    }

    #[test]
    fn a_failing_test_is_422_and_nothing_applies() {
        let ops = json!([
            {"op": "replace", "path": "/metadata/name", "value": "q"},
            {"op": "test", "path": "/metadata/name", "value": "p"},
        ]);
        let e = apply(pod(), ops.clone()).unwrap_err();
        assert_eq!(e.status_code(), 422);
        assert_eq!(e.reason(), "Invalid");
        assert_eq!(
            e.to_string(),
            "the server rejected our request due to an error in our request: \
             testing value /metadata/name failed: test failed"
        );
        let e = v4_error(ops);
        assert!(e.is_test_failed());
        assert_eq!(e.kind(), JsonPatchErrorKind::TestFailed);
    }

    #[test]
    fn v4_messages_for_missing_paths_and_bad_indices() {
        for (ops, message, kind) in [
            (
                json!([{"op": "remove", "path": "/spec/nothere"}]),
                "error in remove for path: '/spec/nothere': Unable to remove nonexistent key: nothere: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "replace", "path": "/a/b", "value": 1}]),
                "replace operation does not apply: doc is missing path: /a/b: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "replace", "path": "/spec/list/3", "value": 1}]),
                "replace operation does not apply: doc is missing key: /spec/list/3: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "add", "path": "/a/b", "value": 1}]),
                "add operation does not apply: doc is missing path: \"/a/b\": missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "add", "path": "/spec/list/5", "value": 1}]),
                "error in add for path: '/spec/list/5': Unable to access invalid index: 5: invalid index referenced",
                JsonPatchErrorKind::InvalidIndex,
            ),
            (
                json!([{"op": "add", "path": "/spec/list/-1", "value": 1}]),
                "error in add for path: '/spec/list/-1': Unable to access invalid index: -1: invalid index referenced",
                JsonPatchErrorKind::InvalidIndex,
            ),
            (
                json!([{"op": "add", "path": "/spec/list/x", "value": 1}]),
                "error in add for path: '/spec/list/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax",
                JsonPatchErrorKind::Other,
            ),
            (
                json!([{"op": "remove", "path": "/spec/list/3"}]),
                "error in remove for path: '/spec/list/3': Unable to access invalid index: 3: invalid index referenced",
                JsonPatchErrorKind::InvalidIndex,
            ),
            (
                json!([{"op": "test", "path": "/x", "value": 1}]),
                "testing value /x failed: test failed",
                JsonPatchErrorKind::TestFailed,
            ),
            (
                json!([{"op": "test", "path": "/x/y", "value": 1}]),
                "test operation does not apply: is missing path: /x/y: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "move", "from": "/nope", "path": "/x"}]),
                "error in move for path: 'nope': Unable to remove nonexistent key: nope: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "move", "from": "/spec/list/9", "path": "/x"}]),
                "error in move for path: '9': Unable to access invalid index: 9: invalid index referenced",
                JsonPatchErrorKind::InvalidIndex,
            ),
            (
                json!([{"op": "copy", "from": "/spec", "path": "/spec/list/x/y"}]),
                "copy operation does not apply: doc is missing destination path: /spec/list/x/y: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "copy", "from": "/a/b", "path": "/x"}]),
                "copy operation does not apply: doc is missing from path: /a/b: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "frobnicate", "path": "/a"}]),
                "Unexpected kind: frobnicate",
                JsonPatchErrorKind::Other,
            ),
            (
                json!([{"path": "/a"}]),
                "Unexpected kind: unknown",
                JsonPatchErrorKind::Other,
            ),
            (
                json!([{"op": "add", "value": 1}]),
                "add operation failed to decode path: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "replace", "path": 1, "value": 1}]),
                "replace operation failed to decode path: json: cannot unmarshal number into Go value of type string",
                JsonPatchErrorKind::Other,
            ),
            (
                json!([{"op": "move", "path": "/a"}]),
                "move operation failed to decode from: operation, missing from field: missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "add", "path": "", "value": 1}]),
                "add operation does not apply: doc is missing path: \"\": missing value",
                JsonPatchErrorKind::Missing,
            ),
            (
                json!([{"op": "replace", "path": "", "value": 1}]),
                "replace operation value must be object or array: %!w(<nil>)",
                JsonPatchErrorKind::Other,
            ),
        ] {
            let e = v4_error(ops.clone());
            assert_eq!(e.to_string(), message, "{ops}");
            assert_eq!(e.kind(), kind, "{ops}");
            let e = apply(pod(), ops.clone()).unwrap_err();
            assert_eq!(e.status_code(), 422, "{ops}: {e}");
        }
    }

    #[test]
    fn v4_quirks() {
        // replace of a missing object key adds it (v4's partialDoc.get returns nil, no error).
        let patched = apply(
            pod(),
            json!([{"op": "replace", "path": "/spec/new", "value": 1}]),
        )
        .unwrap();
        assert_eq!(patched["spec"]["new"], json!(1));
        // test with null: a missing key and a null member both equal null or no value.
        let doc = json!({"n": null, "m": 1});
        for ops in [
            json!([{"op": "test", "path": "/missing", "value": null}]),
            json!([{"op": "test", "path": "/missing"}]),
            json!([{"op": "test", "path": "/n", "value": null}]),
        ] {
            assert_eq!(apply(doc.clone(), ops.clone()).unwrap(), doc, "{ops}");
        }
        for ops in [
            json!([{"op": "test", "path": "/m", "value": null}]),
            json!([{"op": "test", "path": "/n", "value": 1}]),
            json!([{"op": "test", "path": "/m"}]),
        ] {
            assert!(apply(doc.clone(), ops.clone()).is_err(), "{ops}");
        }
        // copy of a missing object key copies null; add without a value adds null.
        let patched = apply(
            pod(),
            json!([
                {"op": "copy", "from": "/spec/none", "path": "/spec/copied"},
                {"op": "add", "path": "/spec/empty"},
            ]),
        )
        .unwrap();
        assert_eq!(patched["spec"]["copied"], Value::Null);
        assert_eq!(patched["spec"]["empty"], Value::Null);
        // text before the first `/` is ignored, as v4 splits on `/` and drops the first part.
        let patched = apply(pod(), json!([{"op": "add", "path": "x/y", "value": 1}])).unwrap();
        assert_eq!(patched["y"], json!(1));
        // `~1` is `/`, `~0` is `~`; a `-` index appends; a numeric key in an object is a key.
        let patched = apply(
            json!({"a": {}, "l": [1]}),
            json!([
                {"op": "add", "path": "/a/x~1y~0z", "value": 1},
                {"op": "add", "path": "/a/0", "value": 2},
                {"op": "add", "path": "/l/-", "value": 3},
                {"op": "add", "path": "/l/+0", "value": 0},
            ]),
        )
        .unwrap();
        assert_eq!(patched, json!({"a": {"x/y~z": 1, "0": 2}, "l": [0, 1, 3]}));
        // An empty path replaces or tests the whole document.
        let whole = json!([
            {"op": "replace", "path": "", "value": {"whole": true}},
            {"op": "test", "path": "", "value": {"whole": true}},
        ]);
        assert_eq!(apply(patched, whole).unwrap(), json!({"whole": true}));
    }

    #[test]
    fn copies_past_the_size_limit_fail() {
        let doc = json!({"s": "0123456789"});
        let ops = json!([
            {"op": "copy", "from": "/s", "path": "/a"},
            {"op": "copy", "from": "/s", "path": "/b"},
        ]);
        let patch = json_patch_from_value(ops).unwrap();
        // "\"0123456789\"" is 12 bytes; two copies are 24.
        assert!(patch.apply_with_copy_limit(&doc, 24).is_ok());
        let e = patch.apply_with_copy_limit(&doc, 23).unwrap_err();
        assert_eq!(e.kind(), JsonPatchErrorKind::CopySizeExceeded);
        assert_eq!(
            e.to_string(),
            "Unable to complete the copy, the accumulated size increase of copy is 24, exceeding the limit 23"
        );
        assert_eq!(MAX_COPY_BYTES, 3 * 1024 * 1024);
    }

    #[test]
    fn malformed_patches_are_400() {
        for body in [
            "not json",
            r#"{"op": "add", "path": "/a", "value": 1}"#,
            r#"[1]"#,
            r#"["add"]"#,
        ] {
            let e = apply_json_patch(&pod(), body.as_bytes()).unwrap_err();
            assert_eq!(e.status_code(), 400, "{body}: {e}");
            assert!(e.is_malformed());
        }
        let e = apply_json_patch(&pod(), br#"{"op": "add"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "error decoding patch: json: cannot unmarshal object into Go value of type jsonpatch.Patch"
        );
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
