//! What strategic merge patch needs from a type's JSON schema: for each field, whether its
//! list merges by key, merges as a set or is replaced. Compiled once per resource type from a
//! schemars schema, then looked up for every patch.

use serde_json::{Map, Value};

/// How a field's current value and the patch's value combine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// The patch's value replaces the current one (the default for lists).
    Replace,
    /// Lists merge: maps by the value of `key`, primitives as a set (`key` is `None`).
    Merge {
        /// The member identifying a list item.
        key: Option<String>,
    },
}

/// Index of a [`Node`] in [`PatchSchema::nodes`].
type NodeId = usize;

/// A map keyed by names the schema declares, looked up for every member of every patched or
/// applied object: only the schema inserts keys (see [`crate::hash`]).
type ByName = crate::hash::ByName<NodeId>;

/// One schema, reduced to what patching needs. Lookups fall back to `bases` (the targets of
/// `$ref`, `allOf`, `anyOf`, `oneOf`), so recursive types need no unrolling.
#[derive(Clone, Debug, Default)]
struct Node {
    strategy: Option<Strategy>,
    properties: ByName,
    /// `additionalProperties`: the node is a map whose keys are data.
    values: Option<NodeId>,
    items: Option<NodeId>,
    bases: Vec<NodeId>,
    /// Any member may appear (`true`, `{}`, a bare `type: object`, preserve-unknown-fields).
    free_form: bool,
    /// Every key of `x-kubernetes-list-map-keys`, for server-side apply (`strategy` keeps
    /// the first, which is all strategic merge patch uses).
    list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type` (or `x-kubernetes-struct-type`): `Some(true)` for `atomic`,
    /// `Some(false)` for `granular`.
    map_atomic: Option<bool>,
    /// The schema's `default`: apply fills a list-map key an item omits with it.
    default: Option<Value>,
    /// The schema declares this object's fields (`properties`): another member is an
    /// unknown field, unless `values` or `free_form` admits it.
    declares_fields: bool,
}

/// How server-side apply merges and tracks a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListType {
    /// Replaced as a whole and owned as one field (the default).
    Atomic,
    /// Items are scalars, each owned on its own (`v:` path elements).
    Set,
    /// Items are objects identified by these members (`k:` path elements).
    Map(Vec<String>),
}

/// Deepest chain of `bases` a lookup follows; real schemas need two or three, and the limit
/// stops a schema that refers to itself (`A = allOf [A]`) from looping.
const MAX_BASE_DEPTH: usize = 8;

/// The node every compiler creates first: anything goes, below it too.
const FREE_FORM: NodeId = 0;

/// The merge strategies of a type's fields, built from its JSON schema.
///
/// A list field merges by key when its schema carries `x-kubernetes-patch-strategy: merge`
/// and `x-kubernetes-patch-merge-key`, or `x-kubernetes-list-type: map` with
/// `x-kubernetes-list-map-keys` (the first key is used); a list of primitives with strategy
/// `merge`, or `x-kubernetes-list-type: set`, merges as a set. Every other list is replaced.
/// `metadata.finalizers` (a set) and `metadata.ownerReferences` (by `uid`) are built in.
///
/// ```
/// use extension_apiserver_machinery::patch::{strategic_merge_patch, PatchSchema};
/// use serde_json::json;
/// let schema = PatchSchema::from_json_schema(&json!({
///     "type": "object",
///     "properties": {"ports": {
///         "type": "array",
///         "items": {"type": "object"},
///         "x-kubernetes-patch-strategy": "merge",
///         "x-kubernetes-patch-merge-key": "name"
///     }}
/// }));
/// let original = json!({"ports": [{"name": "http", "port": 80}]});
/// let patch = json!({"ports": [{"name": "http", "port": 8080}]});
/// let patched = strategic_merge_patch(&original, &patch, &schema).unwrap();
/// assert_eq!(patched, json!({"ports": [{"name": "http", "port": 8080}]}));
/// ```
#[derive(Clone, Debug)]
pub struct PatchSchema {
    nodes: Vec<Node>,
    root: NodeId,
}

impl Default for PatchSchema {
    fn default() -> Self {
        Self::empty()
    }
}

impl PatchSchema {
    /// No knowledge of the type: maps merge, lists are replaced; only the built-in
    /// `metadata` strategies apply.
    pub fn empty() -> Self {
        // Null compiles to a node that knows nothing, unlike `true` (anything goes).
        Self::from_json_schema(&Value::Null)
    }

