//! The schema-driven walks of structured-merge-diff's `typed` package over JSON values: the
//! fields a value sets (`ToFieldSet`), what changed between two values (`Compare`), a
//! configuration merged into a live object (`Merge`) and owned items taken out (`RemoveItems`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::path::PathElement;
use super::set::FieldSet;
use crate::patch::schema::{At, ListType};

/// The path element naming item `index` of a list: by its key members (a list map; a key
/// the item omits takes its schema default, as SMD does), by its value (a set) or by its
/// position (an item without keys).
fn item_element(list_type: &ListType, items: At<'_>, index: usize, item: &Value) -> PathElement {
    match (list_type, item) {
        (ListType::Map(keys), Value::Object(obj)) => {
            let value_of = |k: &String| obj.get(k).or_else(|| items.field(k).default_value());
            let fields: Vec<(String, Value)> = keys
                .iter()
                .filter_map(|k| Some((k.clone(), value_of(k)?.clone())))
                .collect();
            if fields.is_empty() {
                PathElement::Index(index)
            } else {
                PathElement::key(fields)
            }
        }
        (ListType::Set, scalar) if !scalar.is_object() && !scalar.is_array() => {
            PathElement::Value(scalar.clone())
        }
        _ => PathElement::Index(index),
    }
}

/// Whether the list at `at` merges item by item.
fn granular_list(at: At<'_>) -> Option<ListType> {
    let list_type = at.list_type();
    (list_type != ListType::Atomic).then_some(list_type)
}

/// The list's items by path element, the first of duplicates winning, in list order.
fn index_items<'v>(
    list_type: &ListType,
    at: At<'_>,
    items: &'v [Value],
) -> Vec<(PathElement, &'v Value)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let element = item_element(list_type, at, i, item);
        if seen.insert(element.clone()) {
            out.push((element, item));
        }
    }
    out
}

/// The fields `value` sets (SMD `ToFieldSet`): every scalar and atomic value, every list
/// item, and every key of a map (a struct's fields are owned through their values only).
pub(crate) fn to_field_set(value: &Value, at: At<'_>) -> FieldSet {
    let mut out = FieldSet::new();
    walk_set(value, at, &mut Vec::new(), &mut out);
    out
}

/// Whether `key` under `path` is the object's `metadata.managedFields`, which no walk of
/// the field manager looks at (kube strips them from both objects before comparing): so
/// objects are compared as they are, without a copy made to take them out.
fn is_managed_fields(path: &[PathElement], key: &str) -> bool {
    key == "managedFields" && matches!(path, [PathElement::Field(m)] if m == "metadata")
}

