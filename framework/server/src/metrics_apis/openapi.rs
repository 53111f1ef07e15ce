//! OpenAPI of the metrics APIs: their `GET` paths (as custom-metrics-apiserver's installer
//! registers them, with their path and query parameters) and the `k8s.io/metrics` types they
//! answer, named as Kubernetes names them (`io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.
//! MetricValueList`). Go's adapters publish none (kube-apiserver logs "OpenAPI spec does not
//! exist" for them); here the aggregator finds both documents.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ListMeta, Time};
use serde_json::{Value, json};

use super::{CUSTOM_GROUP, EXTERNAL_GROUP, EXTERNAL_VERSION};
use crate::openapi::operations::{OBJECT_TYPES, Operation, PathItem, hoist, ok, operation_id};
use crate::openapi::params::{self, Param};
use crate::openapi::{ExtraPaths, neutral_definitions};

const OBJECT_REFERENCE: &str = "io.k8s.api.core.v1.ObjectReference";
const LABEL_SELECTOR: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const TIME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Time";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

const DOC: &str = "list custom metrics describing an object or objects";
const METRIC_LABEL_SELECTOR: &str =
    "A selector to restrict the series of the metric by their labels. Defaults to every series.";
const EXTERNAL_LABEL_SELECTOR: &str =
    "A selector to restrict the series of the metric by their labels. Defaults to everything.";

/// The paths of `custom.metrics.k8s.io/{version}` (`v1beta2` or `v1beta1`).
pub(crate) fn custom(version: &str) -> ExtraPaths {
    let prefix = format!("/apis/{CUSTOM_GROUP}/{version}");
    let list = custom_definition_name(version, "MetricValueList");
    let namespace = || params::namespace();
    let resource = || params::path("resource", "the name of the resource");
    let name = || {
        params::path(
            "name",
            "name of the described object, or * for those the labelSelector selects",
        )
    };
    let metric = || params::path("metric", "the name of the metric");
    let items = vec![
        item(
            format!("{prefix}/{{resource}}/{{name}}/{{metric}}"),
            "listMetricValue",
            vec![resource(), name(), metric()],
            &list,
        ),
        item(
            format!("{prefix}/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}"),
            "listNamespacedMetricValue",
            vec![namespace(), resource(), name(), metric()],
            &list,
        ),
        item(
            format!("{prefix}/namespaces/{{namespace}}/metrics/{{metric}}"),
            "readMetricValueForNamespace",
            vec![namespace(), metric()],
            &list,
        ),
    ];
    ExtraPaths {
        group: CUSTOM_GROUP.into(),
        version: version.into(),
        items,
        definitions: custom_definitions(version),
    }
}

/// The path of `external.metrics.k8s.io/v1beta1`.
pub(crate) fn external() -> ExtraPaths {
    let path =
        format!("/apis/{EXTERNAL_GROUP}/{EXTERNAL_VERSION}/namespaces/{{namespace}}/{{metric}}");
    let list = external_definition_name("ExternalMetricValueList");
    let mut item = item(
        path,
        "listNamespacedExternalMetricValue",
        vec![
            params::namespace(),
            params::path("metric", "the name of the metric"),
        ],
        &list,
    );
    // Of the external API the label selector filters the series, not objects.
    for param in &mut item.parameters {
        if param.name == "labelSelector" {
            param.description = EXTERNAL_LABEL_SELECTOR.into();
        }
    }
    item.parameters.retain(|p| p.name != "metricLabelSelector");
    ExtraPaths {
        group: EXTERNAL_GROUP.into(),
        version: EXTERNAL_VERSION.into(),
        items: vec![item],
        definitions: external_definitions(),
    }
}

/// One `GET` path answering `schema`, with `path_params`, `labelSelector`,
/// `metricLabelSelector` and `pretty`.
fn item(path: String, name: &str, path_params: Vec<Param>, schema: &str) -> PathItem {
    let (id, tag) = operation_id(name, &path);
    let mut parameters: Vec<Param> = path_params;
    parameters.push(params::pretty());
    parameters.push(params::query(
        "labelSelector",
        "string",
        params::LABEL_SELECTOR,
    ));
    parameters.push(params::query(
        "metricLabelSelector",
        "string",
        METRIC_LABEL_SELECTOR,
    ));
    let operation = Operation {
        method: "get",
        id,
        tag,
        description: DOC.into(),
        resource: None,
        parameters,
        body: None,
        responses: vec![ok(schema)],
        produces: OBJECT_TYPES,
    };
    hoist(path, vec![operation])
}

