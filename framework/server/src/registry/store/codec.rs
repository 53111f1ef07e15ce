//! Objects to and from stored bytes, and from JSON to the user's type.

use std::ops::Range;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::registry::context::{PatchDecoding, RequestContext};
use crate::registry::options::FieldValidation;
use serde_path_to_error::Segment;

use crate::codec::unknown;
use crate::registry::schema_errors::schema_errors;
use crate::registry::schema_validation;
use crate::runtime::jsonpath::go_json;
use crate::runtime::object::{self, metadata_mut, set_meta};
use crate::runtime::{FieldError, FieldErrorType, Resource, ResourceInfo};
use crate::storage::cacher::{CachedObject, Encoded};
use crate::storage::{KeyValue, StorageError};

/// A stored object, with `metadata.resourceVersion` from the key's modification revision.
pub(crate) fn decode_stored(kv: &KeyValue) -> Result<Value> {
    let mut object: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| Error::internal(format!("stored object {} is corrupt: {e}", kv.key)))?;
    set_meta(
        &mut object,
        "resourceVersion",
        json!(kv.mod_revision.to_string()),
    );
    Ok(object)
}

/// The bytes a client receives for a stored key-value: the stored JSON with
/// `metadata.resourceVersion` spliced in, without decoding the object into a tree and
/// encoding it again. The result is the same JSON as [`decode_stored`] encoded (members in
/// the same order when the stored object's are sorted, as this crate writes them).
pub(crate) fn encode_stored(kv: &KeyValue) -> Result<Bytes> {
    spliced_or_encoded(kv).map(|spliced| Bytes::from(spliced.json))
}

/// [`encode_stored`] with the parts of the bytes other objects of the resource repeat: all
/// before the first member of `metadata` (`{"apiVersion":…,"kind":…,"metadata":{`), and
/// the value of `metadata.managedFields` (and its part before the first entry's `time`),
/// which the watch cache keeps once for the objects that have the same.
fn encode_stored_parts(kv: &KeyValue) -> Result<Encoded> {
    let Spliced {
        json: mut encoded,
        head,
        managed_fields: repeated,
    } = spliced_or_encoded(kv)?;
    // Only the cache keeps the shorter part, so only its encoding looks for it.
    let shorter = repeated
        .as_ref()
        .and_then(|span| first_entry_time(&encoded, span.start));
    // Watch-cache objects are kept for as long as they are current: no spare capacity.
    encoded.shrink_to_fit();
    Ok(Encoded {
        bytes: Bytes::from(encoded),
        head,
        repeated,
        shorter,
    })
}

/// The stored JSON with `resourceVersion` spliced in, or (when it cannot be spliced) the
/// object decoded and encoded again, which has no spans.
fn spliced_or_encoded(kv: &KeyValue) -> Result<Spliced> {
    let fast = splice_resource_version(&kv.value, kv.mod_revision)
        // Bytes that are not JSON get the same 500 as the decoding path gives them. serde_json
        // skips strings it ignores without checking their UTF-8, which decoding refuses.
        .filter(|_| std::str::from_utf8(&kv.value).is_ok())
        .filter(|_| serde_json::from_slice::<serde::de::IgnoredAny>(&kv.value).is_ok());
    if let Some(spliced) = fast {
        return Ok(spliced);
    }
    Ok(Spliced {
        json: serde_json::to_vec(&decode_stored(kv)?).map_err(Error::internal)?,
        head: 0,
        managed_fields: None,
    })
}

/// The answer to a write of `stored` (bytes this crate encoded) at `revision`: the bytes
/// with `metadata.resourceVersion` spliced in, the same JSON encoding the object with its
/// resourceVersion gives. `None` when they cannot be spliced.
pub(crate) fn answer_of_stored(stored: &Bytes, revision: i64) -> Option<Bytes> {
    splice_resource_version(stored, revision).map(|spliced| Bytes::from(spliced.json))
}

/// [`encode_stored`] for the watch cache, with the parts objects repeat.
pub(crate) fn encode_for_client(kv: &KeyValue) -> std::result::Result<Encoded, StorageError> {
    encode_stored_parts(kv).map_err(|e| StorageError::Internal(e.message().to_string()))
}

