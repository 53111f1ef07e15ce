//! The routes of the served resources as OpenAPI operations, following kube-apiserver's
//! installer: which paths exist for which verbs, their operation ids, descriptions, actions,
//! parameters, bodies and responses. Rendering to v2 or v3 JSON is in `render`.

use super::definitions::{answer_name, body_name, kind_name, list_name, meta};
use serde_json::Value;

use super::params::{self, Param};
use crate::registry::served::{ServedResource, ServedSubresource, ServedVersion};
use crate::registry::subresource::{Subresource, SubresourceKind};
use crate::runtime::ResourceInfo;

/// The query parameters of a subresource's options, from their schema: kube's installer lists
/// each field of `PodLogOptions` as one.
fn options_params(handler: &Subresource) -> Vec<Param> {
    let schema = (handler.options_schema())(&mut schemars::SchemaGenerator::default()).to_value();
    let schema = match schema.get("$ref") {
        // A named type: its definition, from a generator that keeps it.
        Some(_) => {
            let mut generator = schemars::SchemaGenerator::default();
            (handler.options_schema())(&mut generator);
            let definitions = generator.take_definitions(false);
            definitions
                .into_iter()
                .next()
                .map(|(_, d)| d)
                .unwrap_or_default()
        }
        None => schema,
    };
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let types: Vec<&str> = match property.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let type_ = ["boolean", "integer", "number", "array"]
                .into_iter()
                .find(|t| types.contains(t))
                .unwrap_or("string");
            let description = property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            params::query(
                crate::registry::subresource::intern(name),
                type_,
                description,
            )
        })
        .collect()
}

/// Media types of single objects.
pub(crate) const OBJECT_TYPES: &[&str] = &["application/json", "application/yaml"];
/// Media types of lists and watches (lists may be watched with `?watch=1`).
pub(crate) const STREAM_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/json;stream=watch",
];

/// One path and its operations.
#[derive(Debug)]
pub(crate) struct PathItem {
    pub(crate) path: String,
    /// Parameters every operation of the path takes (kube-openapi hoists them).
    pub(crate) parameters: Vec<Param>,
    pub(crate) operations: Vec<Operation>,
}

/// One HTTP method of a path.
#[derive(Debug)]
pub(crate) struct Operation {
    /// Lower-case HTTP method: `get`, `put`, `post`, `patch`, `delete`.
    pub(crate) method: &'static str,
    pub(crate) id: String,
    pub(crate) tag: String,
    pub(crate) description: String,
    /// `x-kubernetes-action` and `x-kubernetes-group-version-kind`, for resource routes.
    pub(crate) resource: Option<(&'static str, ResourceInfo)>,
    pub(crate) parameters: Vec<Param>,
    pub(crate) body: Option<Body>,
    pub(crate) responses: Vec<Reply>,
    pub(crate) produces: &'static [&'static str],
}

/// The request body of an operation.
#[derive(Debug)]
pub(crate) struct Body {
    /// The definition it must match.
    pub(crate) schema: String,
    pub(crate) required: bool,
    /// Accepted content types: `*/*`, or the patch types.
    pub(crate) consumes: Vec<&'static str>,
}

/// One documented response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) code: u16,
    pub(crate) description: &'static str,
    /// The definition of the response body.
    pub(crate) schema: String,
}

/// `GET /apis/`.
pub(crate) fn root_item() -> PathItem {
    discovery_item(
        "/apis/",
        "getAPIVersions",
        "get available API versions",
        meta::API_GROUP_LIST,
    )
}

/// `GET /apis/{group}/`.
pub(crate) fn group_item(group: &str) -> PathItem {
    let path = format!("/apis/{group}/");
    discovery_item(
        &path,
        "getAPIGroup",
        "get information of a group",
        meta::API_GROUP,
    )
}

