//! The definitions (schemas) of the OpenAPI documents: each served kind and its list, named as
//! kube-apiserver names CRD definitions (`com.example.wardle.v1alpha1.Flunder`), the types they
//! use, and the apimachinery types the routes refer to (`ObjectMeta`, `Status`, ...).
//!
//! Built once at start from the resources' schemars schemas, in a neutral form (references
//! `#/$defs/{final name}`) that `schema::convert` turns into either dialect.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResourceList, DeleteOptions, ListMeta, ObjectMeta, Patch, Status,
    WatchEvent,
};
use schemars::SchemaGenerator;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::schema::{Dialect, NEUTRAL_PREFIX, convert};
use crate::registry::served::{ServedGroup, ServedVersion};
use crate::runtime::ResourceInfo;

/// Names of the apimachinery definitions the routes refer to.
pub(crate) mod meta {
    /// `ObjectMeta`.
    pub(crate) const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
    /// `ListMeta`.
    pub(crate) const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
    /// `OwnerReference`.
    pub(crate) const OWNER_REFERENCE: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference";
    /// `Status`, the answer of deletes.
    pub(crate) const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
    /// `DeleteOptions`, the body of deletes.
    pub(crate) const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
    /// `Patch`, the body of patches.
    pub(crate) const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
    /// `WatchEvent`, the items of watch streams.
    pub(crate) const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
    /// `APIGroupList` (`/apis`).
    pub(crate) const API_GROUP_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList";
    /// `autoscaling/v1` `Scale`, served by scale subresources.
    pub(crate) const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
    /// `APIGroup` (`/apis/{group}`).
    pub(crate) const API_GROUP: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup";
    /// `APIResourceList` (`/apis/{group}/{version}`).
    pub(crate) const API_RESOURCE_LIST: &str =
        "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";
}

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// `com.example.wardle.v1alpha1`: the reversed group and the version, as kube prefixes CRDs;
/// `io.k8s.api.autoscaling.v1` for a built-in group (no dot), as Kubernetes names its own
/// types (a scale subresource serves `autoscaling/v1` `Scale`).
fn namespace(group: &str, version: &str) -> String {
    if !group.is_empty() && !group.contains('.') {
        return format!("io.k8s.api.{group}.{version}");
    }
    let mut parts: Vec<&str> = group.split('.').filter(|p| !p.is_empty()).rev().collect();
    parts.push(version);
    parts.join(".")
}

/// The definition name of a kind, e.g. `com.example.wardle.v1alpha1.Flunder`.
pub(crate) fn kind_name(info: &ResourceInfo) -> String {
    format!("{}.{}", namespace(info.group, info.version), info.kind)
}

/// The definition name of a kind's list, e.g. `com.example.wardle.v1alpha1.FlunderList`.
pub(crate) fn list_name(info: &ResourceInfo) -> String {
    format!(
        "{}.{}",
        namespace(info.group, info.version),
        info.list_kind()
    )
}

/// Every definition of the server, by final name, with neutral references.
#[derive(Debug)]
pub(crate) struct Catalog {
    schemas: BTreeMap<String, Value>,
}

impl Catalog {
    /// Collects the apimachinery definitions and those of every served kind.
    pub(crate) fn build(groups: &[ServedGroup]) -> Self {
        let mut schemas = meta_definitions(groups);
        for group in groups {
            for version in &group.versions {
                collect_version(&mut schemas, &group.name, version);
            }
        }
        Self { schemas }
    }

    /// Adds `definitions` (neutral references), keeping any of the same name already known.
    pub(crate) fn extend(&mut self, definitions: BTreeMap<String, Value>) {
        for (name, schema) in definitions {
            self.schemas.entry(name).or_insert(schema);
        }
    }

