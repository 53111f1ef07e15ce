//! Properties of every decoder of outside input, on generated input (proptest, in the normal
//! test run): JSON and YAML bodies, label and field selectors, continue tokens, JSONPath, the
//! three patch types and the query parameters of every verb never panic, refuse bad input
//! with a 400-class error, and round-trip what they print. (The store's resourceVersion
//! splicer and the Accept parser have theirs beside their code.)

use crate::endpoints::negotiation::{BodyEncoding, decode_object};
use crate::registry::patch::{PatchSchema, PatchType, apply_patch};
use crate::registry::selector::LabelSelector;
use crate::registry::store::ContinueToken;
use crate::runtime::jsonpath::JsonPath;
use crate::runtime::nesting;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9 ]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z$/]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value a few levels deep whose strings and keys are made of YAML's syntax.
fn tricky_value() -> impl Strategy<Value = Value> {
    let text = "[a-z\\[\\]{}:,'\"#|>&*!\n -]{0,10}";
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        text.prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text, inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Text made of the characters selectors, paths and queries are made of, and some others.
fn syntax_soup() -> impl Strategy<Value = String> {
    "[a-z0-9=!,()\\[\\]{}.$@*?:'\"/ %&+\\-_\\\\~<>|é]{0,40}"
}

/// A label key, value or name as Kubernetes allows them.
fn label_word() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9.-]{0,8}[a-z0-9])?"
}

fn label_requirement() -> impl Strategy<Value = String> {
    let values = || prop::collection::vec(label_word(), 1..3).prop_map(|v| v.join(","));
    prop_oneof![
        (label_word(), label_word()).prop_map(|(k, v)| format!("{k}={v}")),
        (label_word(), label_word()).prop_map(|(k, v)| format!("{k}!={v}")),
        (label_word(), values()).prop_map(|(k, v)| format!("{k} in ({v})")),
        (label_word(), values()).prop_map(|(k, v)| format!("{k} notin ({v})")),
        label_word(),
        label_word().prop_map(|k| format!("!{k}")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn label_selectors_never_panic(text in syntax_soup()) {
        let _ = LabelSelector::parse(&text);
    }

    #[test]
    fn label_selectors_print_what_parses_the_same(
        requirements in prop::collection::vec(label_requirement(), 1..4)
    ) {
        let text = requirements.join(",");
        let parsed = LabelSelector::parse(&text).unwrap();
        let again = LabelSelector::parse(&parsed.to_string()).unwrap();
        prop_assert_eq!(parsed.to_string(), again.to_string());
    }

    #[test]
    fn field_selectors_never_panic_and_round_trip(text in syntax_soup()) {
        // The fuzz target's property (`super::field_selector`).
        super::field_selector(text.as_bytes());
    }

    #[test]
    fn continue_tokens_round_trip_and_garbage_is_a_400(
        rv in 1i64..i64::MAX, last in "[a-z0-9/-]{0,20}", garbage in syntax_soup()
    ) {
        let token = ContinueToken::after(rv, &last);
        prop_assert_eq!(ContinueToken::decode(&token.encode()).unwrap(), token);
        if let Err(e) = ContinueToken::decode(&garbage) {
            prop_assert_eq!(e.code(), 400);
        }
    }

    #[test]
    fn bodies_decode_to_an_object_or_a_400(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        text in "[a-z0-9{}\\[\\]:,\"'&*!|>#\n -]{0,64}",
        object in json_value(),
    ) {
        let json = object.to_string().into_bytes();
        for body in [bytes, text.into_bytes(), json] {
            for encoding in [BodyEncoding::Json, BodyEncoding::Yaml] {
                match decode_object(&body, encoding) {
                    Ok((value, _)) => prop_assert!(value.is_object()),
                    Err(e) => prop_assert_eq!(e.code(), 400),
                }
            }
        }
    }

    /// The depth scan run before parsing refuses nothing that YAML and JSON writers make of
    /// a shallow value, whatever its strings hold (brackets, quotes, `#`, line breaks).
    #[test]
    fn written_documents_pass_the_depth_scan(object in tricky_value()) {
        let yaml = serde_norway::to_string(&object).unwrap();
        prop_assert_eq!(nesting::check_yaml(yaml.as_bytes()), Ok(()), "{}", yaml);
        let json = object.to_string();
        prop_assert_eq!(nesting::check_yaml(json.as_bytes()), Ok(()), "{}", json);
        prop_assert_eq!(nesting::check_json(json.as_bytes()), Ok(()));
    }

    #[test]
    fn jsonpath_never_panics(text in syntax_soup(), object in json_value()) {
        if let Ok(path) = JsonPath::parse(&text) {
            let _ = path.evaluate(&object);
        }
    }

    #[test]
    fn patches_never_panic_and_always_give_an_object(
        original in json_value(), patch in json_value(), body in syntax_soup()
    ) {
        let original = json!({"metadata": {"name": "a"}, "spec": original});
        let schema = PatchSchema::empty();
        for kind in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
            for bytes in [patch.to_string().into_bytes(), body.clone().into_bytes()] {
                if let Ok(patched) = apply_patch(kind, &original, &bytes, &schema) {
                    prop_assert!(patched.is_object());
                }
            }
        }
    }

    #[test]
    fn query_parameters_are_parsed_or_refused_with_a_4xx(query in syntax_soup()) {
        // The fuzz target's property (`super::query`), on proptest's inputs.
        super::query(query.as_bytes());
    }
}