/// The raw `apiVersion` of a stored object, without decoding it: the top-level members are
/// skipped until `apiVersion`, the first of them in what this crate stores (members sorted).
/// `None` when there is none, it is not a plain string, or `json` is not an object.
pub(crate) fn stored_api_version(json: &[u8]) -> Option<&[u8]> {
    let mut scan = Scan { json, at: 0 };
    scan.expect(b'{')?;
    loop {
        let key = scan.string()?;
        scan.expect(b':')?;
        if &json[key.0..key.1] == b"apiVersion" {
            let value = scan.string()?;
            return Some(&json[value.0..value.1]);
        }
        scan.value()?;
        if scan.after_member()? {
            return None;
        }
    }
}

/// `json` with `resourceVersion` spliced in ([`splice_resource_version`]), and where in it
/// two parts are that other objects repeat.
struct Spliced {
    json: Vec<u8>,
    /// `json[..head]` is all before the first member of `metadata` (after its `{`).
    head: usize,
    /// The span of `metadata.managedFields`' value (the last, if there are two).
    managed_fields: Option<Range<usize>>,
}

/// `json` (one object) with `"resourceVersion":"{revision}"` set in its top-level
/// `metadata` object: inserted before the first member whose key sorts after it, or its
/// value replaced when present. `None` when `json` is not an object with one `metadata`
/// object, or has a key the splice cannot judge by its bytes (escaped), or two
/// `resourceVersion`s in `metadata`: the caller decodes it instead, where the last of
/// duplicate members wins, as for every JSON reader of ours and of kube's.
fn splice_resource_version(json: &[u8], revision: i64) -> Option<Spliced> {
    const RV: &[u8] = b"resourceVersion";
    let mut scan = Scan { json, at: 0 };
    scan.expect(b'{')?;
    // The top-level members until `metadata`.
    loop {
        let key = plain_key(&mut scan)?;
        scan.expect(b':')?;
        if key == b"metadata" {
            break;
        }
        scan.value()?;
        if scan.after_member()? {
            return None;
        }
    }
    scan.expect(b'{')?;
    let head = scan.at;
    let mut managed_fields = None;
    let value = format!("\"{revision}\"");
    // Where the member goes, or which value it replaces, and whether a comma follows.
    let (start, end, comma_before, comma_after) = if scan.peek()? == b'}' {
        no_second_metadata(json, scan.at + 1)?;
        (scan.at, scan.at, false, false)
    } else {
        let mut found = None;
        let mut last_end;
        loop {
            scan.skip_ws();
            let member = scan.at;
            let key = plain_key(&mut scan)?;
            scan.expect(b':')?;
            scan.skip_ws();
            let value_start = scan.at;
            scan.value()?;
            last_end = scan.at;
            match found {
                _ if key == RV && matches!(found, Some(Place::Replace(..))) => return None,
                None | Some(Place::Before(_)) if key == RV => {
                    found = Some(Place::Replace(value_start, scan.at));
                }
                None if key > RV => found = Some(Place::Before(member)),
                _ => {}
            }
            if key == b"managedFields" {
                managed_fields = Some(value_start..scan.at);
            }
            if scan.after_member()? {
                break;
            }
        }
        no_second_metadata(json, scan.at)?;
        match found {
            Some(Place::Replace(start, end)) => (start, end, false, false),
            Some(Place::Before(at)) => (at, at, false, true),
            None => (last_end, last_end, true, false),
        }
    };
    let mut out = Vec::with_capacity(json.len() + RV.len() + value.len() + 4);
    out.extend_from_slice(&json[..start]);
    if start == end {
        if comma_before {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(RV);
        out.extend_from_slice(b"\":");
    }
    out.extend_from_slice(value.as_bytes());
    if comma_after {
        out.push(b',');
    }
    // A span after the splice moved by what it added (a value replaced may be shorter).
    let moved = |at: usize| out.len() + at - end;
    let managed_fields = managed_fields.map(|span| {
        if span.end <= start {
            span
        } else {
            moved(span.start)..moved(span.end)
        }
    });
    out.extend_from_slice(&json[end..]);
    Some(Spliced {
        json: out,
        head,
        managed_fields,
    })
}

/// Where the value of the first entry's `time` starts in a `managedFields` value starting at
/// `at`: what comes before it is the same for the objects a manager wrote to the same fields
/// at any time. `None` when the value is not a list whose first entry has a `time`.
fn first_entry_time(json: &[u8], at: usize) -> Option<usize> {
    let mut scan = Scan { json, at };
    scan.expect(b'[')?;
    scan.expect(b'{')?;
    loop {
        let key = plain_key(&mut scan)?;
        scan.expect(b':')?;
        if key == b"time" {
            scan.skip_ws();
            return Some(scan.at);
        }
        scan.value()?;
        if scan.after_member()? {
            return None;
        }
    }
}

/// `Some` when the top-level members after `metadata` (from `at`, after its value) have no
/// second `metadata`.
fn no_second_metadata(json: &[u8], at: usize) -> Option<()> {
    let mut rest = Scan { json, at };
    while !rest.after_member()? {
        if plain_key(&mut rest)? == b"metadata" {
            return None;
        }
        rest.expect(b':')?;
        rest.value()?;
    }
    Some(())
}

/// The next key of an object, when it has no escapes (its bytes are then its text).
fn plain_key<'a>(scan: &mut Scan<'a>) -> Option<&'a [u8]> {
    let (start, end) = scan.string()?;
    let key = &scan.json[start..end];
    (!key.contains(&b'\\')).then_some(key)
}

