//! The `Resource` trait: what the framework knows about a user's type.
//!
//! `#[derive(Resource)]` implements it from `#[resource(...)]` attributes; every later stage
//! (storage keys, routes, discovery, OpenAPI, tables) reads the static [`ResourceInfo`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Serialize, de::DeserializeOwned};

/// Whether objects live in a namespace or in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}`.
    Namespaced,
    /// `/apis/{group}/{version}/{plural}/{name}`.
    Cluster,
}

/// The type of a printer column, as CRDs' `additionalPrinterColumns[].type`: it decides
/// how a cell is rendered (`date` as an age, `integer` as a JSON integer, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// Text: what kubectl's JSONPath prints for the value.
    String,
    /// A JSON integer (floats are truncated, as Go does).
    Integer,
    /// A JSON number.
    Number,
    /// A JSON boolean.
    Boolean,
    /// A timestamp shown as its age (`5m`).
    Date,
}

impl ColumnType {
    /// The name in a `Table`'s `columnDefinitions` and in OpenAPI: `string`, `integer`, ….
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Date => "date",
        }
    }

    /// The type called `name`, if it is one of the five.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::String,
            Self::Integer,
            Self::Number,
            Self::Boolean,
            Self::Date,
        ]
        .into_iter()
        .find(|t| t.as_str() == name)
    }
}

impl serde::Serialize for ColumnType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A column of `kubectl get` (a `Table` column), as CRDs' `additionalPrinterColumns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header, e.g. `Reference`.
    pub name: &'static str,
    /// How cells are rendered.
    pub type_: ColumnType,
    /// OpenAPI format (`""` for none), e.g. `int32`, `name`.
    pub format: &'static str,
    /// A JSONPath into the object, e.g. `.spec.reference`.
    pub json_path: &'static str,
    /// Shown by `kubectl explain`-like tools; may be empty.
    pub description: &'static str,
    /// 0: always shown; larger: only with `-o wide`.
    pub priority: i32,
}

/// What a delete does about the object's dependents by default: kube's
/// `rest.GarbageCollectionPolicy`, the strategy's `DefaultGarbageCollectionPolicy`. The
/// cluster's garbage collector acts on the finalizers a delete sets; the store only sets them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GarbageCollectionPolicy {
    /// Dependents are deleted in the background unless the request asks otherwise (custom
    /// resources' and sample-apiserver's behaviour).
    #[default]
    DeleteDependents,
    /// Dependents are orphaned unless the request asks otherwise: a delete without a policy
    /// sets the `orphan` finalizer.
    OrphanDependents,
    /// The kind is never garbage collected: a delete sets neither `orphan` nor
    /// `foregroundDeletion`, and removes them when present.
    Unsupported,
}

/// Where the scale subresource (`{plural}/scale`, an `autoscaling/v1` `Scale`) finds its
/// numbers in the object: a CRD's `subresources.scale`. Paths are dotted JSONPaths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleInfo {
    /// The desired replicas, under `.spec` (e.g. `.spec.replicas`): `Scale.spec.replicas`.
    pub spec_replicas_path: &'static str,
    /// The observed replicas, under `.status` (e.g. `.status.replicas`):
    /// `Scale.status.replicas`.
    pub status_replicas_path: &'static str,
    /// The label selector in its string form, under `.spec` or `.status` (e.g.
    /// `.status.selector`): `Scale.status.selector`, which a HorizontalPodAutoscaler needs.
    pub label_selector_path: Option<&'static str>,
}

/// Everything static about one kind: its names, scope, subresources and presentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group, e.g. `wardle.example.com`.
    pub group: &'static str,
    /// API version, e.g. `v1alpha1`.
    pub version: &'static str,
    /// Kind, e.g. `Flunder`.
    pub kind: &'static str,
    /// Lower-case plural, the URL segment, e.g. `flunders`.
    pub plural: &'static str,
    /// Lower-case singular, e.g. `flunder`.
    pub singular: &'static str,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
    /// Short names for kubectl, e.g. `["fl"]`.
    pub short_names: &'static [&'static str],
    /// Categories for kubectl, e.g. `["all"]`.
    pub categories: &'static [&'static str],
    /// Whether the type has a `status` subresource (`/status`).
    pub status: bool,
    /// The scale subresource (`/scale`), when the type has one.
    pub scale: Option<ScaleInfo>,
    /// Extra columns for `kubectl get`.
    pub printer_columns: &'static [PrinterColumn],
    /// Fields usable in field selectors besides `metadata.name` and `metadata.namespace`,
    /// as dotted paths, e.g. `spec.reference`.
    pub selectable_fields: &'static [&'static str],
}