fn walk_set(value: &Value, at: At<'_>, path: &mut Vec<PathElement>, out: &mut FieldSet) {
    match value {
        Value::Object(map) if !at.map_is_atomic() => {
            for (key, child) in map {
                if is_managed_fields(path, key) {
                    continue;
                }
                path.push(PathElement::Field(key.clone()));
                walk_set(child, at.field(key), path, out);
                // SMD's `visitMapItems`: an empty map is a leaf of its own (a null one is,
                // as every scalar, below), and so is a member the schema does not declare.
                let empty_map = child.as_object().is_some_and(Map::is_empty);
                if empty_map || !at.declares(key) {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => match granular_list(at) {
            Some(list_type) => {
                for (element, item) in index_items(&list_type, at.items(), items) {
                    path.push(element);
                    walk_set(item, at.items(), path, out);
                    out.insert(path);
                    path.pop();
                }
            }
            None => out.insert(path),
        },
        _ => out.insert(path),
    }
}

/// Members of every object whatever its type's schema declares (TypeMeta and ObjectMeta).
const OBJECT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Whether `key` is unknown at `at`; `root`: `at` is the object's top, where TypeMeta and
/// ObjectMeta are always known.
fn unknown_key(at: At<'_>, key: &str, root: bool) -> bool {
    !(root && OBJECT_FIELDS.contains(&key)) && at.knows_not(key)
}

/// Whether `object` has a member its schema says cannot be there, at any depth.
pub(crate) fn has_unknown(object: &Value, root: At<'_>) -> bool {
    fn walk(value: &Value, at: At<'_>, root: bool) -> bool {
        match value {
            Value::Object(map) => map
                .iter()
                .any(|(k, child)| unknown_key(at, k, root) || walk(child, at.field(k), false)),
            Value::Array(items) => items.iter().any(|item| walk(item, at.items(), false)),
            _ => false,
        }
    }
    walk(object, root, true)
}

/// `object` without the members its schema says cannot be there: the object as decoding
/// into its type leaves it, which is what kube's field manager sees (its decoder dropped
/// unknown fields before), so they are never owned.
pub(crate) fn prune_unknown(object: &mut Value, root: At<'_>) {
    fn walk(value: &mut Value, at: At<'_>, root: bool) {
        match value {
            Value::Object(map) => {
                map.retain(|key, _| !unknown_key(at, key, root));
                for (key, child) in map.iter_mut() {
                    walk(child, at.field(key), false);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, at.items(), false)),
            _ => {}
        }
    }
    walk(object, root, true)
}

/// What changed from one value to another (SMD `Comparison`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Comparison {
    /// Present only in the new value (a new map or item is added with all below it).
    pub added: FieldSet,
    /// Scalars and atomic values whose value changed.
    pub modified: FieldSet,
    /// Present only in the old value.
    pub removed: FieldSet,
}

impl Comparison {
    /// The comparison without the fields in or below `ignored` (SMD's `FilterFields`).
    pub(crate) fn without(mut self, ignored: &FieldSet) -> Comparison {
        self.added.remove_recursive(ignored);
        self.modified.remove_recursive(ignored);
        self.removed.remove_recursive(ignored);
        self
    }
}

/// Compares `old` with `new` under the schema at `at`.
pub(crate) fn compare(old: Option<&Value>, new: Option<&Value>, at: At<'_>) -> Comparison {
    let mut out = Comparison::default();
    // Nothing (or an empty object, a create's live object) to compare with: everything is
    // added, and the set is built node by node (what the walk below finds, path by path).
    let nothing = old.is_none_or(|o| o.as_object().is_some_and(Map::is_empty));
    if let Some(Value::Object(new)) = new
        && nothing
        && !at.map_is_atomic()
    {
        out.added = added_paths(new, at);
        return out;
    }
    walk_compare(old, new, at, &mut Vec::new(), &mut out);
    out
}

fn walk_compare(
    old: Option<&Value>,
    new: Option<&Value>,
    at: At<'_>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let granular = match (old, new) {
        (None, None) => return,
        (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None) => !at.map_is_atomic(),
        (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None) => granular_list(at).is_some(),
        _ => false,
    };
    if !granular {
        match (old, new) {
            (None, _) => out.added.insert(path),
            (_, None) => out.removed.insert(path),
            (Some(a), Some(b)) if a != b => out.modified.insert(path),
            _ => {}
        }
        return;
    }
    match old.or(new) {
        Some(Value::Object(_)) => compare_maps(old, new, at, path, out),
        _ => compare_lists(old, new, at, path, out),
    }
    if old.is_none() {
        out.added.insert(path);
    } else if new.is_none() {
        out.removed.insert(path);
    }
}

/// The paths `walk_compare` finds in an object compared with nothing: every member, with
/// the paths below it, but `metadata.managedFields`.
fn added_paths(object: &Map<String, Value>, at: At<'_>) -> FieldSet {
    let mut set = FieldSet::new();
    for (key, child) in object {
        let in_metadata = key == "metadata";
        let below = added_below(child, at.field(key), in_metadata);
        set.insert_member(PathElement::Field(key.clone()), below);
    }
    set
}

/// The paths below a new value that `walk_compare(None, Some(value))` finds (the value
/// itself is added by its parent): those of a granular map's members and list's items.
fn added_below(value: &Value, at: At<'_>, in_metadata: bool) -> FieldSet {
    match value {
        Value::Object(map) if !at.map_is_atomic() => {
            let mut set = FieldSet::new();
            for (key, child) in map {
                if in_metadata && key == "managedFields" {
                    continue;
                }
                let below = added_below(child, at.field(key), false);
                set.insert_member(PathElement::Field(key.clone()), below);
            }
            set
        }
        Value::Array(items) => match granular_list(at) {
            Some(list_type) => {
                let mut set = FieldSet::new();
                for (element, item) in index_items(&list_type, at.items(), items) {
                    set.insert_member(element, added_below(item, at.items(), false));
                }
                set
            }
            None => FieldSet::new(),
        },
        _ => FieldSet::new(),
    }
}

fn compare_maps(
    old: Option<&Value>,
    new: Option<&Value>,
    at: At<'_>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let empty = Map::new();
    let old = old.and_then(Value::as_object).unwrap_or(&empty);
    let new = new.and_then(Value::as_object).unwrap_or(&empty);
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for key in keys {
        if is_managed_fields(path, key) {
            continue;
        }
        path.push(PathElement::Field(key.clone()));
        walk_compare(old.get(key), new.get(key), at.field(key), path, out);
        path.pop();
    }
}

fn compare_lists(
    old: Option<&Value>,
    new: Option<&Value>,
    at: At<'_>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let list_type = at.list_type();
    let old_items = index_items(&list_type, at.items(), list_items(old));
    let new_items = index_items(&list_type, at.items(), list_items(new));
    let new_by: BTreeMap<&PathElement, &Value> = new_items.iter().map(|(e, v)| (e, *v)).collect();
    let old_by: BTreeMap<&PathElement, &Value> = old_items.iter().map(|(e, v)| (e, *v)).collect();
    for (element, item) in &old_items {
        path.push(element.clone());
        walk_compare(
            Some(item),
            new_by.get(element).copied(),
            at.items(),
            path,
            out,
        );
        path.pop();
    }
    for (element, item) in new_items.iter().filter(|(e, _)| !old_by.contains_key(e)) {
        path.push(element.clone());
        walk_compare(None, Some(item), at.items(), path, out);
        path.pop();
    }
}

/// The items of a list value (none for anything else).
fn list_items(value: Option<&Value>) -> &[Value] {
    value.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// `config` merged into `live` (SMD `Merge`): maps and structs member by member, list maps
/// and sets item by item, everything else (scalars, atomic lists and maps) replaced.
pub(crate) fn merge(live: Option<&Value>, config: &Value, at: At<'_>) -> Value {
    match (live, config) {
        (Some(Value::Object(l)), Value::Object(c)) if !at.map_is_atomic() => {
            let mut out = l.clone();
            for (key, value) in c {
                let merged = merge(l.get(key), value, at.field(key));
                out.insert(key.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(c)) => match granular_list(at) {
            Some(list_type) => Value::Array(merge_lists(l, c, &list_type, at.items())),
            None => config.clone(),
        },
        // SMD reads a null granular map or list as an empty one: the live one stays.
        (Some(v @ Value::Object(_)), Value::Null) if !at.map_is_atomic() => v.clone(),
        (Some(v @ Value::Array(_)), Value::Null) if granular_list(at).is_some() => v.clone(),
        _ => config.clone(),
    }
}

/// The paths of the atomic lists, maps and structs `config` sets (SMD's `findAtomics`,
/// which MutatingAdmissionPolicy uses to refuse an apply configuration that would replace
/// one whole), in SMD's path notation (`.spec.tags`, `.spec.items[0]`).
pub(crate) fn atomics(config: &Value, at: At<'_>, path: &mut String, out: &mut Vec<String>) {
    match config {
        Value::Object(map) => {
            if at.map_is_atomic() {
                out.push(path.clone());
            }
            for (key, value) in map.iter().filter(|(k, _)| at.declares(k)) {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                atomics(value, at.field(key), path, out);
                path.truncate(len);
            }
        }
        Value::Array(items) if !at.is_free_form() => {
            if granular_list(at).is_none() {
                out.push(path.clone());
            }
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                atomics(item, at.items(), path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Merges two lists item by item in SMD's order: the configuration's items in its order,
/// live-only items kept where they were.
fn merge_lists(
    live: &[Value],
    config: &[Value],
    list_type: &ListType,
    items: At<'_>,
) -> Vec<Value> {
    let l = index_items(list_type, items, live);
    let r = index_items(list_type, items, config);
    let l_by: BTreeMap<&PathElement, &Value> = l.iter().map(|(e, v)| (e, *v)).collect();
    let r_by: BTreeMap<&PathElement, &Value> = r.iter().map(|(e, v)| (e, *v)).collect();
    let mut shared = r.iter().map(|(e, _)| e).filter(|e| l_by.contains_key(e));
    let mut next_shared = shared.next();
    let mut merged_config: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(l.len().max(r.len()));
    let (mut li, mut ri) = (0, 0);
    while li < l.len() || ri < r.len() {
        if li < l.len() && ri < r.len() {
            let element = &l[li].0;
            if *element == r[ri].0 {
                merged_config.insert(element);
                out.push(merge(Some(l[li].1), r[ri].1, items));
                (li, ri) = (li + 1, ri + 1);
                next_shared = shared.next();
                continue;
            }
            if r_by.contains_key(element) && next_shared.is_some_and(|n| n != element) {
                li += 1;
                continue;
            }
        }
        if li < l.len() {
            let element = &l[li].0;
            if !r_by.contains_key(element) {
                out.push(l[li].1.clone());
                li += 1;
                continue;
            }
            if merged_config.contains(element) {
                li += 1;
                continue;
            }
        }
        if ri < r.len() {
            let element = &r[ri].0;
            merged_config.insert(element);
            out.push(merge(l_by.get(element).copied(), r[ri].1, items));
            ri += 1;
            if next_shared == Some(element) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// Takes out of `value` what `remove` holds and `keep` does not touch (SMD `prune`):
/// a member of `remove` goes with everything below it, and so does a declared struct field
/// `remove` reaches into, as SMD's `EnsureNamedFieldsAreMembers` makes it one. Anything
/// `keep` holds or reaches into stays.
pub(crate) fn remove_unkept(value: &mut Value, remove: &FieldSet, keep: &FieldSet, at: At<'_>) {
    let empty = FieldSet::new();
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let element = PathElement::Field(key.clone());
                let named = at.declares(&key) && remove.child(&element).is_some();
                let kept = keep.has_member(&element) || keep.child(&element).is_some();
                if (remove.has_member(&element) || named) && !kept {
                    map.remove(&key);
                } else if let (Some(inner), Some(child)) =
                    (remove.child(&element), map.get_mut(&key))
                {
                    let keep_inner = keep.child(&element).unwrap_or(&empty);
                    remove_unkept(child, inner, keep_inner, at.field(&key));
                }
            }
        }
        Value::Array(items) => {
            let Some(list_type) = granular_list(at) else {
                return;
            };
            let elements: Vec<PathElement> = items
                .iter()
                .enumerate()
                .map(|(i, item)| item_element(&list_type, at.items(), i, item))
                .collect();
            let mut out = Vec::with_capacity(items.len());
            for (element, mut item) in elements.into_iter().zip(std::mem::take(items)) {
                let kept = keep.has_member(&element) || keep.child(&element).is_some();
                if remove.has_member(&element) && !kept {
                    continue;
                }
                if let Some(inner) = remove.child(&element) {
                    let keep_inner = keep.child(&element).unwrap_or(&empty);
                    remove_unkept(&mut item, inner, keep_inner, at.items());
                }
                out.push(item);
            }
            *items = out;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::PatchSchema;
    use serde_json::json;

    fn schema() -> PatchSchema {
        PatchSchema::from_json_schema(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "ports": {"type": "array", "items": {"type": "object"},
                              "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port", "protocol"]},
                    "containers": {"type": "array", "items": {"type": "object"},
                                   "x-kubernetes-patch-strategy": "merge",
                                   "x-kubernetes-patch-merge-key": "name"},
                    "tags": {"type": "array", "items": {"type": "string"},
                             "x-kubernetes-list-type": "set"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "selector": {"type": "object", "additionalProperties": {"type": "string"},
                                 "x-kubernetes-map-type": "atomic"},
                    "data": {"type": "object", "additionalProperties": {"type": "string"}}
                }}
            }
        }))
    }

    fn set_of(value: Value) -> String {
        to_field_set(&value, schema().root()).to_fields_v1_string()
    }

    #[test]
    fn field_set_follows_the_schema() {
        let value = json!({"spec": {
            "replicas": 1,
            "ports": [{"port": 80, "protocol": "TCP", "name": "http"}],
            "containers": [{"name": "a", "image": "x"}],
            "tags": ["b", "a"],
            "args": ["-v"],
            "selector": {"app": "x"},
            "data": {"k": "v"}
        }});
        assert_eq!(
            set_of(value),
            r#"{"f:metadata":{},"f:spec":{"f:args":{},"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:image":{},"f:name":{}}},"f:data":{"f:k":{}},"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{}}},"f:replicas":{},"f:selector":{},"f:tags":{"v:\"a\"":{},"v:\"b\"":{}}}}"#
                .replace(r#""f:metadata":{},"#, "")
        );
    }

    /// An empty map is a field of its own, as SMD's walk records it (kube's managedFields
    /// of an apply of `spec: {}` hold `"f:spec":{}`); an empty granular list is not.
    #[test]
    fn empty_maps_are_leaves() {
        assert_eq!(set_of(json!({"spec": {}})), r#"{"f:spec":{}}"#);
        assert_eq!(
            set_of(json!({"spec": {"data": {}, "tags": [], "replicas": null}})),
            r#"{"f:spec":{"f:data":{},"f:replicas":{}}}"#
        );
        // Not empty: only what is below it.
        assert_eq!(
            set_of(json!({"spec": {"data": {"k": "v"}}})),
            r#"{"f:spec":{"f:data":{"f:k":{}}}}"#
        );
    }

    #[test]
    fn free_form_keys_are_members() {
        let schema = PatchSchema::from_json_schema(&json!({"properties": {"spec": true}}));
        let set = to_field_set(&json!({"spec": {"a": {"b": 1}}}), schema.root());
        assert_eq!(
            set.to_fields_v1_string(),
            r#"{"f:spec":{"f:a":{".":{},"f:b":{}}}}"#
        );
    }

    #[test]
    fn compare_records_added_modified_removed() {
        let old = json!({"spec": {"replicas": 1, "tags": ["a"], "data": {"gone": "x"}}});
        let new = json!({"spec": {"replicas": 2, "tags": ["a", "b"], "ports": [{"port": 80, "protocol": "TCP"}]}});
        let c = compare(Some(&old), Some(&new), schema().root());
        assert_eq!(
            c.modified.to_fields_v1_string(),
            r#"{"f:spec":{"f:replicas":{}}}"#
        );
        assert_eq!(
            c.added.to_fields_v1_string(),
            r#"{"f:spec":{"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{}}},"f:tags":{"v:\"b\"":{}}}}"#
        );
        assert_eq!(
            c.removed.to_fields_v1_string(),
            r#"{"f:spec":{"f:data":{".":{},"f:gone":{}}}}"#
        );
        assert_eq!(
            compare(Some(&old), Some(&old), schema().root()),
            Comparison::default()
        );
    }

    #[test]
    fn merge_follows_the_schema() {
        let live = json!({"spec": {
            "replicas": 1,
            "ports": [{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 80, "protocol": "UDP"}],
            "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
            "tags": ["a"],
            "args": ["-v"],
            "selector": {"app": "x", "tier": "web"},
            "data": {"k": "v"}
        }});
        let config = json!({"spec": {
            "ports": [{"port": 80, "protocol": "TCP", "name": "web"}],
            "containers": [{"name": "c", "image": "z"}, {"name": "a", "image": "x2"}],
            "tags": ["b"],
            "args": ["-q"],
            "selector": {"app": "y"},
            "data": {"l": "w"}
        }});
        let merged = merge(Some(&live), &config, schema().root());
        assert_eq!(
            merged,
            json!({"spec": {
                "replicas": 1,
                "ports": [{"port": 80, "protocol": "TCP", "name": "web"}, {"port": 80, "protocol": "UDP"}],
                "containers": [{"name": "c", "image": "z"}, {"name": "a", "image": "x2"}, {"name": "b", "image": "y"}],
                "tags": ["a", "b"],
                "args": ["-q"],
                "selector": {"app": "y"},
                "data": {"k": "v", "l": "w"}
            }})
        );
    }

    #[test]
    fn atomics_are_found_where_the_configuration_sets_them() {
        let config = json!({"spec": {
            "containers": [{"name": "c", "image": "z"}],
            "tags": ["b"],
            "args": ["-q"],
            "selector": {"app": "y"},
        }});
        let mut found = Vec::new();
        atomics(&config, schema().root(), &mut String::new(), &mut found);
        assert_eq!(found, [".spec.args", ".spec.selector"]);
    }

    #[test]
    fn a_null_granular_map_or_list_keeps_the_live_one() {
        let live = json!({"spec": {"data": {"k": "v"}, "tags": ["a"], "replicas": 1}});
        let config = json!({"spec": {"data": null, "tags": null, "replicas": null}});
        let merged = merge(Some(&live), &config, schema().root());
        assert_eq!(
            merged,
            json!({"spec": {"data": {"k": "v"}, "tags": ["a"], "replicas": null}})
        );
    }

    /// A comparison with nothing (a create) builds its set node by node: it must find what
    /// the walk path by path finds, `metadata.managedFields` passed by, duplicates of list
    /// items once, atomic maps and lists whole, free-form and unknown members included.
    #[test]
    fn compare_with_nothing_finds_what_the_walk_finds() {
        let schema = schema();
        let objects = [
            json!({}),
            json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a",
                   "labels": {"x": "1"}, "managedFields": [{"manager": "m"}],
                   "ownerReferences": [{"uid": "u", "name": "o"}, {"uid": "u", "name": "p"}]},
                   "spec": {"replicas": 1, "tags": ["b", "a", "b"], "args": ["-v", "-v"],
                            "ports": [{"port": 80, "protocol": "TCP", "name": "http"},
                                      {"port": 80, "protocol": "TCP", "name": "dup"},
                                      {"name": "nokeys"}],
                            "containers": [{"name": "a", "image": "x", "env": [{"n": 1}]}],
                            "selector": {"app": "x"}, "data": {"k": "v", "e": {}},
                            "unknown": {"deep": [1, {"x": null}]}, "null": null},
                   "status": {"managedFields": [1], "list": [[], {}]}}),
            json!({"metadata": "not an object", "spec": [1, 2]}),
        ];
        for new in &objects {
            for old in [None, Some(json!({}))] {
                let mut walked = Comparison::default();
                walk_compare(
                    old.as_ref(),
                    Some(new),
                    schema.root(),
                    &mut Vec::new(),
                    &mut walked,
                );
                let built = compare(old.as_ref(), Some(new), schema.root());
                assert_eq!(built, walked, "{new}");
                let text = built.added.to_fields_v1_string();
                assert_eq!(
                    built.added.to_fields_v1(),
                    serde_json::from_str::<Value>(&text).unwrap()
                );
            }
        }
        let atomic = PatchSchema::from_json_schema(&json!({"x-kubernetes-map-type": "atomic"}));
        let new = json!({"spec": {"a": 1}});
        let mut walked = Comparison::default();
        walk_compare(
            Some(&json!({})),
            Some(&new),
            atomic.root(),
            &mut Vec::new(),
            &mut walked,
        );
        assert_eq!(compare(Some(&json!({})), Some(&new), atomic.root()), walked);
    }

    #[test]
    fn removes_what_nobody_keeps() {
        let mut value = json!({"spec": {"replicas": 1, "data": {"a": "1", "b": "2"},
                                        "tags": ["x", "y"]}});
        let remove = FieldSet::from_fields_v1_str(
            r#"{"f:spec":{"f:data":{"f:a":{},"f:b":{}},"f:replicas":{},"f:tags":{"v:\"x\"":{}}}}"#,
        )
        .unwrap();
        let keep = FieldSet::from_fields_v1_str(r#"{"f:spec":{"f:data":{"f:b":{}}}}"#).unwrap();
        remove_unkept(&mut value, &remove, &keep, schema().root());
        // `tags` is a struct field the applier reached into and nobody keeps: it goes
        // whole, an item nobody owned with it, as SMD's prune does.
        assert_eq!(value, json!({"spec": {"data": {"b": "2"}}}));
        // A struct field the applier reached into and nobody keeps goes whole.
        let mut value = json!({"spec": {"data": {"a": "1"}}});
        let remove = FieldSet::from_fields_v1_str(r#"{"f:spec":{"f:data":{"f:a":{}}}}"#).unwrap();
        remove_unkept(&mut value, &remove, &FieldSet::new(), schema().root());
        assert_eq!(value, json!({}));
    }
}