/// `GET /apis/{group}/{version}/` and the routes of every resource of the version.
pub(crate) fn version_items(group: &str, version: &ServedVersion) -> Vec<PathItem> {
    let mut items = vec![version_item(group, &version.version)];
    for resource in &version.resources {
        items.extend(resource_items(resource));
    }
    items
}

/// `GET /apis/{group}/{version}/`.
pub(crate) fn version_item(group: &str, version: &str) -> PathItem {
    let path = format!("/apis/{group}/{version}/");
    discovery_item(
        &path,
        "getAPIResources",
        "get available resources",
        meta::API_RESOURCE_LIST,
    )
}

fn discovery_item(path: &str, name: &str, description: &str, schema: &str) -> PathItem {
    let (id, tag) = operation_id(name, path);
    let operation = Operation {
        method: "get",
        id,
        tag,
        description: description.into(),
        resource: None,
        parameters: Vec::new(),
        body: None,
        responses: vec![ok(schema)],
        produces: OBJECT_TYPES,
    };
    PathItem {
        path: path.into(),
        parameters: Vec::new(),
        operations: vec![operation],
    }
}

/// The paths of one resource: collection, item, watch paths, and subresources.
fn resource_items(resource: &ServedResource) -> Vec<PathItem> {
    let routes = Routes::new(resource);
    let mut items = vec![
        routes.collection(),
        routes.item(),
        routes.watch_collection(),
        routes.watch_item(),
    ];
    if routes.info.namespaced() {
        items.push(routes.all_namespaces());
        items.push(routes.watch_all_namespaces());
    }
    items.extend(
        resource
            .subresources
            .iter()
            .map(|sub| routes.subresource(sub)),
    );
    items.into_iter().flatten().collect()
}

/// Builds the operations of one resource.
struct Routes<'a> {
    resource: &'a ServedResource,
    info: &'a ResourceInfo,
    kind: String,
    list: String,
}

impl<'a> Routes<'a> {
    fn new(resource: &'a ServedResource) -> Self {
        let info = &resource.info;
        Self {
            resource,
            info,
            kind: kind_name(info),
            list: list_name(info),
        }
    }

    fn has(&self, verb: &str) -> bool {
        self.resource.verbs.contains(&verb)
    }

    fn prefix(&self) -> String {
        format!("/apis/{}/{}", self.info.group, self.info.version)
    }

    /// `namespaces/{namespace}/flunders` or `flunders`.
    fn scoped(&self) -> String {
        if self.info.namespaced() {
            format!("namespaces/{{namespace}}/{}", self.info.plural)
        } else {
            self.info.plural.to_string()
        }
    }

    /// kube's operation name: `read` + `Namespaced` + `Flunder` + `Status`.
    fn named(&self, verb: &str, sub: &str) -> String {
        let namespaced = if self.info.namespaced() {
            "Namespaced"
        } else {
            ""
        };
        format!("{verb}{namespaced}{}{}", self.info.kind, title_case(sub))
    }

    fn path_item(&self, path: String, operations: Vec<Operation>) -> Option<PathItem> {
        (!operations.is_empty()).then(|| hoist(path, operations))
    }

    /// `.../flunders`: list, create, deletecollection.
    fn collection(&self) -> Option<PathItem> {
        let path = format!("{}/{}", self.prefix(), self.scoped());
        let mut ops = Vec::new();
        if self.has("list") {
            ops.push(self.list(&path, self.named("list", "")));
        }
        if self.has("create") {
            let doc = format!("create{}{}", article(self.info.kind), self.info.kind);
            let mut op = self.op("post", "post", self.named("create", ""), &path, doc);
            op.parameters.extend(params::write_options(false));
            op.body = Some(Body {
                schema: self.kind.clone(),
                required: true,
                consumes: vec!["*/*"],
            });
            op.responses = vec![ok(&self.kind), created(&self.kind), accepted(&self.kind)];
            ops.push(op);
        }
        if self.has("deletecollection") {
            let doc = format!("delete collection of {}", self.info.kind);
            let name = self.named("deletecollection", "");
            let mut op = self.op("delete", "deletecollection", name, &path, doc);
            op.parameters.extend(params::list_options(false));
            op.parameters.extend(params::delete_options());
            op.body = Some(delete_body());
            op.responses = vec![ok(meta::STATUS)];
            ops.push(op);
        }
        self.path_item(path, ops)
    }