    /// The definitions `roots` refer to, directly or through others, converted to `dialect`.
    pub(crate) fn closure<'a>(
        &self,
        roots: impl IntoIterator<Item = &'a str>,
        dialect: Dialect,
    ) -> Map<String, Value> {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut pending: Vec<&str> = roots.into_iter().collect();
        while let Some(name) = pending.pop() {
            let Some((name, schema)) = self.schemas.get_key_value(name) else {
                continue;
            };
            if seen.insert(name.as_str()) {
                neutral_refs(schema, &mut pending);
            }
        }
        seen.into_iter()
            .map(|name| {
                (
                    name.to_string(),
                    convert(self.schemas[name].clone(), dialect),
                )
            })
            .collect()
    }
}

/// Pushes the names of the neutral references in `schema`.
fn neutral_refs<'a>(schema: &'a Value, out: &mut Vec<&'a str>) {
    match schema {
        Value::Object(map) => {
            if let Some(name) = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(NEUTRAL_PREFIX))
            {
                out.push(name);
            }
            map.values().for_each(|v| neutral_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| neutral_refs(v, out)),
        _ => {}
    }
}

/// The neutral definitions of the types `add` asks `generator` for, under their Kubernetes
/// names (k8s-openapi's types), for definitions written by hand that refer to them.
pub(crate) fn neutral_definitions(
    add: impl FnOnce(&mut SchemaGenerator),
) -> BTreeMap<String, Value> {
    let mut generator = generator();
    add(&mut generator);
    generator.take_definitions(false).into_iter().collect()
}

fn generator() -> SchemaGenerator {
    // `$defs` references, the neutral form; no `$schema`, which neither dialect has.
    SchemaSettings::draft2020_12()
        .with(|s| s.meta_schema = None)
        .into_generator()
}

/// The apimachinery types, under their Kubernetes names (k8s-openapi's schema names), with the
/// `x-kubernetes-*` extensions kube publishes and k8s-openapi does not carry.
fn meta_definitions(groups: &[ServedGroup]) -> BTreeMap<String, Value> {
    let mut generator = generator();
    generator.subschema_for::<ObjectMeta>();
    generator.subschema_for::<ListMeta>();
    generator.subschema_for::<Status>();
    generator.subschema_for::<DeleteOptions>();
    generator.subschema_for::<Patch>();
    generator.subschema_for::<WatchEvent<Value>>();
    generator.subschema_for::<APIGroupList>();
    generator.subschema_for::<APIGroup>();
    generator.subschema_for::<APIResourceList>();
    generator.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>();
    let mut schemas: BTreeMap<String, Value> =
        generator.take_definitions(false).into_iter().collect();
    add_meta_extensions(&mut schemas, groups);
    schemas
}

fn add_meta_extensions(schemas: &mut BTreeMap<String, Value>, groups: &[ServedGroup]) {
    let core = |kind: &str| vec![("", "v1", kind.to_string())];
    // DeleteOptions and WatchEvent are registered in every group version of the scheme.
    let everywhere = |kind: &str| {
        let mut gvks = core(kind);
        for group in groups {
            for version in &group.versions {
                gvks.push((
                    group.name.as_str(),
                    version.version.as_str(),
                    kind.to_string(),
                ));
            }
        }
        gvks
    };
    let extensions = [
        (meta::STATUS, core("Status")),
        (meta::API_GROUP_LIST, core("APIGroupList")),
        (meta::API_GROUP, core("APIGroup")),
        (meta::API_RESOURCE_LIST, core("APIResourceList")),
        (
            meta::SCALE,
            vec![("autoscaling", "v1", "Scale".to_string())],
        ),
        (meta::DELETE_OPTIONS, everywhere("DeleteOptions")),
        (meta::WATCH_EVENT, everywhere("WatchEvent")),
    ];
    for (name, gvks) in extensions {
        if let Some(Value::Object(schema)) = schemas.get_mut(name) {
            schema.insert("x-kubernetes-group-version-kind".into(), gvk_list(gvks));
        }
    }
    add_object_meta_list_types(schemas);
    // k8s-openapi requires `Status.metadata` (not an `Option` in Rust); Kubernetes does not.
    if let Some(Value::Object(status)) = schemas.get_mut(meta::STATUS) {
        status.remove("required");
    }
}