fn custom_definition_name(version: &str, kind: &str) -> String {
    format!("io.k8s.metrics.pkg.apis.custom_metrics.{version}.{kind}")
}

fn external_definition_name(kind: &str) -> String {
    format!("io.k8s.metrics.pkg.apis.external_metrics.{EXTERNAL_VERSION}.{kind}")
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/$defs/{name}")})
}

/// The apimachinery types the metrics types refer to.
fn apimachinery() -> BTreeMap<String, Value> {
    neutral_definitions(|generator| {
        generator.subschema_for::<ObjectReference>();
        generator.subschema_for::<LabelSelector>();
        generator.subschema_for::<ListMeta>();
        generator.subschema_for::<Time>();
        generator.subschema_for::<Quantity>();
    })
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

/// A list kind: `apiVersion`, `kind`, `metadata`, `items` of `item`.
fn list_schema(description: &str, item: &str, (group, version, kind): (&str, &str, &str)) -> Value {
    json!({
        "description": description,
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
            "metadata": reference(LIST_META),
            "items": {"type": "array", "description": "the values", "items": reference(item)},
        },
        "x-kubernetes-group-version-kind": gvk(group, version, kind),
    })
}

fn custom_definitions(version: &str) -> BTreeMap<String, Value> {
    let name = |kind| custom_definition_name(version, kind);
    let value = name("MetricValue");
    let mut properties = json!({
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "describedObject": reference(OBJECT_REFERENCE),
        "timestamp": reference(TIME),
        "value": reference(QUANTITY),
    });
    let mut definitions = apimachinery();
    let required = if version == "v1beta1" {
        properties["metricName"] =
            json!({"type": "string", "description": "the name of the metric"});
        properties["window"] = json!({"type": "integer", "format": "int64", "description": "over how many seconds the value was measured"});
        properties["selector"] = reference(LABEL_SELECTOR);
        json!([
            "describedObject",
            "metricName",
            "timestamp",
            "value",
            "selector"
        ])
    } else {
        let identifier = name("MetricIdentifier");
        properties["metric"] = reference(&identifier);
        properties["windowSeconds"] = json!({"type": "integer", "format": "int64", "description": "over how many seconds the value was measured"});
        definitions.insert(
            identifier,
            json!({
                "description": "MetricIdentifier names a metric and the selector of its series.",
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "description": "the name of the metric"},
                    "selector": reference(LABEL_SELECTOR),
                },
            }),
        );
        json!(["describedObject", "metric", "timestamp", "value"])
    };
    definitions.insert(
        value.clone(),
        json!({
            "description": "MetricValue is the value of a metric for one object.",
            "type": "object",
            "required": required,
            "properties": properties,
        }),
    );
    definitions.insert(
        name("MetricValueList"),
        list_schema(
            "MetricValueList is a list of values of a metric for objects.",
            &value,
            (CUSTOM_GROUP, version, "MetricValueList"),
        ),
    );
    definitions
}

fn external_definitions() -> BTreeMap<String, Value> {
    let value = external_definition_name("ExternalMetricValue");
    let mut definitions = apimachinery();
    definitions.insert(value.clone(), json!({
        "description": "ExternalMetricValue is one series of a metric not tied to any Kubernetes object.",
        "type": "object",
        "required": ["metricName", "metricLabels", "timestamp", "value"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metricName": {"type": "string", "description": "the name of the metric"},
            "metricLabels": {"type": "object", "description": "the labels of the series", "additionalProperties": {"type": "string"}},
            "timestamp": reference(TIME),
            "window": {"type": "integer", "format": "int64", "description": "over how many seconds the value was measured"},
            "value": reference(QUANTITY),
        },
    }));
    definitions.insert(
        external_definition_name("ExternalMetricValueList"),
        list_schema(
            "ExternalMetricValueList is a list of series of an external metric.",
            &value,
            (EXTERNAL_GROUP, EXTERNAL_VERSION, "ExternalMetricValueList"),
        ),
    );
    definitions
}