    fn list(&self, path: &str, name: String) -> Operation {
        let doc = if self.has("watch") {
            "list or watch"
        } else {
            "list"
        };
        let doc = format!("{doc} objects of kind {}", self.info.kind);
        let mut op = self.op("get", "list", name, path, doc);
        op.parameters.extend(params::list_options(true));
        op.responses = vec![ok(&self.list)];
        op.produces = STREAM_TYPES;
        op
    }

    /// `.../flunders/{name}`: get, replace, patch, delete.
    fn item(&self) -> Option<PathItem> {
        let path = format!("{}/{}/{{name}}", self.prefix(), self.scoped());
        let mut ops = self.object_ops(&path, "", &self.resource.verbs, self.info);
        if self.has("delete") {
            let doc = format!("delete{}{}", article(self.info.kind), self.info.kind);
            let mut op = self.op("delete", "delete", self.named("delete", ""), &path, doc);
            op.parameters.extend(params::delete_options());
            op.body = Some(delete_body());
            op.responses = vec![ok(meta::STATUS), accepted(meta::STATUS)];
            ops.push(op);
        }
        self.path_item(path, ops)
    }

    /// `.../flunders/{name}/status`: the subresource's get, update and patch.
    fn subresource(&self, sub: &ServedSubresource) -> Option<PathItem> {
        let path = format!("{}/{}/{{name}}/{}", self.prefix(), self.scoped(), sub.name);
        if let Some(handler) = &sub.handler {
            return self.path_item(path.clone(), self.handled(&path, sub, handler));
        }
        let ops = self.object_ops(&path, &sub.name, &sub.verbs, &sub.info);
        self.path_item(path, ops)
    }