/// Where `resourceVersion` goes in a `metadata` object.
enum Place {
    /// Replaces the value between these offsets.
    Replace(usize, usize),
    /// A new member before the member starting at this offset.
    Before(usize),
}

/// A cursor over JSON text that finds member boundaries without building values. It checks
/// structure (strings, nesting, separators) only; the caller validates the whole text.
struct Scan<'a> {
    json: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.json.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.json.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string; returns the span of its raw (still escaped) content.
    fn string(&mut self) -> Option<(usize, usize)> {
        self.expect(b'"')?;
        let start = self.at;
        loop {
            match *self.json.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some((start, self.at - 1));
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    /// Skips one value of any kind.
    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.json.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                let start = self.at;
                while let Some(&b) = self.json.get(self.at) {
                    if matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.at += 1;
                }
                (self.at > start).then_some(())
            }
        }
    }

    /// After a member of an object: `true` at its closing brace (consumed), `false` after a
    /// comma (consumed), `None` at anything else.
    fn after_member(&mut self) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(false)
            }
            b'}' => {
                self.at += 1;
                Some(true)
            }
            _ => None,
        }
    }
}

/// A watch-cache object decoded, for selectors and shapes that need the JSON.
pub(crate) fn decode_cached(object: &CachedObject) -> Result<Value> {
    object
        .with_json(|json| serde_json::from_slice(json))
        .map_err(|e| Error::internal(format!("cached object {}: {e}", object.key_suffix())))
}

/// The bytes to store: the object without `resourceVersion` (the revision is the version).
pub(crate) fn encode_for_storage(object: &Value) -> Result<Bytes> {
    let metadata = object.get("metadata").and_then(Value::as_object);
    let encoded = match metadata {
        // Nothing to take out: no copy of the object.
        Some(metadata) if !metadata.contains_key("resourceVersion") => to_json_vec(object),
        _ => {
            let mut object = object.clone();
            metadata_mut(&mut object).remove("resourceVersion");
            to_json_vec(&object)
        }
    };
    encoded.map(Bytes::from).map_err(Error::internal)
}

/// The most unknown fields reported, as sigs.k8s.io/json's decoder keeps at most 100 strict
/// errors: a body with 200,000 unknown fields costs no more than one with 100.
const MAX_UNKNOWN_FIELDS: usize = 100;

/// Decodes JSON into `T`, reporting unknown fields as `fieldValidation` asks: a warning
/// each with `Warn`; with `Strict`, kube-apiserver's strict decoding error, a 400 for a
/// create or update body and a 422 at `patch` for a patched object (with the patch body's
/// own strict errors first, see [`RequestContext::patch`]).
pub(crate) fn decode_typed<T: Resource>(
    object: &Value,
    validation: FieldValidation,
    ctx: &RequestContext,
) -> Result<T> {
    let mut unknown = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let typed: T = unknown::from_value_reporting_unknown(object, |path| {
        // A type that does not keep `apiVersion` and `kind` is not told of them.
        if unknown.len() >= MAX_UNKNOWN_FIELDS
            || path.is_top_level("apiVersion")
            || path.is_top_level("kind")
        {
            return;
        }
        let path = path.to_string();
        if seen.insert(path.clone()) {
            unknown.push(format!("unknown field {path:?}"));
        }
    })
    .map_err(|e| decode_error::<T>(object, e))?;
    let patch = ctx.patch().filter(|p| !p.errors.is_empty());
    if (unknown.is_empty() && patch.is_none()) || validation == FieldValidation::Ignore {
        return Ok(typed);
    }
    if validation == FieldValidation::Strict {
        return Err(strict_error(&T::INFO, object, ctx.patch(), unknown));
    }
    for m in unknown {
        ctx.warn(m);
    }
    Ok(typed)
}