fn gvk_list(mut gvks: Vec<(&str, &str, String)>) -> Value {
    gvks.sort();
    gvks.dedup();
    gvks.into_iter()
        .map(|(group, version, kind)| json!({"group": group, "kind": kind, "version": version}))
        .collect()
}

/// List and map semantics of `metadata`, used by strategic merge patch and server-side apply.
fn add_object_meta_list_types(schemas: &mut BTreeMap<String, Value>) {
    let fields = [
        (
            "finalizers",
            json!({"x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"}),
        ),
        ("managedFields", json!({"x-kubernetes-list-type": "atomic"})),
        (
            "ownerReferences",
            json!({
                "x-kubernetes-list-map-keys": ["uid"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "uid",
                "x-kubernetes-patch-strategy": "merge",
            }),
        ),
    ];
    if let Some(properties) = schemas
        .get_mut(meta::OBJECT_META)
        .and_then(|s| s.get_mut("properties"))
    {
        for (field, extensions) in fields {
            if let (Some(Value::Object(field)), Value::Object(extensions)) =
                (properties.get_mut(field), extensions)
            {
                field.extend(extensions);
            }
        }
    }
    if let Some(Value::Object(owner)) = schemas.get_mut(meta::OWNER_REFERENCE) {
        owner.insert("x-kubernetes-map-type".into(), "atomic".into());
    }
}

/// How a resource's schema function answered: a reference to a definition, or inline.
enum Root {
    /// The kind's definition is the generator's definition it referred to, renamed.
    Definition,
    /// Another kind already took this definition: the kind gets a copy under its own name.
    Copy(String),
    Inline(Value),
}

/// Adds the kinds of one group version and every type they use, named under the version.
fn collect_version(schemas: &mut BTreeMap<String, Value>, group: &str, version: &ServedVersion) {
    let mut generator = generator();
    let mut renames: HashMap<String, String> = HashMap::new();
    let kinds: Vec<(ResourceInfo, Root)> = version
        .resources
        .iter()
        .map(|r| {
            (
                r.info,
                resolve_root((r.schema)(&mut generator).to_value(), &r.info, &mut renames),
            )
        })
        .collect();
    let mut kinds = kinds;
    kinds.extend(subresource_kinds(
        &mut generator,
        &mut renames,
        group,
        version,
    ));
    let prefix = namespace(group, &version.version);
    let definitions = generator.take_definitions(false);
    add_definitions(schemas, definitions, &prefix, &mut renames);
    for (info, root) in kinds {
        add_kind(schemas, &info, root, &renames);
    }
}

/// The kinds the version's subresources answer that it serves nowhere else (a view's
/// computed object), and the bodies of its actions (their definitions come with the
/// generator's).
fn subresource_kinds(
    generator: &mut SchemaGenerator,
    renames: &mut HashMap<String, String>,
    group: &str,
    version: &ServedVersion,
) -> Vec<(ResourceInfo, Root)> {
    let served: Vec<String> = version
        .resources
        .iter()
        .map(|r| kind_name(&r.info))
        .collect();
    let mut kinds = Vec::new();
    for resource in &version.resources {
        for handler in resource
            .subresources
            .iter()
            .filter_map(|s| s.handler.as_ref())
        {
            if let Some(body) = handler.body_schema() {
                body(generator);
            }
            let Some(answer) = handler.answer() else {
                continue;
            };
            let info = ResourceInfo {
                group: answer.group,
                version: answer.version,
                kind: answer.kind,
                ..resource.info
            };
            let ours = (answer.group, answer.version) == (group, version.version.as_str());
            let name = kind_name(&info);
            if ours && !served.contains(&name) && !kinds.iter().any(|(i, _)| kind_name(i) == name) {
                let root = (answer.schema)(generator).to_value();
                kinds.push((info, resolve_root(root, &info, renames)));
            }
        }
    }
    kinds
}

/// The definition an action's body refers to, `{group version prefix}.{Type}`; `None` when the
/// body is any JSON.
pub(crate) fn body_name(
    parent: &ResourceInfo,
    body: crate::registry::served::SchemaFn,
) -> Option<String> {
    let root = body(&mut generator()).to_value();
    let target = local_ref(&root)?;
    Some(format!(
        "{}.{target}",
        namespace(parent.group, parent.version)
    ))
}

/// The definition of a subresource's answer: `Status` as apimachinery names it.
pub(crate) fn answer_name(info: &ResourceInfo) -> String {
    if info.kind == "Status" && info.group.is_empty() {
        return meta::STATUS.into();
    }
    kind_name(info)
}

/// Decides where a kind's schema comes from; a referenced definition takes the kind's name.
fn resolve_root(root: Value, info: &ResourceInfo, renames: &mut HashMap<String, String>) -> Root {
    match local_ref(&root) {
        Some(target) if !renames.contains_key(&target) => {
            renames.insert(target, kind_name(info));
            Root::Definition
        }
        Some(target) => Root::Copy(target),
        None => Root::Inline(root),
    }
}

/// Adds the generator's definitions under their final names.
fn add_definitions(
    schemas: &mut BTreeMap<String, Value>,
    definitions: Map<String, Value>,
    prefix: &str,
    renames: &mut HashMap<String, String>,
) {
    for name in definitions.keys() {
        if !renames.contains_key(name) {
            let unique = unique_name(prefix, name, schemas, renames);
            renames.insert(name.clone(), unique);
        }
    }
    for (name, schema) in definitions {
        // Apimachinery types are already there, with their extensions.
        schemas
            .entry(renames[&name].clone())
            .or_insert_with(|| rename_refs(schema, renames));
    }
}

/// Adds a kind's definition, decorated, and its list's.
fn add_kind(
    schemas: &mut BTreeMap<String, Value>,
    info: &ResourceInfo,
    root: Root,
    renames: &HashMap<String, String>,
) {
    let name = kind_name(info);
    let schema = match root {
        Root::Definition => schemas.remove(&name).unwrap_or_default(),
        Root::Copy(target) => schemas.get(&renames[&target]).cloned().unwrap_or_default(),
        Root::Inline(schema) => rename_refs(schema, renames),
    };
    schemas.insert(name, kind_schema(schema, info));
    schemas.insert(list_name(info), list_schema(info));
}

/// The definition name `schema` refers to when it is only `{"$ref": "#/$defs/..."}`.
fn local_ref(schema: &Value) -> Option<String> {
    let map = schema.as_object().filter(|m| m.len() == 1)?;
    let reference = map.get("$ref")?.as_str()?;
    Some(decode_ref_name(reference.strip_prefix(NEUTRAL_PREFIX)?))
}

/// A name for a nested type under the version's prefix; apimachinery types keep their own.
fn unique_name(
    prefix: &str,
    name: &str,
    schemas: &BTreeMap<String, Value>,
    renames: &HashMap<String, String>,
) -> String {
    if name.starts_with("io.k8s.") {
        return name.to_string();
    }
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let base = format!("{prefix}.{safe}");
    let taken = |candidate: &String| {
        schemas.contains_key(candidate) || renames.values().any(|v| v == candidate)
    };
    let mut candidate = base.clone();
    let mut n = 2;
    while taken(&candidate) {
        candidate = format!("{base}{n}");
        n += 1;
    }
    candidate
}

/// Points the references of `schema` at the final names.
fn rename_refs(mut schema: Value, renames: &HashMap<String, String>) -> Value {
    fn walk(value: &mut Value, renames: &HashMap<String, String>) {
        match value {
            Value::Object(map) => {
                let target = map
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix(NEUTRAL_PREFIX));
                if let Some(new) = target.and_then(|t| renames.get(&decode_ref_name(t))) {
                    map.insert("$ref".into(), format!("{NEUTRAL_PREFIX}{new}").into());
                }
                map.values_mut().for_each(|v| walk(v, renames));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, renames)),
            _ => {}
        }
    }
    walk(&mut schema, renames);
    schema
}