    /// The operations of an action, view, stream or connection, named as kube's installer
    /// names `createNamespacedPodEviction`, `readNamespacedPodLog` and
    /// `connectGetNamespacedPodAttach`, with the options as query parameters.
    fn handled(
        &self,
        path: &str,
        sub: &ServedSubresource,
        handler: &Subresource,
    ) -> Vec<Operation> {
        let kind = self.info.kind;
        let options = options_params(handler);
        let answer = answer_name(&sub.info);
        let mut ops = Vec::new();
        let add = |method, action, verb: &str, doc: String, reply: &str, produces| {
            let mut op = self.op(method, action, self.named(verb, &sub.name), path, doc);
            op.parameters.extend(options.iter().cloned());
            op.responses = vec![ok(reply)];
            op.produces = produces;
            if let Some((_, gvk)) = &mut op.resource {
                *gvk = sub.info;
            }
            op
        };
        match handler.kind() {
            SubresourceKind::Action => {
                for verb in sub.verbs.iter().copied() {
                    let (method, action, named) = match verb {
                        "get" => ("get", "get", "read"),
                        "create" => ("post", "post", "create"),
                        "update" => ("put", "put", "replace"),
                        _ => ("delete", "delete", "delete"),
                    };
                    let doc = format!("{named} {} of the specified {kind}", sub.name);
                    let mut op = add(method, action, named, doc, &answer, OBJECT_TYPES);
                    if matches!(method, "post" | "put") {
                        let body = handler.body_schema().and_then(|b| body_name(self.info, b));
                        op.body = Some(Body {
                            schema: body.unwrap_or_else(|| "object".into()),
                            required: false,
                            consumes: vec!["*/*"],
                        });
                    }
                    if method == "post" {
                        op.responses.push(created(&answer));
                    }
                    ops.push(op);
                }
            }
            SubresourceKind::View => {
                let doc = format!("read {} of the specified {kind}", sub.name);
                ops.push(add("get", "get", "read", doc, &answer, OBJECT_TYPES));
            }
            SubresourceKind::Stream => {
                let doc = format!("read {} of the specified {kind}", sub.name);
                let produces: &'static [&'static str] = match handler.content_type() {
                    "text/plain" => &["text/plain"],
                    other => Box::leak(Box::new([other])),
                };
                ops.push(add("get", "get", "read", doc, "string", produces));
            }
            SubresourceKind::Connect => {
                for (method, verb) in [("get", "connectGet"), ("post", "connectPost")] {
                    let doc = format!(
                        "connect {} requests to {} of {kind}",
                        method.to_uppercase(),
                        sub.name
                    );
                    ops.push(add(method, "connect", verb, doc, "string", &["*/*"]));
                }
            }
        }
        ops
    }

    /// get, update and patch of an object or of its subresource `sub`, which reads and writes
    /// objects of `served` (the resource's own kind, or `autoscaling/v1` `Scale`).
    fn object_ops(
        &self,
        path: &str,
        sub: &str,
        verbs: &[&str],
        served: &ResourceInfo,
    ) -> Vec<Operation> {
        let schema = kind_name(served);
        let kind = self.info.kind;
        let described = |verb: &str| match sub {
            "" => format!("{verb} the specified {kind}"),
            _ => format!("{verb} {sub} of the specified {kind}"),
        };
        let mut ops = Vec::new();
        if verbs.contains(&"get") {
            ops.push(self.op(
                "get",
                "get",
                self.named("read", sub),
                path,
                described("read"),
            ));
        }
        if verbs.contains(&"update") {
            let mut op = self.op(
                "put",
                "put",
                self.named("replace", sub),
                path,
                described("replace"),
            );
            op.parameters.extend(params::write_options(false));
            op.body = Some(Body {
                schema: schema.clone(),
                required: true,
                consumes: vec!["*/*"],
            });
            op.responses = vec![ok(&schema), created(&schema)];
            ops.push(op);
        }
        if verbs.contains(&"patch") {
            let doc = described("partially update");
            let mut op = self.op("patch", "patch", self.named("patch", sub), path, doc);
            op.parameters.extend(params::write_options(true));
            let consumes = self.resource.patch_types.clone();
            op.body = Some(Body {
                schema: meta::PATCH.into(),
                required: true,
                consumes,
            });
            // Server-side apply answers 201 when it creates the object.
            op.responses = vec![ok(&schema), created(&schema)];
            ops.push(op);
        }
        for op in &mut ops {
            if op.method == "get" {
                op.responses = vec![ok(&schema)];
            }
            if let Some((_, gvk)) = &mut op.resource {
                *gvk = *served;
            }
        }
        ops
    }

    /// `.../watch/namespaces/{namespace}/flunders` (deprecated, still served by kube).
    fn watch_collection(&self) -> Option<PathItem> {
        let path = format!("{}/watch/{}", self.prefix(), self.scoped());
        let namespaced = if self.info.namespaced() {
            "Namespaced"
        } else {
            ""
        };
        self.watch_list(path, format!("watch{namespaced}{}List", self.info.kind))
    }

    /// `/apis/{group}/{version}/watch/flunders` across namespaces (deprecated).
    fn watch_all_namespaces(&self) -> Option<PathItem> {
        let path = format!("{}/watch/{}", self.prefix(), self.info.plural);
        self.watch_list(path, format!("watch{}ListForAllNamespaces", self.info.kind))
    }

    fn watch_list(&self, path: String, name: String) -> Option<PathItem> {
        if !(self.has("watch") && self.has("list")) {
            return None;
        }
        let doc = format!(
            "watch individual changes to a list of {}. deprecated: use the 'watch' parameter with a list operation instead.",
            self.info.kind
        );
        let op = self.watch(&path, name, doc);
        self.path_item(path, vec![op])
    }

    /// `.../watch/namespaces/{namespace}/flunders/{name}` (deprecated).
    fn watch_item(&self) -> Option<PathItem> {
        if !self.has("watch") {
            return None;
        }
        let path = format!("{}/watch/{}/{{name}}", self.prefix(), self.scoped());
        let doc = format!(
            "watch changes to an object of kind {}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter.",
            self.info.kind
        );
        let op = self.watch(&path, self.named("watch", ""), doc);
        self.path_item(path, vec![op])
    }

    fn watch(&self, path: &str, name: String, doc: String) -> Operation {
        let action = if path.ends_with("{name}") {
            "watch"
        } else {
            "watchlist"
        };
        let mut op = self.op("get", action, name, path, doc);
        op.parameters.extend(params::list_options(true));
        op.responses = vec![ok(meta::WATCH_EVENT)];
        op.produces = STREAM_TYPES;
        op
    }

    /// `/apis/{group}/{version}/flunders`: list across namespaces.
    fn all_namespaces(&self) -> Option<PathItem> {
        if !self.has("list") {
            return None;
        }
        let path = format!("{}/{}", self.prefix(), self.info.plural);
        let op = self.list(&path, format!("list{}ForAllNamespaces", self.info.kind));
        self.path_item(path, vec![op])
    }

    /// An operation of this resource with the parameters its path names, `pretty`, and the
    /// resource's kind as response; callers add the rest.
    fn op(
        &self,
        method: &'static str,
        action: &'static str,
        name: String,
        path: &str,
        doc: String,
    ) -> Operation {
        let (id, tag) = operation_id(&name, path);
        let mut parameters = vec![params::pretty()];
        if path.contains("{namespace}") {
            parameters.push(params::namespace());
        }
        if path.contains("{name}") {
            parameters.push(params::name(self.info.kind));
        }
        Operation {
            method,
            id,
            tag,
            description: doc,
            resource: Some((action, *self.info)),
            parameters,
            body: None,
            responses: vec![ok(&self.kind)],
            produces: OBJECT_TYPES,
        }
    }
}