    /// Reads the strategies from a JSON schema as schemars 1.x generates it (any of its
    /// settings: `#/$defs/…`, `#/definitions/…` or `#/components/schemas/…` references,
    /// `allOf`/`anyOf` wrappers, nullable types). Parts it does not understand are treated
    /// as unknown, never as an error.
    pub fn from_json_schema(schema: &Value) -> Self {
        let free_form = Node {
            free_form: true,
            ..Node::default()
        };
        let mut compiler = Compiler {
            document: schema,
            nodes: vec![free_form],
            refs: ByName::default(),
        };
        let root = compiler.compile(schema);
        compiler.add_root_metadata(root);
        Self {
            nodes: compiler.nodes,
            root,
        }
    }

    /// The schema of `T` as schemars generates it with its default settings.
    pub fn for_type<T: schemars::JsonSchema>() -> Self {
        let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
        Self::from_json_schema(schema.as_value())
    }

    /// Where a patch of the whole object starts.
    pub(crate) fn root(&self) -> At<'_> {
        At {
            schema: self,
            node: Some(self.root),
        }
    }
}

/// The first answer `f` gives for `node` or, failing that, for its bases.
fn find<'n, T>(
    nodes: &'n [Node],
    node: NodeId,
    depth: usize,
    f: &impl Fn(&'n Node) -> Option<T>,
) -> Option<T> {
    let n = &nodes[node];
    if let Some(found) = f(n) {
        return Some(found);
    }
    if depth >= MAX_BASE_DEPTH {
        return None;
    }
    n.bases.iter().find_map(|&b| find(nodes, b, depth + 1, f))
}

/// A position in the schema while walking a patch; `node` is `None` where the schema says
/// nothing (then maps merge and lists are replaced).
#[derive(Clone, Copy, Debug)]
pub(crate) struct At<'s> {
    schema: &'s PatchSchema,
    node: Option<NodeId>,
}

impl<'s> At<'s> {
    fn find<T>(self, f: impl Fn(&'s Node) -> Option<T>) -> Option<T> {
        self.node.and_then(|n| find(&self.schema.nodes, n, 0, &f))
    }

    fn to(self, node: Option<NodeId>) -> At<'s> {
        At {
            schema: self.schema,
            node,
        }
    }

    /// Inside free-form data everything is free-form, so a `$ref` deep in a
    /// `serde_json::Value` field is data, not an unknown directive.
    fn or_free_form(self, node: Option<NodeId>) -> At<'s> {
        let free = || self.find(|n| n.free_form.then_some(FREE_FORM));
        self.to(node.or_else(free))
    }

    /// The schema of member `key` of this object or map.
    pub(crate) fn field(self, key: &str) -> At<'s> {
        let declared = self.find(|n| n.properties.get(key).copied());
        self.or_free_form(declared.or_else(|| self.find(|n| n.values)))
    }

    /// The schema of this list's items.
    pub(crate) fn items(self) -> At<'s> {
        self.or_free_form(self.find(|n| n.items))
    }

    /// The strategy declared for this value, if any.
    pub(crate) fn strategy(self) -> Option<&'s Strategy> {
        self.find(|n| n.strategy.as_ref())
    }

    /// The list semantics server-side apply uses: one declaration serves both it and
    /// strategic merge patch (a patch strategy `merge` with a merge key is a list map keyed
    /// by it, as kube's OpenAPI states for built-in types).
    pub(crate) fn list_type(self) -> ListType {
        let declared = self.find(|n| n.strategy.as_ref().map(|s| (s, &n.list_map_keys)));
        match declared {
            Some((Strategy::Merge { key: Some(key) }, keys)) if keys.is_empty() => {
                ListType::Map(vec![key.clone()])
            }
            Some((Strategy::Merge { key: Some(_) }, keys)) => ListType::Map(keys.clone()),
            Some((Strategy::Merge { key: None }, _)) => ListType::Set,
            _ => ListType::Atomic,
        }
    }

    /// Whether this map or struct is replaced and owned as a whole
    /// (`x-kubernetes-map-type: atomic`); maps are granular by default.
    pub(crate) fn map_is_atomic(self) -> bool {
        self.find(|n| n.map_atomic).unwrap_or(false)
    }

    /// Whether the schema says nothing of this value (free-form data, or no schema).
    pub(crate) fn is_free_form(self) -> bool {
        self.node.is_none() || self.find(|n| n.free_form.then_some(())).is_some()
    }

    /// The schema's `default` for this value.
    pub(crate) fn default_value(self) -> Option<&'s Value> {
        self.find(|n| n.default.as_ref())
    }

    /// Whether `key` is a declared field (`properties`) rather than a key of a map or of
    /// free-form data: apply owns a map's keys themselves, a struct's fields only through
    /// their values.
    pub(crate) fn declares(self, key: &str) -> bool {
        self.find(|n| n.properties.contains_key(key).then_some(()))
            .is_some()
    }

    /// Whether the schema knows this object's fields and says `key` is not one of them: an
    /// unknown field, which decoding into the type drops. Where the schema declares no
    /// fields, nothing is unknown.
    pub(crate) fn knows_not(self, key: &str) -> bool {
        let declares_fields = self.find(|n| n.declares_fields.then_some(()));
        declares_fields.is_some() && !self.allows_key(key)
    }

    /// Whether `key` may be a member here, for telling a `$`-key that is data (a field named
    /// `$ref`, a map key) from an unknown patch directive.
    pub(crate) fn allows_key(self, key: &str) -> bool {
        let open = |n: &Node| n.free_form || n.values.is_some() || n.properties.contains_key(key);
        self.find(|n| open(n).then_some(())).is_some()
    }
}

