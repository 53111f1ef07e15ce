//! RFC 7386 JSON merge patch (`application/merge-patch+json`): objects merge recursively,
//! `null` deletes a member, and every other value (lists included) replaces what was there.

use serde_json::Value;

use super::{PatchError, PatchType};

/// kube-apiserver's (evanphx/json-patch's) message for a body that is not a merge patch.
pub(crate) const BAD_MERGE_PATCH: &str = "Invalid JSON Patch";

/// Merges `patch` into `target` as RFC 7386 specifies (`json_patch::merge`).
///
/// ```
/// use extension_apiserver_machinery::patch::merge_patch;
/// use serde_json::json;
/// let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
/// merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
/// assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
/// ```
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies the merge patch in `body` to `original`.
///
/// Like kube-apiserver, a body that is not JSON, or is `null` or a scalar, is 400
/// `Invalid JSON Patch`; a list replaces the whole document (which [`super::apply_patch`]
/// then refuses, as the result is no object).
pub fn apply_merge_patch(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let patch = check_merge_patch(super::decode_json(PatchType::Merge, body)?)?;
    let mut patched = original.clone();
    merge_patch(&mut patched, &patch);
    Ok(patched)
}

/// A decoded body as a merge patch: an object or a list, else 400.
pub(crate) fn check_merge_patch(patch: Value) -> Result<Value, PatchError> {
    if !(patch.is_object() || patch.is_array()) {
        return Err(PatchError::Malformed(format!(
            "{BAD_MERGE_PATCH}: a merge patch must be an object, not {}",
            super::kind_of(&patch)
        )));
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(target: Value, patch: Value) -> Value {
        let mut target = target;
        merge_patch(&mut target, &patch);
        target
    }

    /// The test cases of RFC 7386, appendix A.
    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(
                merged(target.clone(), patch.clone()),
                expected,
                "{target} + {patch}"
            );
        }
    }

    /// The example of RFC 7386, section 3.
    #[test]
    fn rfc7386_section_3_example() {
        let target = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        let expected = json!({
            "title": "Hello!",
            "author": {"givenName": "John"},
            "tags": ["example"],
            "content": "This will be unchanged",
            "phoneNumber": "+01-123-456-7890"
        });
        assert_eq!(merged(target, patch), expected);
    }

    #[test]
    fn bodies_apply_to_a_copy() {
        let original = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}});
        let body = br#"{"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"x": [1]}}"#;
        let patched = apply_merge_patch(&original, body).unwrap();
        assert_eq!(
            patched,
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"x": [1]}})
        );
        assert_eq!(original["spec"]["x"], json!(1));
    }

    #[test]
    fn non_patches_are_400_invalid_json_patch() {
        for body in ["{", "null", "3", "\"text\"", "true", ""] {
            let e = apply_merge_patch(&json!({}), body.as_bytes()).unwrap_err();
            assert_eq!(e.status_code(), 400, "{body:?}");
            assert!(e.to_string().starts_with("Invalid JSON Patch"), "{e}");
        }
    }

    #[test]
    fn a_list_body_replaces_the_document() {
        assert_eq!(
            apply_merge_patch(&json!({"a": 1}), b"[1]").unwrap(),
            json!([1])
        );
    }
}