/// Moves the parameters every operation takes to the path, as kube-openapi does, but only on
/// paths with a `get`: it never takes write options, so `fieldValidation` always stays on a
/// `patch` operation, where kubectl looks for it.
pub(crate) fn hoist(path: String, mut operations: Vec<Operation>) -> PathItem {
    let mut shared: Vec<Param> = Vec::new();
    if operations.iter().any(|op| op.method == "get") {
        shared = operations[0].parameters.clone();
        shared.retain(|p| operations.iter().all(|op| op.parameters.contains(p)));
    }
    for op in &mut operations {
        op.parameters.retain(|p| !shared.contains(p));
        sort(&mut op.parameters);
    }
    sort(&mut shared);
    PathItem {
        path,
        parameters: shared,
        operations,
    }
}

fn sort(params: &mut [Param]) {
    params.sort_by(|a, b| (a.location, a.name).cmp(&(b.location, b.name)));
}

fn delete_body() -> Body {
    Body {
        schema: meta::DELETE_OPTIONS.into(),
        required: false,
        consumes: vec!["*/*"],
    }
}

/// `200 OK` with a `schema` body.
pub(crate) fn ok(schema: &str) -> Reply {
    Reply {
        code: 200,
        description: "OK",
        schema: schema.into(),
    }
}

fn created(schema: &str) -> Reply {
    Reply {
        code: 201,
        description: "Created",
        schema: schema.into(),
    }
}

fn accepted(schema: &str) -> Reply {
    Reply {
        code: 202,
        description: "Accepted",
        schema: schema.into(),
    }
}

fn title_case(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

/// `" an "` before a vowel, `" a "` otherwise, as kube's `GetArticleForNoun`.
fn article(noun: &str) -> &'static str {
    if noun.starts_with(['A', 'E', 'I', 'O', 'U', 'a', 'e', 'i', 'o', 'u']) {
        " an "
    } else {
        " a "
    }
}