/// Turns a JSON schema document into [`Node`]s, each `$ref` target once.
struct Compiler<'a> {
    document: &'a Value,
    nodes: Vec<Node>,
    refs: ByName,
}

impl<'a> Compiler<'a> {
    fn new_node(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn compile(&mut self, schema: &'a Value) -> NodeId {
        let id = self.new_node(Node::default());
        self.fill(id, schema);
        id
    }

    /// Compiles `schema` into the (placeholder) node `id`.
    fn fill(&mut self, id: NodeId, schema: &'a Value) {
        let Some(obj) = schema.as_object() else {
            self.nodes[id].free_form = schema.as_bool() == Some(true);
            return;
        };
        let mut node = Node {
            strategy: strategy_of(obj),
            free_form: is_free_form(obj),
            list_map_keys: list_map_keys_of(obj),
            map_atomic: map_atomic_of(obj),
            default: obj.get("default").cloned(),
            declares_fields: obj.contains_key("properties"),
            ..Node::default()
        };
        if let Some(target) = obj.get("$ref").and_then(Value::as_str) {
            node.bases.extend(self.reference(target));
        }
        for keyword in ["allOf", "anyOf", "oneOf"] {
            let subschemas = obj
                .get(keyword)
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            for sub in subschemas.filter(|s| !is_null_schema(s)) {
                node.bases.push(self.compile(sub));
            }
        }
        for (name, sub) in obj
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            node.properties.insert(name.clone(), self.compile(sub));
        }
        node.values = self.compile_schema_member(obj, "additionalProperties");
        node.items = self.compile_schema_member(obj, "items");
        self.nodes[id] = node;
    }

    /// `obj[member]` when it is a schema (an object or `true`), compiled.
    fn compile_schema_member(
        &mut self,
        obj: &'a Map<String, Value>,
        member: &str,
    ) -> Option<NodeId> {
        let sub = obj
            .get(member)
            .filter(|s| s.is_object() || s.as_bool() == Some(true))?;
        Some(self.compile(sub))
    }

    /// The node of a local reference (`#/$defs/Name`); other references are unknown.
    fn reference(&mut self, target: &str) -> Option<NodeId> {
        if let Some(&id) = self.refs.get(target) {
            return Some(id);
        }
        let schema = self.document.pointer(target.strip_prefix('#')?)?;
        // Registered before filling so that a recursive type refers back to this node.
        let id = self.new_node(Node::default());
        self.refs.insert(target.to_owned(), id);
        self.fill(id, schema);
        self.add_known_type_strategies(id, definition_name(target));
        Some(id)
    }

