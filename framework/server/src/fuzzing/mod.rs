//! The fuzz targets of every decoder of outside input, as plain functions: `fuzz/` runs each
//! under libFuzzer (`cargo fuzz run NAME`), and its `regressions` tests run each over
//! the seed corpus and the inputs that once failed. A target panics when a property breaks:
//! a decoder may refuse input, with the `Status` kube-apiserver gives, but never panic.
//!
//! Not part of the API: compiled for `cargo fuzz` (`--cfg fuzzing`) and with the `testing`
//! feature.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::endpoints::Verb;
use crate::endpoints::negotiation::{BodyEncoding, decode_object};
use crate::endpoints::params::Query;
use crate::registry::patch::{PatchSchema, PatchType, apply_patch};
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::registry::store::ContinueToken;
use crate::registry::store::codec::{decode_stored, encode_stored};
use crate::runtime::jsonpath::JsonPath;
use crate::storage::KeyValue;

/// A target: its name, as `cargo fuzz` knows it, and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by the name `cargo fuzz` knows it.
pub const TARGETS: &[Target] = &[
    ("body_json", body_json),
    ("body_yaml", body_yaml),
    ("stored_object", stored_object),
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("continue_token", continue_token),
    ("patch", patch),
    ("jsonpath", jsonpath),
    ("accept", accept),
    ("query", query),
    ("metrics_path", metrics_path),
    ("cel", cel),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A JSON body decodes to an object, or is a 400.
pub fn body_json(data: &[u8]) {
    body(data, BodyEncoding::Json);
}

/// A YAML body decodes to an object, or is a 400.
pub fn body_yaml(data: &[u8]) {
    body(data, BodyEncoding::Yaml);
}

fn body(data: &[u8], encoding: BodyEncoding) {
    match decode_object(data, encoding) {
        Ok((value, _)) => assert!(value.is_object(), "decoded {value}"),
        Err(e) => assert_eq!(e.code(), 400, "{e}"),
    }
}

/// The store's splicing of `resourceVersion` into stored bytes gives what decoding them and
/// setting it gives, or both refuse them.
pub fn stored_object(data: &[u8]) {
    let kv = KeyValue {
        key: "/k".into(),
        value: Bytes::copy_from_slice(data),
        create_revision: 1,
        mod_revision: 7,
    };
    match (encode_stored(&kv), decode_stored(&kv)) {
        (Ok(encoded), Ok(decoded)) => {
            let encoded: Value = serde_json::from_slice(&encoded).expect("spliced JSON parses");
            assert_eq!(encoded, decoded);
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("splice ok: {}, decode ok: {}", a.is_ok(), b.is_ok()),
    }
}

/// A label selector that parses prints as one that parses the same.
pub fn label_selector(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(parsed) = LabelSelector::parse(text) {
        let printed = parsed.to_string();
        let again = LabelSelector::parse(&printed).expect("a printed selector parses");
        assert_eq!(again.to_string(), printed);
    }
}

/// A field selector that parses prints as one that parses to the same requirements. (Not
/// always in the same order: as in kube, terms are ordered by their raw text, and `==`
/// prints as `=`.)
pub fn field_selector(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(parsed) = FieldSelector::parse(text) {
        let printed = parsed.to_string();
        let again = FieldSelector::parse(&printed).expect("a printed selector parses");
        let terms = |selector: &FieldSelector| {
            let mut terms: Vec<String> = selector
                .requirements()
                .iter()
                .map(ToString::to_string)
                .collect();
            terms.sort();
            terms
        };
        assert_eq!(terms(&again), terms(&parsed), "{printed:?}");
    }
}

/// A continue token decodes to one that encodes back to itself, or is a 400.
pub fn continue_token(data: &[u8]) {
    let Some(text) = text(data) else { return };
    match ContinueToken::decode(text) {
        Ok(token) => assert_eq!(ContinueToken::decode(&token.encode()).unwrap(), token),
        Err(e) => assert_eq!(e.code(), 400, "{e}"),
    }
}

/// A patch of any type gives an object or an error; the first byte picks the type.
pub fn patch(data: &[u8]) {
    let Some((kind, body)) = data.split_first() else {
        return;
    };
    let kind = match kind % 3 {
        0 => PatchType::Json,
        1 => PatchType::Merge,
        _ => PatchType::StrategicMerge,
    };
    let original = json!({
        "apiVersion": "v1", "kind": "Thing",
        "metadata": {"name": "a", "labels": {"x": "y"}, "finalizers": ["f"]},
        "spec": {"list": [1, 2, {"name": "n", "v": 1}], "map": {"k": "v"}, "n": 1.5},
    });
    let schema = PatchSchema::empty();
    if let Ok(patched) = apply_patch(kind, &original, body, &schema) {
        assert!(patched.is_object(), "{patched}");
    }
}

/// A JSONPath (printer columns) that parses evaluates on any object without panicking.
pub fn jsonpath(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (path, object) = text.split_once('\n').unwrap_or((text, "{}"));
    let object = serde_json::from_str(object).unwrap_or_else(|_| json!({"a": [1, {"b": "c"}]}));
    if let Ok(path) = JsonPath::parse(path) {
        let _ = path.evaluate(&object);
    }
}

/// Any `Accept` header parses into well-formed ranges.
pub fn accept(data: &[u8]) {
    let Some(text) = text(data) else { return };
    for range in crate::endpoints::accept::parse_accept(Some(text)) {
        let _ = (
            range.is_qualified(),
            range.param("as"),
            range.matches("application", "json"),
        );
    }
}

/// A query string is parsed, or refused with a 4xx, for every verb.
pub fn query(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let verbs = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
    ];
    for verb in verbs {
        let parsed = match Query::parse(Some(text), verb) {
            Ok(parsed) => parsed,
            Err(e) => {
                assert!((400..500).contains(&e.code()), "{text:?}: {e}");
                continue;
            }
        };
        let codes = [
            parsed.get_options().err().map(|e| e.code()),
            parsed.list_options().err().map(|e| e.code()),
            parsed.write_options().err().map(|e| e.code()),
            parsed.delete_options().err().map(|e| e.code()),
            parsed.is_watch().err().map(|e| e.code()),
        ];
        for code in codes.into_iter().flatten() {
            assert!((400..500).contains(&code), "{text:?}: {code}");
        }
    }
}

// The decoders' properties, and every target over its corpus and past crashes, run with the
// crate's unit tests.
#[cfg(test)]
mod properties;
#[cfg(test)]
mod regressions;

/// A custom or external metrics request (the path after `/apis/{group}/{version}/`, then
/// `?` and the query) names a metric, or is refused with 400 or 404; its selectors parse or
/// are 400.
pub fn metrics_path(data: &[u8]) {
    use crate::metrics_apis::fuzzing::{custom_path, external_path, metric_query};
    let Some(text) = text(data) else { return };
    let (path, query) = match text.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (text, None),
    };
    for code in [custom_path(path), external_path(path)] {
        assert!(matches!(code, 200 | 400 | 404), "{code} for {path:?}");
    }
    let code = metric_query(query);
    assert!(matches!(code, 200 | 400), "{code} for {query:?}");
}

/// A CEL expression compiles or is refused with a `CompileError`; one that compiles is
/// evaluated over a small object within admission's budget, to a value, an error, or a
/// refusal for its cost. Never a panic, a stack overflow, or an evaluation that runs long
/// (the cost bound refuses it first).
pub fn cel(data: &[u8]) {
    use extension_apiserver_machinery::cel::cost::{Budget, Unbounded};
    use extension_apiserver_machinery::cel::{Activation, Environment, convert};
    let Some(text) = text(data) else { return };
    let env = Environment::new(&["self", "oldSelf"]);
    let Ok(expression) = env.compile(text) else {
        return;
    };
    let object = json!({
        "name": "flunder",
        "replicas": 3,
        "ratio": 0.5,
        "tags": ["a", "b", "c"],
        "labels": {"app": "wardle"},
        "nested": [[1, 2], [3]],
    });
    let activation = Activation::new()
        .with_json("self", &object)
        .with_json("oldSelf", &object);
    let _ = expression.estimated_cost(&Unbounded);
    if let Ok(value) = expression.evaluate(&activation, &mut Budget::admission()) {
        let _ = convert::to_json(&value);
    }
}