/// kube-apiserver's `GetOperationIDAndTags`: `readNamespacedFlunder` at
/// `/apis/wardle.example.com/v1alpha1/...` becomes `readWardleExampleComV1alpha1NamespacedFlunder`
/// with the tag `wardleExampleCom_v1alpha1`.
pub(crate) fn operation_id(operation: &str, path: &str) -> (String, String) {
    // The shortest verb that prefixes the name, as kube's trie finds it ("delete" before
    // "deletecollection", giving `deleteAppsV1CollectionNamespacedDeployment`).
    const VERBS: [&str; 12] = [
        "get",
        "log",
        "read",
        "list",
        "patch",
        "proxy",
        "watch",
        "create",
        "delete",
        "replace",
        "connect",
        "deletecollection",
    ];
    let verb = VERBS
        .iter()
        .find(|v| operation.starts_with(*v))
        .copied()
        .unwrap_or("");
    let rest = &operation[verb.len()..];
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut prefix = verb.to_string();
    let tag = if parts.len() >= 2 && parts[0] == "apis" {
        let group = parts[1].strip_suffix(".k8s.io").unwrap_or(parts[1]);
        prefix.push_str(&valid_id(group, !prefix.is_empty()));
        let mut tag = valid_id(group, false);
        if let Some(version) = parts.get(2) {
            prefix.push_str(&valid_id(version, !prefix.is_empty()));
            tag = format!("{tag}_{}", valid_id(version, false));
        }
        tag
    } else {
        valid_id(parts[0], false)
    };
    let id = format!("{prefix}{}", valid_id(rest, !prefix.is_empty()));
    (id, tag)
}

/// kube's `ToValidOperationID`: letters, `_` and (not first) digits; camel case at separators.
fn valid_id(s: &str, capitalize_first: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut capitalize = capitalize_first;
    for (i, c) in s.chars().enumerate() {
        if c.is_alphabetic() || c == '_' || (i != 0 && c.is_ascii_digit()) {
            if capitalize {
                out.extend(c.to_uppercase());
                capitalize = false;
            } else {
                out.push(c);
            }
        } else {
            capitalize = true;
        }
    }
    out
}

/// Every definition the operations of `items` name directly.
pub(crate) fn referenced<'a>(items: &'a [&'a PathItem]) -> impl Iterator<Item = &'a str> {
    items
        .iter()
        .flat_map(|item| &item.operations)
        .flat_map(|op| {
            let body = op.body.iter().map(|b| b.schema.as_str());
            body.chain(op.responses.iter().map(|r| r.schema.as_str()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_match_kube() {
        let path = "/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders/{name}";
        assert_eq!(
            operation_id("readNamespacedFlunderStatus", path),
            (
                "readWardleExampleComV1alpha1NamespacedFlunderStatus".into(),
                "wardleExampleCom_v1alpha1".into()
            )
        );
        assert_eq!(
            operation_id("deletecollectionNamespacedFlunder", path).0,
            "deleteWardleExampleComV1alpha1CollectionNamespacedFlunder"
        );
        assert_eq!(
            operation_id("getAPIResources", "/apis/apps/v1/").0,
            "getAppsV1APIResources"
        );
        assert_eq!(
            operation_id("getAPIGroup", "/apis/policy/").0,
            "getPolicyAPIGroup"
        );
        assert_eq!(
            operation_id("getAPIGroup", "/apis/storage.k8s.io/").1,
            "storage"
        );
        assert_eq!(
            operation_id("getAPIVersions", "/apis/"),
            ("getAPIVersions".into(), "apis".into())
        );
    }

    #[test]
    fn articles() {
        assert_eq!(article("Ingress"), " an ");
        assert_eq!(article("Flunder"), " a ");
    }
}