    /// Gives `field` of `node` a strategy, keeping what the schema says about its items.
    fn override_field(&mut self, node: NodeId, field: &str, strategy: Strategy) {
        let existing = self.nodes[node].properties.get(field).copied();
        let wrapper = Node {
            strategy: Some(strategy),
            bases: existing.into_iter().collect(),
            ..Node::default()
        };
        let id = self.new_node(wrapper);
        self.nodes[node].properties.insert(field.to_owned(), id);
    }

    /// ObjectMeta's strategies, which kube declares in Go struct tags and k8s-openapi's
    /// schema does not carry.
    fn add_object_meta_strategies(&mut self, meta: NodeId) {
        self.override_field(meta, "finalizers", Strategy::Merge { key: None });
        self.override_field(
            meta,
            "ownerReferences",
            Strategy::Merge {
                key: Some("uid".into()),
            },
        );
        for map in ["labels", "annotations"] {
            if !self.nodes[meta].properties.contains_key(map) {
                let id = self.new_node(Node {
                    free_form: true,
                    ..Node::default()
                });
                self.nodes[meta].properties.insert(map.to_owned(), id);
            }
        }
    }

    /// The top-level `metadata` is an ObjectMeta whatever the schema says (or omits).
    fn add_root_metadata(&mut self, root: NodeId) {
        let existing = find(&self.nodes, root, 0, &|n| {
            n.properties.get("metadata").copied()
        });
        let meta = self.new_node(Node {
            bases: existing.into_iter().collect(),
            ..Node::default()
        });
        self.add_object_meta_strategies(meta);
        self.nodes[root]
            .properties
            .insert("metadata".to_owned(), meta);
    }

    /// Strategies of Kubernetes types users embed (through k8s-openapi) that their schemas
    /// lack: ObjectMeta anywhere (pod templates), the pod lists `kubectl patch` users
    /// expect to merge, and what kube's OpenAPI adds for apply (atomic label selectors,
    /// container ports keyed by port and protocol, `TCP` by default).
    fn add_known_type_strategies(&mut self, node: NodeId, name: &str) {
        if name.ends_with("ObjectMeta") {
            self.add_object_meta_strategies(node);
        }
        if name == "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector" {
            self.nodes[node].map_atomic = Some(true);
        }
        if name == "io.k8s.api.core.v1.ContainerPort" {
            let existing = self.nodes[node].properties.get("protocol").copied();
            let id = self.new_node(Node {
                default: Some(Value::from("TCP")),
                bases: existing.into_iter().collect(),
                ..Node::default()
            });
            self.nodes[node].properties.insert("protocol".into(), id);
        }
        for (type_name, field, key) in KNOWN_MERGE_LISTS {
            if name == *type_name {
                self.override_field(
                    node,
                    field,
                    Strategy::Merge {
                        key: Some((*key).into()),
                    },
                );
            }
            if name == *type_name && *field == "ports" {
                let wrapper = self.nodes[node].properties[*field];
                self.nodes[wrapper].list_map_keys = vec![(*key).into(), "protocol".into()];
            }
        }
    }
}

/// `patchMergeKey` tags of the core/v1 pod types (k8s.io/api/core/v1/types.go), by the
/// schema names k8s-openapi gives them.
const KNOWN_MERGE_LISTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.PodSpec", "containers", "name"),
    ("io.k8s.api.core.v1.PodSpec", "initContainers", "name"),
    ("io.k8s.api.core.v1.PodSpec", "ephemeralContainers", "name"),
    ("io.k8s.api.core.v1.PodSpec", "volumes", "name"),
    ("io.k8s.api.core.v1.PodSpec", "imagePullSecrets", "name"),
    ("io.k8s.api.core.v1.PodSpec", "hostAliases", "ip"),
    ("io.k8s.api.core.v1.Container", "env", "name"),
    ("io.k8s.api.core.v1.Container", "ports", "containerPort"),
    ("io.k8s.api.core.v1.Container", "volumeMounts", "mountPath"),
    (
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        "devicePath",
    ),
    ("io.k8s.api.core.v1.EphemeralContainer", "env", "name"),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "ports",
        "containerPort",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        "mountPath",
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeDevices",
        "devicePath",
    ),
];