/// kube-apiserver's answer to strict decoding errors: for a create or update body the
/// decoder's error as `transformDecodeError` wraps it (400), for a patch
/// `NewInvalid(GroupKind{}, "", [Invalid("patch", patched, err)])` (422).
fn strict_error(
    info: &ResourceInfo,
    object: &Value,
    patch: Option<&PatchDecoding>,
    unknown: Vec<String>,
) -> Error {
    let Some(patch) = patch else {
        return cannot_handle(
            info,
            format!("strict decoding error: {}", unknown.join(", ")),
        );
    };
    let errors: Vec<String> = patch.errors.iter().cloned().chain(unknown).collect();
    let detail = format!("strict decoding error: {}", errors.join(", "));
    let shown = match &patch.shown {
        Some(shown) => shown.clone(),
        None => go_json(object),
    };
    Error::invalid_in("", "", "", &[FieldError::invalid("patch", shown, &detail)])
}

/// Why `object` does not decode into `T`: a 422 with one cause per field the type's schema
/// refuses, as kube-apiserver's schema validation of a custom resource answers; else a 422 at
/// the field where decoding stopped; a 400 only when no field can be named.
fn decode_error<T: Resource>(object: &Value, e: serde_json::Error) -> Error {
    let name = object::name(object).unwrap_or_default();
    let mut errors = schema_errors::<T>(object);
    if errors.is_empty() {
        errors.extend(failing_field::<T>(object));
    }
    if errors.is_empty() {
        return cannot_handle(&T::INFO, e);
    }
    // The type's rules did not run: kube says so when its CRD has any (an error path, so the
    // schema is looked at only here).
    if errors.iter().any(schema_validation::blocks_rules)
        && schema_validation::resource_root_schema::<T>()
            .to_string()
            .contains("\"x-kubernetes-validations\"")
    {
        errors.push(schema_validation::rules_not_checked());
    }
    Error::invalid(&T::INFO, name, &errors)
}

/// The field decoding stopped at, with serde's reason: for what the schema does not say
/// (an integer too large for its Rust type, a malformed timestamp).
fn failing_field<T: Resource>(object: &Value) -> Option<FieldError> {
    let e = serde_path_to_error::deserialize::<_, T>(object).err()?;
    let mut field = String::new();
    let mut at = Some(object);
    for segment in e.path().iter() {
        match segment {
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(key);
                at = at.and_then(|v| v.get(key.as_str()));
            }
            Segment::Seq { index } => {
                field.push_str(&format!("[{index}]"));
                at = at.and_then(|v| v.get(*index));
            }
            Segment::Unknown => {}
        }
    }
    if field.is_empty() {
        return None;
    }
    let value = match at {
        Some(Value::String(s)) => format!("{s:?}"),
        Some(other) => other.to_string(),
        None => "null".into(),
    };
    Some(FieldError {
        type_: FieldErrorType::Invalid,
        field,
        value: Some(value),
        detail: e.into_inner().to_string(),
    })
}

fn cannot_handle(info: &ResourceInfo, e: impl std::fmt::Display) -> Error {
    Error::bad_request(format!(
        "{} in version {:?} cannot be handled as a {}: {e}",
        info.kind, info.version, info.kind
    ))
}