impl ResourceInfo {
    /// `{group}/{version}`, or `{version}` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Its kind, in kube-core's vocabulary: `wardle.example.com/v1alpha1` `Flunder`.
    pub fn gvk(&self) -> kube_core::GroupVersionKind {
        kube_core::GroupVersionKind::gvk(self.group, self.version, self.kind)
    }

    /// Its resource, in kube-core's vocabulary: `wardle.example.com/v1alpha1` `flunders`.
    pub fn gvr(&self) -> kube_core::GroupVersionResource {
        kube_core::GroupVersionResource::gvr(self.group, self.version, self.plural)
    }

    /// `{Kind}List`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether objects live in namespaces.
    pub fn namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// `{plural}.{group}`, the name kube-apiserver uses in messages (`flunders.wardle.example.com`).
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `{Kind}.{group}`, as in `Flunder.wardle.example.com "x" is invalid`.
    pub fn group_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }
}

/// A Kubernetes kind served by this server.
///
/// Derive it with `#[derive(Resource)]`; implement it by hand only for unusual types. The type
/// is the stored shape: `metadata`, usually `spec` and `status`, without `apiVersion` and `kind`
/// (the framework adds those from [`ResourceInfo`]).
///
/// It is the static description of the kind; what create and update do to its objects is
/// its `Strategy` (extension-apiserver's registry), which the derive implements too.
pub trait Resource:
    Serialize + DeserializeOwned + JsonSchema + Clone + Send + Sync + 'static
{
    /// The static description of this kind.
    const INFO: ResourceInfo;

    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;

    /// The object's metadata, mutable.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;

    /// What a delete does about dependents when the request does not say
    /// (kube's `DefaultGarbageCollectionPolicy`).
    const GARBAGE_COLLECTION_POLICY: GarbageCollectionPolicy =
        GarbageCollectionPolicy::DeleteDependents;

    /// `x-kubernetes-validations` rules on the type itself, from
    /// `#[resource(validation(rule = "..."))]`: published at the root of its schema and
    /// evaluated on every create and update, as a CRD's root rules are. Rules on fields live
    /// in the field's schema (schemars' `extend`, kube's `#[x_kube(validation)]`).
    const VALIDATIONS: &'static [ValidationRule] = &[];
}

/// One `x-kubernetes-validations` rule as a CRD carries it (`ValidationRule` of
/// apiextensions.k8s.io/v1); empty strings are absent fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ValidationRule {
    /// The CEL expression; `self` is the value, `oldSelf` the old one in a transition rule.
    pub rule: &'static str,
    /// The message when the rule is false (default `failed rule: <rule>`).
    pub message: &'static str,
    /// A CEL expression giving the message.
    pub message_expression: &'static str,
    /// `FieldValueInvalid` (default), `FieldValueForbidden`, `FieldValueRequired` or
    /// `FieldValueDuplicate`.
    pub reason: &'static str,
    /// Where the error points, relative to the value (`.spec.reference`).
    pub field_path: &'static str,
    /// Evaluate a transition rule also without an old value (`oldSelf` is then optional).
    pub optional_old_self: bool,
}

impl ValidationRule {
    /// The rule as its schema publishes it (camelCase, empty fields left out).
    pub fn to_json(&self) -> serde_json::Value {
        let mut rule = serde_json::Map::new();
        rule.insert("rule".into(), self.rule.into());
        for (key, value) in [
            ("message", self.message),
            ("messageExpression", self.message_expression),
            ("reason", self.reason),
            ("fieldPath", self.field_path),
        ] {
            if !value.is_empty() {
                rule.insert(key.into(), value.into());
            }
        }
        if self.optional_old_self {
            rule.insert("optionalOldSelf".into(), true.into());
        }
        serde_json::Value::Object(rule)
    }
}

/// A namespaced `Flunder` with a status, for unit tests across the crate.
#[cfg(test)]
pub(crate) const TEST_INFO: ResourceInfo = ResourceInfo {
    group: "wardle.example.com",
    version: "v1alpha1",
    kind: "Flunder",
    plural: "flunders",
    singular: "flunder",
    scope: Scope::Namespaced,
    short_names: &[],
    categories: &[],
    status: true,
    scale: None,
    printer_columns: &[],
    selectable_fields: &[],
};
