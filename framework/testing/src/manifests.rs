//! Reading YAML manifests in tests: the documents of a multi-document file, each parsed as
//! its Kubernetes type with no field that type does not have (what `kubectl apply
//! --validate=strict` would refuse).

use serde::de::DeserializeOwned;
use serde_json::Value;

/// The documents of `yaml` (`---`-separated), empty ones left out.
pub fn documents(yaml: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// Parses `value` as `T`; panics, naming the kind, when it does not parse or has a field `T`
/// does not know.
///
/// ```
/// use extension_apiserver_testing::manifests::strict;
/// use k8s_openapi::api::core::v1::Namespace;
/// let ns: Namespace = strict(&serde_json::json!({"kind": "Namespace", "metadata": {"name": "a"}}));
/// assert_eq!(ns.metadata.name.as_deref(), Some("a"));
/// ```
pub fn strict<T: DeserializeOwned>(value: &Value) -> T {
    let mut unknown = Vec::new();
    let parsed: T =
        extension_apiserver::codec::unknown::from_value_reporting_unknown(value, |path| {
            unknown.push(path.to_string())
        })
        .unwrap_or_else(|e| panic!("{} does not parse: {e}\n{value:#}", value["kind"]));
    assert!(
        unknown.is_empty(),
        "unknown fields {unknown:?} in {value:#}"
    );
    parsed
}