pub(crate) use crate::codec::{encode_typed, from_object, set_type_meta, to_json_vec};

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(value: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: "/k".into(),
            value: Bytes::from(value.to_owned()),
            create_revision: 1,
            mod_revision: revision,
        }
    }

    /// The spliced bytes are exactly what decoding and encoding again gives.
    #[test]
    fn splicing_matches_the_decoding_path() {
        let cases = [
            r#"{"apiVersion":"v1","kind":"K","metadata":{"name":"a","namespace":"n","uid":"u"},"spec":{"x":[1,{"y":"}"}]}}"#,
            r#"{"metadata":{"name":"a"}}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":{"uid":"u"}}"#,
            r#"{"metadata":{"resourceVersion":"7","uid":"u"}}"#,
            r#"{"a":"\"metadata\"","metadata":{"labels":{"resourceVersion":"x"},"name":"q\\\"z"},"z":null}"#,
            r#"{ "kind" : "K" , "metadata" : { "name" : "a" , "zz" : 1.5e3 } }"#,
            r#"{"kind":"K"}"#,
            r#"{"kind":"K","metadata":null}"#,
            r#"[1]"#,
        ];
        for json in cases {
            let kv = kv(json, 42);
            let want = serde_json::to_vec(&decode_stored(&kv).unwrap()).unwrap();
            let got = encode_stored(&kv).unwrap();
            let got: Value = serde_json::from_slice(&got).unwrap();
            let want_value: Value = serde_json::from_slice(&want).unwrap();
            assert_eq!(got, want_value, "{json}");
            if !json.contains(' ') {
                assert_eq!(
                    encode_stored(&kv).unwrap(),
                    Bytes::from(want),
                    "same bytes for {json}"
                );
            }
        }
    }

    /// A create answers with the bytes it stored, the revision spliced in: the same bytes
    /// as encoding the object it returns.
    #[test]
    fn the_answer_of_a_write_is_the_stored_bytes_with_their_version() {
        let mut object = json!({
            "apiVersion": "g/v1", "kind": "K",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "managedFields": [{"manager": "m"}]},
            "spec": {"reference": "x"},
        });
        let stored = encode_for_storage(&object).unwrap();
        set_meta(&mut object, "resourceVersion", json!("42"));
        let answer = answer_of_stored(&stored, 42).unwrap();
        assert_eq!(answer, Bytes::from(serde_json::to_vec(&object).unwrap()));
    }

    /// What the watch cache keeps once for many objects: the beginning up to `metadata`'s
    /// first member, and `managedFields`' value, wherever the splice moved it.
    #[test]
    fn the_parts_objects_repeat_are_found() {
        let cases = [
            (
                r#"{"apiVersion":"g/v1","kind":"K","metadata":{"managedFields":[{"manager":"m"}],"name":"a"},"spec":{}}"#,
                r#"{"apiVersion":"g/v1","kind":"K","metadata":{"#,
                Some(r#"[{"manager":"m"}]"#),
            ),
            (
                r#"{"metadata":{"resourceVersion":"7","managedFields":[1,{"a":"]"}]}}"#,
                r#"{"metadata":{"#,
                Some(r#"[1,{"a":"]"}]"#),
            ),
            (
                r#"{"metadata":{"uid":"u","managedFields":[2]}}"#,
                r#"{"metadata":{"#,
                Some("[2]"),
            ),
            (r#"{"metadata":{}}"#, r#"{"metadata":{"#, None),
            (
                r#"{"kind":"K","metadata":{"managedFields":null}}"#,
                r#"{"kind":"K","metadata":{"#,
                Some("null"),
            ),
            (r#"{"kind":"K","metadata":null}"#, "", None),
        ];
        for (json, head, managed_fields) in cases {
            for revision in [1, 123_456_789] {
                let encoded = encode_stored_parts(&kv(json, revision)).unwrap();
                let bytes = std::str::from_utf8(&encoded.bytes).unwrap();
                assert_eq!(&bytes[..encoded.head], head, "{json}");
                let span = encoded.repeated.clone().map(|span| &bytes[span]);
                assert_eq!(span, managed_fields, "{json} at {revision}");
                assert_eq!(encoded.shorter, None, "no entry has a time");
                assert_eq!(encoded.bytes, encode_stored(&kv(json, revision)).unwrap());
            }
        }
    }

    /// The part of `managedFields` before the first entry's `time`, which objects one
    /// manager wrote at different times have in common.
    #[test]
    fn managed_fields_before_the_first_entrys_time_are_found() {
        let cases = [
            (
                r#"{"metadata":{"managedFields":[{"manager":"m","time":"2026-11-28T13:00:00Z"},{"time":"x"}],"name":"a"}}"#,
                Some(r#"[{"manager":"m","time":"#),
            ),
            (
                r#"{"metadata":{"resourceVersion":"7","managedFields":[ { "a" : [1] , "time" : "t" } ]}}"#,
                Some(r#"[ { "a" : [1] , "time" : "#),
            ),
            (r#"{"metadata":{"managedFields":[{"manager":"m"}]}}"#, None),
            (r#"{"metadata":{"managedFields":[]}}"#, None),
            (r#"{"metadata":{"managedFields":{"time":"t"}}}"#, None),
        ];
        for (json, before_time) in cases {
            for revision in [1, 123_456_789] {
                let encoded = encode_stored_parts(&kv(json, revision)).unwrap();
                let span = encoded.repeated.clone().unwrap();
                let before = encoded
                    .shorter
                    .map(|end| std::str::from_utf8(&encoded.bytes[span.start..end]).unwrap());
                assert_eq!(before, before_time, "{json} at {revision}");
            }
        }
    }

    #[test]
    fn the_stored_api_version_is_found_without_decoding() {
        let cases: [(&str, Option<&str>); 6] = [
            (
                r#"{"apiVersion":"g/v1","kind":"K","metadata":{}}"#,
                Some("g/v1"),
            ),
            (
                r#"{ "_x" : [1, {"apiVersion":"no"}] , "apiVersion" : "g/v2" }"#,
                Some("g/v2"),
            ),
            (r#"{"kind":"K","metadata":{}}"#, None),
            (r#"{"apiVersion":1}"#, None),
            (r#"[{"apiVersion":"g/v1"}]"#, None),
            ("nope", None),
        ];
        for (json, want) in cases {
            let got = stored_api_version(json.as_bytes());
            assert_eq!(got, want.map(str::as_bytes), "{json}");
        }
    }

    #[test]
    fn corrupt_stored_bytes_are_an_error() {
        for json in [
            r#"{"metadata":{"name":"a"}"#,
            r#"{"metadata":{"name":"a"}},"#,
            "nope",
        ] {
            assert!(encode_stored(&kv(json, 1)).is_err(), "{json}");
        }
    }
}

/// The splicer against the plain decoding path on generated objects and garbage.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\{}:, ]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zV\"{}]{1,16}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A stored object: members in any order around a `metadata` object that may hold a
    /// `resourceVersion` already, keys that sort before and after it.
    fn stored_object() -> impl Strategy<Value = Value> {
        let meta_key = prop_oneof![
            Just("resourceVersion".to_string()),
            Just("name".to_string()),
            Just("uid".to_string()),
            Just("managedFields".to_string()),
            "[a-z]{1,16}",
        ];
        let metadata = prop::collection::btree_map(meta_key, json_value(), 0..5);
        let others = prop::collection::btree_map("[a-z]{1,10}", json_value(), 0..4);
        (metadata, others).prop_map(|(metadata, others)| {
            let mut object: serde_json::Map<String, Value> = others.into_iter().collect();
            object.insert(
                "metadata".into(),
                Value::Object(metadata.into_iter().collect()),
            );
            Value::Object(object)
        })
    }

    fn kv(value: Vec<u8>, revision: i64) -> KeyValue {
        KeyValue {
            key: "/k".into(),
            value: Bytes::from(value),
            create_revision: 1,
            mod_revision: revision,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn splicing_gives_the_bytes_of_the_decoding_path(
            object in stored_object(), revision in 1i64..i64::MAX
        ) {
            let kv = kv(serde_json::to_vec(&object).unwrap(), revision);
            let decoded = decode_stored(&kv).unwrap();
            let want = serde_json::to_vec(&decoded).unwrap();
            let encoded = encode_stored_parts(&kv).unwrap();
            prop_assert_eq!(&encoded.bytes, &Bytes::from(want));
            // The store's reads send the same bytes without looking for the parts.
            prop_assert_eq!(&encode_stored(&kv).unwrap(), &encoded.bytes);
            // The parts the watch cache may keep once are where they are said to be.
            let head = &encoded.bytes[..encoded.head];
            prop_assert!(head.ends_with(b"\"metadata\":{"), "head {:?}", head);
            let managed_fields = encoded
                .repeated
                .clone()
                .map(|span| serde_json::from_slice::<Value>(&encoded.bytes[span]).unwrap());
            prop_assert_eq!(managed_fields.as_ref(), decoded["metadata"].get("managedFields"));
            if let Some(end) = encoded.shorter {
                let span = encoded.repeated.clone().unwrap();
                prop_assert!(span.start < end && end < span.end, "{:?} {}", span, end);
            }
        }

        #[test]
        fn garbage_is_an_error_or_what_decoding_gives(
            bytes in prop::collection::vec(any::<u8>(), 0..64), text in "[{}\\[\\]\":,a-z0-9 ]{0,48}"
        ) {
            for value in [bytes.clone(), text.clone().into_bytes()] {
                let kv = kv(value, 3);
                match (encode_stored(&kv), decode_stored(&kv)) {
                    (Ok(encoded), Ok(decoded)) => {
                        let encoded: Value = serde_json::from_slice(&encoded).unwrap();
                        prop_assert_eq!(encoded, decoded);
                    }
                    (Err(_), Err(_)) => {}
                    (a, b) => prop_assert!(false, "splice {:?} but decode {:?}", a.is_ok(), b.is_ok()),
                }
            }
        }
    }
}