/// Undoes schemars' encoding of a name in a reference (JSON pointer and percent escapes).
fn decode_ref_name(encoded: &str) -> String {
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        let hex = tail.get(..2).and_then(|h| std::str::from_utf8(h).ok());
        match (byte, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(decoded)) => {
                bytes.push(decoded);
                rest = &tail[2..];
            }
            _ => {
                bytes.push(byte);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&bytes)
        .replace("~1", "/")
        .replace("~0", "~")
}

/// The kind's schema as Kubernetes publishes it: `apiVersion`, `kind`, `metadata` referring to
/// `ObjectMeta`, and the group-version-kind that `kubectl explain` and `kubectl apply` look for.
fn kind_schema(schema: Value, info: &ResourceInfo) -> Value {
    let mut map = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    map.entry("type").or_insert_with(|| "object".into());
    let properties = map.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(properties) = properties {
        let description = properties
            .get("metadata")
            .and_then(|m| m.get("description"))
            .cloned()
            .unwrap_or_else(|| METADATA_DOC.into());
        let metadata = reference(meta::OBJECT_META, description);
        properties.insert("metadata".into(), metadata);
        properties.insert(
            "apiVersion".into(),
            json!({"description": API_VERSION_DOC, "type": "string"}),
        );
        properties.insert(
            "kind".into(),
            json!({"description": KIND_DOC, "type": "string"}),
        );
    }
    // Typed Kubernetes objects never require their metadata; the server fills it.
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|r| !matches!(r.as_str(), Some("metadata" | "apiVersion" | "kind")));
        if required.is_empty() {
            map.remove("required");
        }
    }
    let gvk = gvk_list(vec![(info.group, info.version, info.kind.to_string())]);
    map.insert("x-kubernetes-group-version-kind".into(), gvk);
    Value::Object(map)
}