/// The last segment of a JSON pointer, unescaped: the definition's name.
fn definition_name(pointer: &str) -> &str {
    pointer.rsplit('/').next().unwrap_or_default()
}

/// The strategy an `x-kubernetes-*` extension on this schema declares.
fn strategy_of(obj: &Map<String, Value>) -> Option<Strategy> {
    let text = |k: &str| obj.get(k).and_then(Value::as_str);
    if let Some(declared) = text("x-kubernetes-patch-strategy") {
        // A comma-separated list such as "merge,retainKeys"; retainKeys alone says nothing
        // about merging, as `$retainKeys` travels in the patch.
        let parts: Vec<&str> = declared.split(',').map(str::trim).collect();
        if parts.contains(&"merge") {
            return Some(Strategy::Merge {
                key: text("x-kubernetes-patch-merge-key").map(str::to_owned),
            });
        }
        if parts.contains(&"replace") {
            return Some(Strategy::Replace);
        }
    }
    match text("x-kubernetes-list-type")? {
        "map" => {
            let keys = obj
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array);
            let first = keys.and_then(|k| k.first()).and_then(Value::as_str);
            Some(Strategy::Merge {
                key: first.map(str::to_owned),
            })
        }
        "set" => Some(Strategy::Merge { key: None }),
        "atomic" => Some(Strategy::Replace),
        _ => None,
    }
}

/// Every key named by `x-kubernetes-list-map-keys`.
fn list_map_keys_of(obj: &Map<String, Value>) -> Vec<String> {
    let keys = obj
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array);
    keys.into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// `x-kubernetes-map-type` (or the struct form kube's OpenAPI also writes).
fn map_atomic_of(obj: &Map<String, Value>) -> Option<bool> {
    let declared = ["x-kubernetes-map-type", "x-kubernetes-struct-type"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))?;
    match declared {
        "atomic" => Some(true),
        "granular" => Some(false),
        _ => None,
    }
}

/// `{type: null}`, `{enum: [null]}` and the like: the `None` half of an `Option`.
fn is_null_schema(schema: &Value) -> bool {
    let Some(obj) = schema.as_object() else {
        return false;
    };
    let null_type = obj.get("type").and_then(Value::as_str) == Some("null");
    let null_enum = obj
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|e| e.iter().all(Value::is_null));
    let null_const = obj.get("const").is_some_and(Value::is_null);
    null_type || null_enum || null_const
}