fn list_schema(info: &ResourceInfo) -> Value {
    let items_doc = format!(
        "List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
        info.plural
    );
    json!({
        "description": format!("{} is a list of {}", info.list_kind(), info.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION_DOC, "type": "string"},
            "items": {
                "description": items_doc,
                "type": "array",
                "items": {"$ref": format!("{NEUTRAL_PREFIX}{}", kind_name(info))},
            },
            "kind": {"description": KIND_DOC, "type": "string"},
            "metadata": reference(meta::LIST_META, LIST_METADATA_DOC.into()),
        },
        "x-kubernetes-group-version-kind":
            gvk_list(vec![(info.group, info.version, info.list_kind())]),
    })
}

fn reference(name: &str, description: Value) -> Value {
    json!({"$ref": format!("{NEUTRAL_PREFIX}{name}"), "description": description})
}

/// The schema of `T` as a neutral definition map, for tests.
#[cfg(test)]
pub(crate) fn definitions_of<T: schemars::JsonSchema>() -> Map<String, Value> {
    let mut generator = generator();
    generator.subschema_for::<T>();
    generator.take_definitions(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kube_crd_naming() {
        assert_eq!(
            namespace("wardle.example.com", "v1alpha1"),
            "com.example.wardle.v1alpha1"
        );
        assert_eq!(namespace("", "v1"), "v1");
        assert_eq!(namespace("autoscaling", "v1"), "io.k8s.api.autoscaling.v1");
    }

    #[test]
    fn decodes_reference_names() {
        assert_eq!(decode_ref_name("Wrapper%3CFoo%3E"), "Wrapper<Foo>");
        assert_eq!(decode_ref_name("a~1b~0c"), "a/b~c");
        assert_eq!(decode_ref_name("100%"), "100%");
    }

    #[test]
    fn meta_types_are_named_as_in_kubernetes() {
        let defs = definitions_of::<ObjectMeta>();
        assert!(defs.contains_key(meta::OBJECT_META));
        assert!(defs.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.Time"));
    }
}