/// Whether a schema object admits arbitrary members, e.g. a `serde_json::Value` field.
fn is_free_form(obj: &Map<String, Value>) -> bool {
    if obj
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return true;
    }
    const SHAPING: [&str; 9] = [
        "properties",
        "additionalProperties",
        "items",
        "$ref",
        "allOf",
        "anyOf",
        "oneOf",
        "enum",
        "const",
    ];
    let object_or_untyped = match obj.get("type") {
        None => true,
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        Some(_) => false,
    };
    object_or_untyped && !SHAPING.iter().any(|k| obj.contains_key(*k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strategy_at(schema: &PatchSchema, path: &[&str]) -> Option<Strategy> {
        let at = path.iter().fold(schema.root(), |at, key| match *key {
            "[]" => at.items(),
            key => at.field(key),
        });
        at.strategy().cloned()
    }

    fn merge_by(key: &str) -> Option<Strategy> {
        Some(Strategy::Merge {
            key: Some(key.into()),
        })
    }

    #[test]
    fn reads_patch_strategy_extensions() {
        let schema = PatchSchema::from_json_schema(&json!({
            "type": "object",
            "properties": {
                "byName": {"type": "array", "x-kubernetes-patch-strategy": "merge",
                           "x-kubernetes-patch-merge-key": "name"},
                "set": {"type": "array", "x-kubernetes-patch-strategy": "retainKeys, merge"},
                "replaced": {"type": "object", "x-kubernetes-patch-strategy": "replace"},
                "retainOnly": {"type": "object", "x-kubernetes-patch-strategy": "retainKeys"},
                "plain": {"type": "array"}
            }
        }));
        assert_eq!(strategy_at(&schema, &["byName"]), merge_by("name"));
        assert_eq!(
            strategy_at(&schema, &["set"]),
            Some(Strategy::Merge { key: None })
        );
        assert_eq!(strategy_at(&schema, &["replaced"]), Some(Strategy::Replace));
        assert_eq!(strategy_at(&schema, &["retainOnly"]), None);
        assert_eq!(strategy_at(&schema, &["plain"]), None);
        assert_eq!(strategy_at(&schema, &["unknown"]), None);
    }

    #[test]
    fn reads_list_type_extensions() {
        let schema = PatchSchema::from_json_schema(&json!({
            "properties": {
                "map": {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"]},
                "set": {"x-kubernetes-list-type": "set"},
                "atomic": {"x-kubernetes-list-type": "atomic"}
            }
        }));
        assert_eq!(strategy_at(&schema, &["map"]), merge_by("port"));
        assert_eq!(
            strategy_at(&schema, &["set"]),
            Some(Strategy::Merge { key: None })
        );
        assert_eq!(strategy_at(&schema, &["atomic"]), Some(Strategy::Replace));
    }

    #[test]
    fn follows_refs_in_every_layout() {
        for defs in ["$defs", "definitions", "components/schemas"] {
            let reference = format!("#/{defs}/Item");
            let mut document = json!({
                "properties": {
                    "plain": {"$ref": reference},
                    "nullable": {"anyOf": [{"$ref": reference}, {"type": "null"}]},
                    "wrapped": {"allOf": [{"$ref": reference}], "nullable": true},
                    "list": {"type": ["array", "null"], "items": {"$ref": reference}}
                }
            });
            let item = json!({"properties": {"children": {
                "type": "array", "items": {"$ref": reference},
                "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "id"
            }}});
            let mut slot = &mut document;
            for segment in defs.split('/') {
                slot = &mut slot[segment];
            }
            slot["Item"] = item;
            let schema = PatchSchema::from_json_schema(&document);
            for field in ["plain", "nullable", "wrapped"] {
                assert_eq!(
                    strategy_at(&schema, &[field, "children"]),
                    merge_by("id"),
                    "{defs} {field}"
                );
            }
            // Recursive: an item's children are items.
            let deep = ["list", "[]", "children", "[]", "children", "[]", "children"];
            assert_eq!(strategy_at(&schema, &deep), merge_by("id"), "{defs}");
        }
    }

    #[test]
    fn an_outer_extension_wins_over_the_referenced_one() {
        let schema = PatchSchema::from_json_schema(&json!({
            "properties": {"tags": {"$ref": "#/$defs/Tags", "x-kubernetes-patch-strategy": "replace"},
                           "other": {"$ref": "#/$defs/Tags"}},
            "$defs": {"Tags": {"type": "array", "x-kubernetes-list-type": "set"}}
        }));
        assert_eq!(strategy_at(&schema, &["tags"]), Some(Strategy::Replace));
        assert_eq!(
            strategy_at(&schema, &["other"]),
            Some(Strategy::Merge { key: None })
        );
    }

    #[test]
    fn self_referencing_schemas_terminate() {
        let schema = PatchSchema::from_json_schema(&json!({
            "$ref": "#/$defs/A",
            "$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}]}, "B": {"$ref": "#"}}
        }));
        assert_eq!(strategy_at(&schema, &["x"]), None);
        assert!(!schema.root().field("x").allows_key("$x"));
    }

    #[test]
    fn metadata_strategies_are_built_in() {
        for schema in [
            PatchSchema::empty(),
            PatchSchema::from_json_schema(&json!({"properties": {"metadata": {"type": "object",
                "properties": {"finalizers": {"type": "array", "items": {"type": "string"}}}}}})),
        ] {
            assert_eq!(
                strategy_at(&schema, &["metadata", "finalizers"]),
                Some(Strategy::Merge { key: None })
            );
            assert_eq!(
                strategy_at(&schema, &["metadata", "ownerReferences"]),
                merge_by("uid")
            );
            assert!(
                schema
                    .root()
                    .field("metadata")
                    .field("labels")
                    .allows_key("$odd")
            );
        }
    }

    #[test]
    fn embedded_kubernetes_types_get_their_strategies() {
        let schema = PatchSchema::for_type::<k8s_openapi::api::core::v1::PodTemplateSpec>();
        assert_eq!(
            strategy_at(&schema, &["spec", "containers"]),
            merge_by("name")
        );
        assert_eq!(
            strategy_at(&schema, &["spec", "containers", "[]", "env"]),
            merge_by("name")
        );
        assert_eq!(strategy_at(&schema, &["spec", "volumes"]), merge_by("name"));
        assert_eq!(
            strategy_at(&schema, &["metadata", "ownerReferences"]),
            merge_by("uid")
        );
        assert_eq!(strategy_at(&schema, &["spec", "tolerations"]), None);
    }

    #[test]
    fn one_declaration_gives_apply_its_list_and_map_types() {
        let schema = PatchSchema::from_json_schema(&json!({
            "properties": {
                "byKey": {"x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                "twoKeys": {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"]},
                "set": {"x-kubernetes-list-type": "set"},
                "mergedScalars": {"x-kubernetes-patch-strategy": "merge"},
                "atomic": {"x-kubernetes-list-type": "atomic"},
                "plain": {"type": "array"},
                "atomicMap": {"type": "object", "x-kubernetes-map-type": "atomic"},
                "atomicStruct": {"type": "object", "x-kubernetes-struct-type": "atomic",
                                 "properties": {"a": {"type": "string", "default": "x"}}},
                "granular": {"type": "object", "x-kubernetes-map-type": "granular"}
            }
        }));
        let at = |f: &str| schema.root().field(f);
        let keys = |k: &[&str]| ListType::Map(k.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(at("byKey").list_type(), keys(&["name"]));
        assert_eq!(at("twoKeys").list_type(), keys(&["port", "protocol"]));
        // Strategic merge patch keeps using the first key.
        assert_eq!(strategy_at(&schema, &["twoKeys"]), merge_by("port"));
        assert_eq!(at("set").list_type(), ListType::Set);
        assert_eq!(at("mergedScalars").list_type(), ListType::Set);
        assert_eq!(at("atomic").list_type(), ListType::Atomic);
        assert_eq!(at("plain").list_type(), ListType::Atomic);
        assert!(at("atomicMap").map_is_atomic());
        assert!(at("atomicStruct").map_is_atomic());
        assert!(!at("granular").map_is_atomic());
        assert!(!at("plain").map_is_atomic());
        assert!(at("atomicStruct").declares("a"));
        assert!(!at("atomicStruct").declares("b"));
        assert_eq!(
            at("atomicStruct").field("a").default_value(),
            Some(&json!("x"))
        );
    }

    #[test]
    fn object_meta_gives_apply_its_list_types() {
        for schema in [
            PatchSchema::empty(),
            PatchSchema::for_type::<k8s_openapi::api::core::v1::PodTemplateSpec>(),
        ] {
            let meta = schema.root().field("metadata");
            assert_eq!(meta.field("finalizers").list_type(), ListType::Set);
            assert_eq!(
                meta.field("ownerReferences").list_type(),
                ListType::Map(vec!["uid".into()])
            );
            assert!(!meta.field("labels").map_is_atomic());
            assert!(!meta.field("labels").declares("app"));
        }
        let pod = PatchSchema::for_type::<k8s_openapi::api::core::v1::PodTemplateSpec>();
        let ports = pod
            .root()
            .field("spec")
            .field("containers")
            .items()
            .field("ports");
        assert_eq!(
            ports.list_type(),
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
        assert_eq!(
            ports.items().field("protocol").default_value(),
            Some(&json!("TCP"))
        );
    }

    #[test]
    fn tells_data_keys_from_directives() {
        let schema = PatchSchema::from_json_schema(&json!({
            "properties": {
                "closed": {"properties": {"$ref": {"type": "string"}}},
                "map": {"additionalProperties": {"type": "string"}},
                "any": true,
                "object": {"type": "object"}
            }
        }));
        let root = schema.root();
        assert!(root.field("any").field("deep").items().allows_key("$ref"));
        assert!(root.field("closed").allows_key("$ref"));
        assert!(!root.field("closed").allows_key("$other"));
        assert!(root.field("map").allows_key("$anything"));
        assert!(root.field("any").allows_key("$anything"));
        assert!(root.field("object").allows_key("$anything"));
        assert!(!root.field("unknown").allows_key("$anything"));
        assert!(!PatchSchema::empty().root().allows_key("$anything"));
        assert!(
            PatchSchema::from_json_schema(&json!(true))
                .root()
                .allows_key("$anything")
        );
    }
}
