//! Kubernetes strategic merge patch (`application/strategic-merge-patch+json`) as
//! `k8s.io/apimachinery/pkg/util/strategicpatch` applies it on the server: a JSON merge patch
//! whose lists may merge by key, plus the directives kubectl sends. A [`PatchSchema`] says
//! which lists merge, in place of Go's struct tags.

use serde_json::{Map, Value};

use super::schema::{At, Strategy};
use super::{PatchError, kind_of};

pub use super::schema::PatchSchema;

type Object = Map<String, Value>;
type Result<T, E = PatchError> = std::result::Result<T, E>;

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

// kube's texts for these errors (k8s.io/apimachinery/pkg/util/mergepatch/errors.go).
const ERR_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";
const ERR_LIST_OF_LISTS: &str = "lists of lists are not supported";

/// Parses a strategic merge patch body and applies it to `original`.
pub fn apply_strategic_merge_patch(
    original: &Value,
    body: &[u8],
    schema: &PatchSchema,
) -> Result<Value> {
    let patch = super::decode_json(super::PatchType::StrategicMerge, body)?;
    merge_document(original, patch, schema)
}

/// Applies the strategic merge patch `patch` to `original`, merging the lists `schema`
/// declares mergeable.
///
/// Beyond JSON merge patch (`null` deletes, maps merge) it honours, as kube-apiserver does:
/// - lists with a merge key merge item by item, primitive merge lists as sets; items named
///   in the patch take the patch's order, the others keep their place;
/// - `$patch: replace` (in a map: drop the members the patch does not set; in a list: the
///   patch's items become the list), `$patch: delete` (a map is emptied, a list item with
///   that key removed) and `$patch: merge` (the default, accepted for symmetry);
/// - `$retainKeys: [...]` (drop the members not listed), `$deleteFromPrimitiveList/<list>`
///   and `$setElementOrder/<list>`.
///
/// No directive is left in the result.
pub fn strategic_merge_patch(
    original: &Value,
    patch: &Value,
    schema: &PatchSchema,
) -> Result<Value> {
    merge_document(original, patch.clone(), schema)
}

fn merge_document(original: &Value, patch: Value, schema: &PatchSchema) -> Result<Value> {
    let Value::Object(patch) = patch else {
        let message = format!(
            "a strategic merge patch must be a JSON object, not {}",
            kind_of(&patch)
        );
        return Err(PatchError::Malformed(message));
    };
    let original = original.as_object().cloned().unwrap_or_default();
    let merged = merge_map(Some(original), patch, schema.root())?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

/// What a `$patch` member asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Directive {
    Replace,
    Delete,
    Merge,
}

/// Removes and reads the `$patch` member of `map`.
fn take_directive(map: &mut Object) -> Result<Option<Directive>> {
    let Some(value) = map.remove(PATCH_DIRECTIVE) else {
        return Ok(None);
    };
    match value.as_str() {
        Some("replace") => Ok(Some(Directive::Replace)),
        Some("delete") => Ok(Some(Directive::Delete)),
        Some("merge") => Ok(Some(Directive::Merge)),
        _ => {
            // kube's ErrBadPatchType, which it answers with a bare 500.
            let shown = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            let mut whole = map.clone();
            whole.insert(PATCH_DIRECTIVE.to_owned(), value);
            let message = format!(
                "unknown patch type: {shown} in map: {}",
                Value::Object(whole)
            );
            Err(PatchError::Failed(message))
        }
    }
}

/// Merges `patch` into `original` (`None`: the member is absent). `None` back means the
/// member stays absent: a `$patch: delete` of something that was not there.
fn merge_map(original: Option<Object>, mut patch: Object, at: At) -> Result<Option<Object>> {
    match take_directive(&mut patch)? {
        // kube leaves an empty map rather than removing the member.
        Some(Directive::Delete) => Ok(original.map(|_| Object::new())),
        Some(Directive::Replace) => merge_members(Object::new(), patch, at).map(Some),
        Some(Directive::Merge) | None => {
            merge_members(original.unwrap_or_default(), patch, at).map(Some)
        }
    }
}

/// Merges the members of `patch` into `original`, directives included.
fn merge_members(mut original: Object, mut patch: Object, at: At) -> Result<Object> {
    retain_keys(&mut original, &mut patch)?;
    let mut lists = ListDirectives::take(&mut patch, at)?;
    for (key, value) in patch {
        let order = lists.take_order(&key);
        let member = at.field(&key);
        let current = original.get_mut(&key).map(Value::take);
        match merge_value(current, value, member, order.as_deref())? {
            Some(merged) => original.insert(key, merged),
            None => original.remove(&key),
        };
    }
    lists.apply(&mut original, at)?;
    Ok(original)
}

/// Merges one member. `order` is its `$setElementOrder` list, if the patch sent one.
fn merge_value(
    current: Option<Value>,
    patch: Value,
    at: At,
    order: Option<&[Value]>,
) -> Result<Option<Value>> {
    match patch {
        // Deleting a member that is not there is no error (kube's IgnoreUnmatchedNulls).
        Value::Null => Ok(None),
        Value::Object(patch) => {
            let current = match current {
                Some(Value::Object(_)) if at.strategy() == Some(&Strategy::Replace) => {
                    Some(Object::new())
                }
                Some(Value::Object(map)) => Some(map),
                // A value of another kind is replaced, as by a merge into nothing.
                _ => None,
            };
            Ok(merge_map(current, patch, at)?.map(Value::Object))
        }
        Value::Array(patch) => {
            let current = match current {
                Some(Value::Array(list)) => list,
                _ => Vec::new(),
            };
            merge_array(current, patch, at, order).map(|list| Some(Value::Array(list)))
        }
        scalar => Ok(Some(scalar)),
    }
}

fn merge_array(
    current: Vec<Value>,
    patch: Vec<Value>,
    at: At,
    order: Option<&[Value]>,
) -> Result<Vec<Value>> {
    match at.strategy() {
        Some(Strategy::Merge { key }) => {
            merge_list(current, patch, key.as_deref(), at.items(), order)
        }
        _ => replace_list(patch, at.items()),
    }
}

/// The patch's list as the new value, its items cleaned of directives and `null` members.
fn replace_list(patch: Vec<Value>, items: At) -> Result<Vec<Value>> {
    let mut list = Vec::with_capacity(patch.len());
    for item in patch {
        if item.is_null() {
            list.push(item);
        } else if let Some(item) = merge_value(None, item, items, None)? {
            list.push(item);
        }
    }
    Ok(list)
}

/// Applies `$retainKeys`: members of `original` not listed are dropped. Every member the
/// patch sets must be listed (kube refuses the patch otherwise).
fn retain_keys(original: &mut Object, patch: &mut Object) -> Result<()> {
    let Some(retained) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retained) = retained else {
        return Err(PatchError::Malformed(ERR_RETAIN_KEYS.into()));
    };
    let keeps = |key: &str| retained.iter().any(|k| k.as_str() == Some(key));
    let unlisted =
        |(key, value): (&String, &Value)| !value.is_null() && !is_parallel_list(key) && !keeps(key);
    if patch.iter().any(unlisted) {
        return Err(PatchError::Malformed(ERR_RETAIN_KEYS.into()));
    }
    original.retain(|key, _| keeps(key));
    Ok(())
}

fn is_parallel_list(key: &str) -> bool {
    key.starts_with(SET_ELEMENT_ORDER) || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// The `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>` members of one map.
#[derive(Default)]
struct ListDirectives {
    orders: Vec<(String, Vec<Value>)>,
    deletions: Vec<(String, Vec<Value>)>,
}

impl ListDirectives {
    /// Removes the list directives from `patch`, refusing `$`-members that are neither a
    /// directive nor a member the schema allows here.
    fn take(patch: &mut Object, at: At) -> Result<Self> {
        let mut found = Self::default();
        let dollar_keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with('$'))
            .cloned()
            .collect();
        for key in dollar_keys {
            if let Some(list) = parallel_list_name(&key, SET_ELEMENT_ORDER, ERR_SET_ELEMENT_ORDER)?
            {
                let order = into_list(patch.remove(&key), ERR_SET_ELEMENT_ORDER)?;
                found.orders.push((list, order));
            } else if let Some(list) =
                parallel_list_name(&key, DELETE_FROM_PRIMITIVE_LIST, ERR_PRIMITIVE_LIST)?
            {
                let values = into_list(patch.remove(&key), ERR_PRIMITIVE_LIST)?;
                if values.iter().any(|v| v.is_object() || v.is_array()) {
                    return Err(PatchError::Malformed(ERR_PRIMITIVE_LIST.into()));
                }
                found.deletions.push((list, values));
            } else if !at.allows_key(&key) {
                return Err(PatchError::Malformed(format!(
                    "unknown strategic merge patch directive {key:?}"
                )));
            }
        }
        Ok(found)
    }

    fn take_order(&mut self, list: &str) -> Option<Vec<Value>> {
        let index = self.orders.iter().position(|(name, _)| name == list)?;
        Some(self.orders.swap_remove(index).1)
    }

    /// Orders the lists the patch did not otherwise touch, then deletes primitives.
    fn apply(self, object: &mut Object, at: At) -> Result<()> {
        for (key, order) in self.orders {
            let member = at.field(&key);
            let Some(Value::Array(list)) = object.get_mut(&key) else {
                continue;
            };
            if let Some(Strategy::Merge { key }) = member.strategy() {
                *list = merge_list(
                    std::mem::take(list),
                    Vec::new(),
                    key.as_deref(),
                    member.items(),
                    Some(&order),
                )?;
            }
        }
        for (key, doomed) in self.deletions {
            if let Some(Value::Array(list)) = object.get_mut(&key) {
                list.retain(|item| !doomed.iter().any(|d| json_eq(d, item)));
            }
        }
        Ok(())
    }
}

/// The list named by a `<prefix>/<list>` key; `None` for keys without the prefix.
fn parallel_list_name(key: &str, prefix: &str, error: &str) -> Result<Option<String>> {
    let Some(rest) = key.strip_prefix(prefix) else {
        return Ok(None);
    };
    match rest.strip_prefix('/') {
        Some(list) if !list.is_empty() => Ok(Some(list.to_owned())),
        _ => Err(PatchError::Malformed(error.into())),
    }
}

fn into_list(value: Option<Value>, error: &str) -> Result<Vec<Value>> {
    match value {
        Some(Value::Array(list)) => Ok(list),
        _ => Err(PatchError::Malformed(error.into())),
    }
}

/// How list items are matched: by a merge key's value, or (primitives) by value.
#[derive(Clone, Copy)]
enum Identity<'k> {
    Key(&'k str),
    Value,
}

impl Identity<'_> {
    fn of(self, item: &Value) -> Option<&Value> {
        match self {
            Self::Key(key) => item.get(key),
            Self::Value => Some(item),
        }
    }

    fn ids(self, items: &[Value]) -> Vec<Value> {
        items
            .iter()
            .filter_map(|item| self.of(item))
            .cloned()
            .collect()
    }
}

/// The `$patch` items of a merge list.
#[derive(Default)]
struct ListSpecials {
    replace: bool,
    deletes: Vec<Object>,
}

/// Splits `$patch` items off a merge list patch.
fn split_specials(patch: Vec<Value>) -> Result<(Vec<Value>, ListSpecials)> {
    let mut items = Vec::with_capacity(patch.len());
    let mut specials = ListSpecials::default();
    for item in patch {
        let Value::Object(mut map) = item else {
            items.push(item);
            continue;
        };
        match take_directive(&mut map)? {
            None => items.push(Value::Object(map)),
            Some(Directive::Replace) => specials.replace = true,
            Some(Directive::Delete) => specials.deletes.push(map),
            // kube refuses `$patch: merge` in a list; merging is what the list does anyway.
            Some(Directive::Merge) if map.is_empty() => {}
            Some(Directive::Merge) => items.push(Value::Object(map)),
        }
    }
    Ok((items, specials))
}

/// Whether a merge list holds maps or primitives.
#[derive(Clone, Copy, PartialEq, Debug)]
enum ListKind {
    Maps,
    Primitives,
}

fn list_kind(current: &[Value], patch: &[Value], specials: &ListSpecials) -> Result<ListKind> {
    let mut kind = (!specials.deletes.is_empty()).then_some(ListKind::Maps);
    for item in current.iter().chain(patch) {
        let item_kind = match item {
            Value::Array(_) => return Err(PatchError::Invalid(ERR_LIST_OF_LISTS.into())),
            Value::Object(_) => ListKind::Maps,
            _ => ListKind::Primitives,
        };
        if kind.is_some_and(|k| k != item_kind) {
            let message = format!(
                "list element types are not identical: {}",
                Value::Array(current.to_vec())
            );
            return Err(PatchError::Failed(message));
        }
        kind = Some(item_kind);
    }
    Ok(kind.unwrap_or(ListKind::Primitives))
}

/// Merges a list whose strategy is `merge`: maps by `key`, primitives as a set.
fn merge_list(
    current: Vec<Value>,
    patch: Vec<Value>,
    key: Option<&str>,
    items: At,
    order: Option<&[Value]>,
) -> Result<Vec<Value>> {
    let (patch, specials) = split_specials(patch)?;
    if specials.replace {
        return replace_list(patch, items);
    }
    match list_kind(&current, &patch, &specials)? {
        ListKind::Primitives => Ok(merge_primitives(current, patch, order)),
        ListKind::Maps => {
            let key = key.ok_or_else(|| {
                PatchError::Failed("cannot merge lists without merge key for type map".into())
            })?;
            merge_maps(current, patch, specials.deletes, key, items, order)
        }
    }
}

/// A set union keeping first occurrences; kube deduplicates the current items too.
fn merge_primitives(current: Vec<Value>, patch: Vec<Value>, order: Option<&[Value]>) -> Vec<Value> {
    let before = current.clone();
    let mut merged: Vec<Value> = Vec::with_capacity(current.len() + patch.len());
    for item in current.into_iter().chain(patch.iter().cloned()) {
        if !merged.iter().any(|m| json_eq(m, &item)) {
            merged.push(item);
        }
    }
    let wanted = order.unwrap_or(&patch);
    order_items(merged, wanted, &before, Identity::Value)
}

/// Merges maps matched by `key`: deletes first, then each patch item into its match or at
/// the end, then the order of the patch (or of `$setElementOrder`).
fn merge_maps(
    mut current: Vec<Value>,
    patch: Vec<Value>,
    deletes: Vec<Object>,
    key: &str,
    items: At,
    order: Option<&[Value]>,
) -> Result<Vec<Value>> {
    let identity = Identity::Key(key);
    for doomed in &deletes {
        let id = doomed.get(key).ok_or_else(|| no_merge_key(doomed, key))?;
        current.retain(|item| !identity.of(item).is_some_and(|v| json_eq(v, id)));
    }
    let before = identity.ids(&current);
    let mut patched_ids = Vec::with_capacity(patch.len());
    for item in patch {
        let Value::Object(item) = item else {
            unreachable!("list_kind saw only maps")
        };
        let id = item
            .get(key)
            .cloned()
            .ok_or_else(|| no_merge_key(&item, key))?;
        let slot = current
            .iter_mut()
            .find(|c| identity.of(c).is_some_and(|v| json_eq(v, &id)));
        match slot {
            Some(slot) => {
                let existing = match slot.take() {
                    Value::Object(map) => Some(map),
                    _ => None,
                };
                *slot = Value::Object(merge_map(existing, item, items)?.unwrap_or_default());
            }
            None => current.extend(merge_map(None, item, items)?.map(Value::Object)),
        }
        patched_ids.push(id);
    }
    let wanted = order.map_or(patched_ids, |order| identity.ids(order));
    Ok(order_items(current, &wanted, &before, identity))
}

/// kube's ErrNoMergeKey, answered with a bare 500.
fn no_merge_key(item: &Object, key: &str) -> PatchError {
    let item = Value::Object(item.clone());
    PatchError::Failed(format!(
        "map: {item} does not contain declared merge key: {key}"
    ))
}

/// Orders a merged list as kube does: the items named in `wanted` (the patch list, or
/// `$setElementOrder`) in that order, the others in their order, and the two sequences
/// interleaved by the items' places in the list before the patch (`before`, as ids).
fn order_items(
    merged: Vec<Value>,
    wanted: &[Value],
    before: &[Value],
    identity: Identity,
) -> Vec<Value> {
    let position = |ids: &[Value], item: &Value| {
        let id = identity.of(item)?;
        ids.iter().position(|w| json_eq(w, id))
    };
    let mut named = Vec::new();
    let mut others = Vec::new();
    for item in merged {
        match position(wanted, &item) {
            Some(rank) => named.push((rank, item)),
            None => others.push(item),
        }
    }
    named.sort_by_key(|(rank, _)| *rank);
    let named = named.into_iter().map(|(_, item)| item).collect();
    interleave(others, named, |item| position(before, item))
}

/// Merges two ordered sequences: an item of `others` goes first only when both it and the
/// next `named` item were in the list before and it came earlier; so new items are placed
/// as early as their order allows, as kube's mergeSortedSlice does.
fn interleave(
    others: Vec<Value>,
    named: Vec<Value>,
    place: impl Fn(&Value) -> Option<usize>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(others.len() + named.len());
    let mut others = others.into_iter().map(|v| (place(&v), v)).peekable();
    let mut named = named.into_iter().map(|v| (place(&v), v)).peekable();
    loop {
        let other_first = match (others.peek(), named.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((o, _)), Some((n, _))) => matches!((o, n), (Some(o), Some(n)) if o < n),
        };
        let next = if other_first {
            others.next()
        } else {
            named.next()
        };
        out.extend(next.map(|(_, item)| item));
    }
    out
}

/// JSON equality where `1` and `1.0` are the same number (kube's decoder yields both).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            x.as_f64() == y.as_f64()
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Fails the test if a patch directive survived into `value`.
    fn assert_no_directives(value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, member) in map {
                    let directive =
                        key == PATCH_DIRECTIVE || key == RETAIN_KEYS || is_parallel_list(key);
                    assert!(!directive, "directive {key} left in the result");
                    assert_no_directives(member);
                }
            }
            Value::Array(items) => items.iter().for_each(assert_no_directives),
            _ => {}
        }
    }

    fn smp_with(schema: &PatchSchema, original: Value, patch: Value) -> Value {
        let merged = strategic_merge_patch(&original, &patch, schema)
            .unwrap_or_else(|e| panic!("{patch}: {e}"));
        assert_no_directives(&merged);
        merged
    }

    fn smp(original: Value, patch: Value) -> Value {
        smp_with(&merge_item_schema(), original, patch)
    }

    fn smp_err(original: Value, patch: Value) -> PatchError {
        strategic_merge_patch(&original, &patch, &merge_item_schema()).unwrap_err()
    }

    /// strategicpatch's test type `MergeItem`, as a JSON schema.
    fn merge_item_schema() -> PatchSchema {
        let merge_by_name = |items: Value| {
            json!({"type": "array", "items": items,
                   "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"})
        };
        PatchSchema::from_json_schema(&json!({
            "$ref": "#/$defs/MergeItem",
            "$defs": {
                "MergeItem": {"type": "object", "properties": {
                    "name": {"type": "string"}, "value": {"type": "string"}, "other": {"type": "string"},
                    "mergingList": merge_by_name(json!({"$ref": "#/$defs/MergeItem"})),
                    "nonMergingList": {"type": "array", "items": {"$ref": "#/$defs/MergeItem"}},
                    "mergingIntList": {"type": "array", "items": {"type": "integer"},
                                       "x-kubernetes-patch-strategy": "merge"},
                    "nonMergingIntList": {"type": "array", "items": {"type": "integer"}},
                    "simpleMap": {"type": "object", "additionalProperties": {"type": "string"}},
                    "replacingItem": {"x-kubernetes-patch-strategy": "replace"},
                    "retainKeysMap": {"$ref": "#/$defs/MergeItem", "x-kubernetes-patch-strategy": "retainKeys"},
                    "retainKeysMergingList": {"type": "array", "items": {"$ref": "#/$defs/MergeItem"},
                        "x-kubernetes-patch-strategy": "merge,retainKeys", "x-kubernetes-patch-merge-key": "name"}
                }}
            }
        }))
    }

    #[test]
    fn maps_merge_and_null_deletes() {
        let original = json!({"name": "1", "simpleMap": {"key1": "1", "key2": "1", "other": "a"}});
        let patch = json!({"value": "1", "simpleMap": {"key2": null, "key3": "3"}, "absent": null});
        let expected = json!({"name": "1", "value": "1", "simpleMap": {"key1": "1", "other": "a", "key3": "3"}});
        assert_eq!(smp(original, patch), expected);
    }

    #[test]
    fn merge_list_items_merge_by_key_and_new_items_come_first() {
        let original = json!({"mergingList": [
            {"name": "a", "value": "1", "simpleMap": {"k": "v"}},
            {"name": "b", "value": "2"}
        ]});
        let patch = json!({"mergingList": [
            {"name": "b", "other": "x"},
            {"name": "c", "value": "3"},
            {"name": "a", "simpleMap": {"k2": "v2"}, "value": null}
        ]});
        // Patch items follow the patch's order; c, new, is placed as early as that allows.
        let expected = json!({"mergingList": [
            {"name": "b", "value": "2", "other": "x"},
            {"name": "c", "value": "3"},
            {"name": "a", "simpleMap": {"k": "v", "k2": "v2"}}
        ]});
        assert_eq!(smp(original, patch), expected);
        let original = json!({"mergingList": [{"name": "a"}, {"name": "b"}]});
        let patched = smp(original, json!({"mergingList": [{"name": "c"}]}));
        assert_eq!(
            patched,
            json!({"mergingList": [{"name": "c"}, {"name": "a"}, {"name": "b"}]})
        );
    }

    #[test]
    fn nested_merge_lists_inside_merged_items() {
        let original = json!({"mergingList": [{"name": "a", "mergingList": [{"name": "x", "value": "1"}],
                                                "nonMergingList": [{"name": "p"}]}]});
        let patch = json!({"mergingList": [{"name": "a", "mergingList": [{"name": "x", "other": "o"}],
                                             "nonMergingList": [{"name": "q"}]}]});
        let expected = json!({"mergingList": [{"name": "a", "mergingList": [{"name": "x", "value": "1", "other": "o"}],
                                                "nonMergingList": [{"name": "q"}]}]});
        assert_eq!(smp(original, patch), expected);
    }

    #[test]
    fn lists_without_a_strategy_are_replaced() {
        let original =
            json!({"nonMergingList": [{"name": "1"}, {"name": "2"}], "nonMergingIntList": [1, 2]});
        let patch =
            json!({"nonMergingList": [{"name": "3", "value": null}], "nonMergingIntList": [2, 3]});
        assert_eq!(
            smp(original, patch),
            json!({"nonMergingList": [{"name": "3"}], "nonMergingIntList": [2, 3]})
        );
    }

    #[test]
    fn primitive_merge_lists_are_sets() {
        let patched = smp(
            json!({"mergingIntList": [1, 2]}),
            json!({"mergingIntList": [2, 3]}),
        );
        assert_eq!(patched, json!({"mergingIntList": [1, 2, 3]}));
        let patched = smp(
            json!({"mergingIntList": [1, 1, 2]}),
            json!({"mergingIntList": [2.0]}),
        );
        assert_eq!(patched, json!({"mergingIntList": [1, 2]}));
    }

    #[test]
    fn merge_lists_take_the_patch_order() {
        let original =
            json!({"mergingList": [{"name": "1"}, {"name": "2", "value": "b"}, {"name": "3"}]});
        let patch =
            json!({"mergingList": [{"name": "3", "value": "c"}, {"name": "1", "value": "a"}]});
        let expected = json!({"mergingList": [{"name": "2", "value": "b"}, {"name": "3", "value": "c"}, {"name": "1", "value": "a"}]});
        assert_eq!(smp(original, patch), expected);
        let patched = smp(
            json!({"mergingIntList": [1, 2, 3]}),
            json!({"mergingIntList": [3, 1]}),
        );
        assert_eq!(patched, json!({"mergingIntList": [2, 3, 1]}));
    }

    #[test]
    fn an_empty_merge_list_patch_changes_nothing() {
        let original = json!({"mergingList": [{"name": "1"}]});
        assert_eq!(smp(original.clone(), json!({"mergingList": []})), original);
    }

    #[test]
    fn replace_directive_in_maps() {
        let patched = smp(
            json!({"name": "1", "value": "1"}),
            json!({"$patch": "replace"}),
        );
        assert_eq!(patched, json!({}));
        let patched = smp(
            json!({"name": "1", "value": "1"}),
            json!({"other": "a", "$patch": "replace"}),
        );
        assert_eq!(patched, json!({"other": "a"}));
        let original = json!({"name": "n", "simpleMap": {"a": "1", "b": "2"}});
        let patched = smp(
            original,
            json!({"simpleMap": {"$patch": "replace", "c": "3", "d": null}}),
        );
        assert_eq!(patched, json!({"name": "n", "simpleMap": {"c": "3"}}));
    }

    #[test]
    fn replace_directive_in_merge_lists() {
        let original = json!({"mergingList": [{"name": "1"}, {"name": "2"}]});
        assert_eq!(
            smp(
                original.clone(),
                json!({"mergingList": [{"$patch": "replace"}]})
            ),
            json!({"mergingList": []})
        );
        let patch = json!({"mergingList": [{"name": "3", "value": "x"}, {"$patch": "replace"}]});
        assert_eq!(
            smp(original, patch),
            json!({"mergingList": [{"name": "3", "value": "x"}]})
        );
        let patch = json!({"mergingIntList": [5, {"$patch": "replace"}]});
        assert_eq!(
            smp(json!({"mergingIntList": [1, 2]}), patch),
            json!({"mergingIntList": [5]})
        );
    }

    #[test]
    fn delete_directive_in_merge_lists_removes_every_match() {
        let original = json!({"mergingList": [{"name": "1"}, {"name": "1"}, {"name": "2", "value": "a"},
                                              {"name": "3"}, {"name": "3"}]});
        let patch = json!({"mergingList": [{"name": "1", "$patch": "delete"}, {"name": "3", "$patch": "delete"}]});
        assert_eq!(
            smp(original, patch),
            json!({"mergingList": [{"name": "2", "value": "a"}]})
        );
        let patch = json!({"mergingList": [{"name": "9", "$patch": "delete"}]});
        assert_eq!(smp(json!({}), patch), json!({"mergingList": []}));
    }

    #[test]
    fn delete_directive_in_maps() {
        let original = json!({"name": "n", "simpleMap": {"key1": "1", "key2": "1"}});
        assert_eq!(
            smp(original, json!({"simpleMap": {"$patch": "delete"}})),
            json!({"name": "n", "simpleMap": {}})
        );
        // Nothing to delete: the member stays absent rather than becoming `{}`.
        assert_eq!(
            smp(
                json!({"name": "n"}),
                json!({"simpleMap": {"$patch": "delete"}})
            ),
            json!({"name": "n"})
        );
        assert_eq!(
            smp(json!({"name": "n"}), json!({"$patch": "delete"})),
            json!({})
        );
    }

    #[test]
    fn merge_directive_is_the_default() {
        let patched = smp(
            json!({"simpleMap": {"a": "1"}}),
            json!({"simpleMap": {"$patch": "merge", "b": "2"}}),
        );
        assert_eq!(patched, json!({"simpleMap": {"a": "1", "b": "2"}}));
        let patch = json!({"mergingList": [{"$patch": "merge"}, {"name": "2", "$patch": "merge"}]});
        let patched = smp(json!({"mergingList": [{"name": "1"}]}), patch);
        assert_eq!(
            patched,
            json!({"mergingList": [{"name": "2"}, {"name": "1"}]})
        );
    }

    #[test]
    fn replace_strategy_replaces_maps() {
        let original = json!({"replacingItem": {"a": 1, "b": {"c": 2}}});
        let patched = smp(original, json!({"replacingItem": {"b": {"d": 3}}}));
        assert_eq!(patched, json!({"replacingItem": {"b": {"d": 3}}}));
    }

    #[test]
    fn retain_keys_clears_unlisted_members() {
        let original = json!({"retainKeysMap": {"name": "foo", "value": "a", "other": "x"}});
        let patch = json!({"retainKeysMap": {"$retainKeys": ["name", "value"], "value": "b"}});
        assert_eq!(
            smp(original, patch),
            json!({"retainKeysMap": {"name": "foo", "value": "b"}})
        );
        // Without the directive a retainKeys map merges as usual.
        let original = json!({"retainKeysMap": {"name": "foo"}});
        let patched = smp(original, json!({"retainKeysMap": {"value": "bar"}}));
        assert_eq!(
            patched,
            json!({"retainKeysMap": {"name": "foo", "value": "bar"}})
        );
    }

    #[test]
    fn retain_keys_in_merge_list_items() {
        // kubectl's way of switching a volume's source from hostPath to emptyDir.
        let original =
            json!({"retainKeysMergingList": [{"name": "v", "value": "hostPath"}, {"name": "w"}]});
        let patch = json!({"retainKeysMergingList": [{"name": "v", "other": "emptyDir",
                                                        "$retainKeys": ["name", "other"]}]});
        let expected =
            json!({"retainKeysMergingList": [{"name": "v", "other": "emptyDir"}, {"name": "w"}]});
        assert_eq!(smp(original, patch), expected);
    }

    #[test]
    fn retain_keys_must_list_what_the_patch_sets() {
        let patch =
            json!({"retainKeysMap": {"$retainKeys": ["name"], "value": "b", "other": null}});
        let e = smp_err(json!({}), patch);
        assert_eq!(
            (e.status_code(), e.to_string()),
            (400, ERR_RETAIN_KEYS.to_owned())
        );
        let e = smp_err(json!({}), json!({"retainKeysMap": {"$retainKeys": "name"}}));
        assert_eq!(e.status_code(), 400);
    }

    #[test]
    fn set_element_order_orders_merged_maps() {
        let current = json!({"mergingList": [{"name": "1", "other": "a"}, {"name": "2", "value": "2", "other": "b"}]});
        let patch = json!({
            "$setElementOrder/mergingList": [{"name": "4"}, {"name": "1"}, {"name": "2"}, {"name": "3"}],
            "mergingList": [{"name": "4", "value": "4"}, {"name": "3", "value": "3"}]
        });
        let expected = json!({"mergingList": [{"name": "4", "value": "4"}, {"name": "1", "other": "a"},
                                              {"name": "2", "value": "2", "other": "b"}, {"name": "3", "value": "3"}]});
        assert_eq!(smp(current, patch), expected);
    }

    #[test]
    fn set_element_order_keeps_server_only_items_in_place() {
        let current =
            json!({"mergingList": [{"name": "1", "other": "a"}, {"name": "3", "value": "2"}]});
        let patch = json!({
            "$setElementOrder/mergingList": [{"name": "1"}, {"name": "2"}],
            "mergingList": [{"name": "1", "value": "1"}, {"name": "2", "value": "2"}]
        });
        let expected = json!({"mergingList": [{"name": "1", "value": "1", "other": "a"},
                                              {"name": "2", "value": "2"}, {"name": "3", "value": "2"}]});
        assert_eq!(smp(current, patch), expected);
    }

    #[test]
    fn set_element_order_alone_reorders() {
        let patch = json!({"$setElementOrder/mergingIntList": [3, 2, 1]});
        assert_eq!(
            smp(json!({"mergingIntList": [1, 3]}), patch),
            json!({"mergingIntList": [3, 1]})
        );
        let patch = json!({"$setElementOrder/mergingList": [{"name": "3"}, {"name": "2"}, {"name": "1"}],
                           "mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]});
        let patched = smp(
            json!({"mergingList": [{"name": "1"}, {"name": "3"}]}),
            patch,
        );
        assert_eq!(
            patched,
            json!({"mergingList": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]})
        );
        // Nothing to order: the directive only disappears.
        let patched = smp(
            json!({"name": "n"}),
            json!({"$setElementOrder/mergingList": [{"name": "1"}]}),
        );
        assert_eq!(patched, json!({"name": "n"}));
    }

    #[test]
    fn set_element_order_wins_over_the_patch_order() {
        // kube refuses a patch list ordered differently from $setElementOrder; we follow the
        // directive, which kube documents as taking precedence.
        let patch = json!({"$setElementOrder/mergingIntList": [1, 2, 3], "mergingIntList": [3, 1]});
        assert_eq!(
            smp(json!({"mergingIntList": [1, 3, 2]}), patch),
            json!({"mergingIntList": [1, 2, 3]})
        );
    }

    #[test]
    fn delete_from_primitive_list() {
        let patch = json!({"$setElementOrder/mergingIntList": [1, 2], "$deleteFromPrimitiveList/mergingIntList": [3]});
        assert_eq!(
            smp(json!({"mergingIntList": [1, 2, 3, 3, 4]}), patch),
            json!({"mergingIntList": [1, 2, 4]})
        );
        let patch = json!({"$setElementOrder/mergingIntList": [1, 2, 4],
                           "$deleteFromPrimitiveList/mergingIntList": [3], "mergingIntList": [4]});
        assert_eq!(
            smp(json!({"mergingIntList": [1, 2, 3]}), patch),
            json!({"mergingIntList": [1, 2, 4]})
        );
        let patch = json!({"$deleteFromPrimitiveList/mergingIntList": [3]});
        assert_eq!(smp(json!({}), patch), json!({}));
    }

    #[test]
    fn malformed_list_directives_are_400() {
        for (patch, message) in [
            (json!({"$setElementOrder": [1]}), ERR_SET_ELEMENT_ORDER),
            (
                json!({"$setElementOrder/mergingIntList": 1}),
                ERR_SET_ELEMENT_ORDER,
            ),
            (
                json!({"$deleteFromPrimitiveList/": [1]}),
                ERR_PRIMITIVE_LIST,
            ),
            (
                json!({"$deleteFromPrimitiveListX/mergingIntList": [1]}),
                ERR_PRIMITIVE_LIST,
            ),
            (
                json!({"$deleteFromPrimitiveList/mergingIntList": [{"a": 1}]}),
                ERR_PRIMITIVE_LIST,
            ),
        ] {
            let e = smp_err(json!({"mergingIntList": [1]}), patch.clone());
            assert_eq!(
                (e.status_code(), e.to_string()),
                (400, message.to_owned()),
                "{patch}"
            );
        }
    }

    #[test]
    fn unknown_patch_types_fail_like_kube() {
        let e = smp_err(json!({}), json!({"simpleMap": {"$patch": "frobnicate"}}));
        assert_eq!((e.status_code(), e.reason()), (500, ""));
        assert_eq!(
            e.to_string(),
            r#"unknown patch type: frobnicate in map: {"$patch":"frobnicate"}"#
        );
        let e = smp_err(
            json!({}),
            json!({"mergingList": [{"name": "1", "$patch": 7}]}),
        );
        assert!(
            e.to_string().starts_with("unknown patch type: 7 in map:"),
            "{e}"
        );
    }

    #[test]
    fn unknown_dollar_members_are_refused_unless_the_schema_has_them() {
        let e = smp_err(json!({}), json!({"$frobnicate": 1}));
        assert_eq!(e.status_code(), 400);
        assert!(e.to_string().contains("\"$frobnicate\""), "{e}");
        // Map keys are data.
        let patched = smp(json!({}), json!({"simpleMap": {"$key": "v"}}));
        assert_eq!(patched, json!({"simpleMap": {"$key": "v"}}));
        let schema =
            PatchSchema::from_json_schema(&json!({"properties": {"$ref": {"type": "string"}}}));
        assert_eq!(
            smp_with(&schema, json!({}), json!({"$ref": "x"})),
            json!({"$ref": "x"})
        );
    }

    #[test]
    fn merge_list_items_need_their_key() {
        let e = smp_err(
            json!({"mergingList": [{"name": "1", "value": "a"}]}),
            json!({"mergingList": [{"value": "b"}]}),
        );
        assert_eq!((e.status_code(), e.reason()), (500, ""));
        assert_eq!(
            e.to_string(),
            r#"map: {"value":"b"} does not contain declared merge key: name"#
        );
        let e = smp_err(
            json!({}),
            json!({"mergingList": [{"$patch": "delete", "value": "b"}]}),
        );
        assert!(
            e.to_string()
                .contains("does not contain declared merge key: name"),
            "{e}"
        );
    }

    #[test]
    fn lists_of_lists_are_422() {
        let e = smp_err(json!({}), json!({"mergingIntList": [[1]]}));
        assert_eq!((e.status_code(), e.reason()), (422, "Invalid"));
        assert!(e.to_string().ends_with(ERR_LIST_OF_LISTS));
    }

    #[test]
    fn mixed_merge_lists_fail() {
        let e = smp_err(
            json!({"mergingIntList": [1]}),
            json!({"mergingIntList": [{"a": 1}]}),
        );
        assert_eq!(e.status_code(), 500);
        assert!(
            e.to_string()
                .starts_with("list element types are not identical"),
            "{e}"
        );
        let schema = PatchSchema::from_json_schema(
            &json!({"properties": {"set": {"x-kubernetes-list-type": "set"}}}),
        );
        let e =
            strategic_merge_patch(&json!({}), &json!({"set": [{"a": 1}]}), &schema).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot merge lists without merge key for type map"
        );
    }

    #[test]
    fn values_of_another_kind_are_replaced() {
        let original =
            json!({"simpleMap": "text", "mergingList": {"name": "x"}, "value": {"a": 1}});
        let patch = json!({"simpleMap": {"a": "1", "b": null}, "mergingList": [{"name": "1"}], "value": "v"});
        assert_eq!(
            smp(original, patch),
            json!({"simpleMap": {"a": "1"}, "mergingList": [{"name": "1"}], "value": "v"})
        );
    }

    #[test]
    fn new_members_are_cleaned_of_directives() {
        let patch = json!({"mergingList": [{"name": "1", "$retainKeys": ["name", "simpleMap"],
                                            "simpleMap": {"$patch": "replace", "a": "1", "b": null}}],
                           "retainKeysMap": {"mergingList": [{"name": "2", "$patch": "delete"}, {"name": "3"}]}});
        let expected = json!({"mergingList": [{"name": "1", "simpleMap": {"a": "1"}}],
                              "retainKeysMap": {"mergingList": [{"name": "3"}]}});
        assert_eq!(smp(json!({}), patch), expected);
        let patch = json!({"nonMergingList": [{"name": "1", "mergingList": [{"$patch": "replace"}]}, null]});
        assert_eq!(
            smp(json!({}), patch),
            json!({"nonMergingList": [{"name": "1", "mergingList": []}, null]})
        );
    }

    #[test]
    fn finalizers_and_owner_references_without_a_schema() {
        let original = json!({"metadata": {"name": "x", "finalizers": ["a", "b"], "labels": {"l": "1"},
            "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "K"}]}});
        let patch = json!({"metadata": {"finalizers": ["b", "c"], "labels": {"l": null, "m": "2"},
            "ownerReferences": [{"uid": "u1", "controller": true}, {"uid": "u2", "name": "o2"}]}});
        let expected = json!({"metadata": {"name": "x", "finalizers": ["a", "b", "c"], "labels": {"m": "2"},
            "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "K", "controller": true},
                                {"uid": "u2", "name": "o2"}]}});
        assert_eq!(smp_with(&PatchSchema::empty(), original, patch), expected);
        let patch = json!({"$setElementOrder/finalizers": ["a"], "$deleteFromPrimitiveList/finalizers": ["b"]});
        let patched = smp_with(
            &PatchSchema::empty(),
            json!({"finalizers": ["a", "b"]}),
            json!({"metadata": patch}),
        );
        assert_eq!(patched, json!({"finalizers": ["a", "b"], "metadata": {}}));
    }

    #[test]
    fn removing_a_finalizer_the_kubectl_way() {
        let original = json!({"metadata": {"finalizers": ["a", "b", "c"]}});
        let patch = json!({"metadata": {"$setElementOrder/finalizers": ["a", "c"],
                                        "$deleteFromPrimitiveList/finalizers": ["b"]}});
        let patched = smp_with(&PatchSchema::empty(), original, patch);
        assert_eq!(patched, json!({"metadata": {"finalizers": ["a", "c"]}}));
    }

    #[test]
    fn bodies_must_be_json_objects() {
        let schema = PatchSchema::empty();
        for body in ["[]", "null", "1", "{"] {
            let e = apply_strategic_merge_patch(&json!({}), body.as_bytes(), &schema).unwrap_err();
            assert_eq!(e.status_code(), 400, "{body}");
        }
        let patched =
            apply_strategic_merge_patch(&json!({"a": 1}), br#"{"b": 2}"#, &schema).unwrap();
        assert_eq!(patched, json!({"a": 1, "b": 2}));
    }

    #[test]
    fn pod_templates_from_k8s_openapi_merge_containers() {
        let schema = PatchSchema::for_type::<k8s_openapi::api::core::v1::PodTemplateSpec>();
        let original = json!({"spec": {"containers": [
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "side:1"}
        ]}});
        let patch = json!({"spec": {"containers": [{"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]}]}});
        let expected = json!({"spec": {"containers": [
            {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "side:1"}
        ]}});
        assert_eq!(smp_with(&schema, original, patch), expected);
    }

    mod schemars_generated {
        use super::*;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        use schemars::generate::SchemaSettings;

        #[derive(schemars::JsonSchema, serde::Serialize)]
        struct Widget {
            metadata: ObjectMeta,
            spec: WidgetSpec,
        }

        #[derive(schemars::JsonSchema, serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct WidgetSpec {
            #[schemars(extend("x-kubernetes-patch-strategy" = "merge", "x-kubernetes-patch-merge-key" = "name"))]
            ports: Vec<Port>,
            #[schemars(extend("x-kubernetes-patch-strategy" = "merge", "x-kubernetes-patch-merge-key" = "name"))]
            extra_ports: Option<Vec<Port>>,
            #[schemars(extend("x-kubernetes-patch-strategy" = "merge"))]
            tags: Vec<String>,
            plain: Vec<Port>,
        }

        #[derive(schemars::JsonSchema, serde::Serialize)]
        struct Port {
            name: String,
            port: u16,
        }

        fn widget() -> Value {
            let port = |name: &str, port| Port {
                name: name.into(),
                port,
            };
            let spec = WidgetSpec {
                ports: vec![port("http", 80), port("https", 443)],
                extra_ports: Some(vec![port("metrics", 9090)]),
                tags: vec!["a".into()],
                plain: vec![port("p", 1)],
            };
            let metadata = ObjectMeta {
                name: Some("w".into()),
                finalizers: Some(vec!["f".into()]),
                ..Default::default()
            };
            serde_json::to_value(Widget { metadata, spec }).unwrap()
        }

        fn check(schema: &PatchSchema) {
            let patch = json!({
                "metadata": {"finalizers": ["g"]},
                "spec": {
                    "ports": [{"name": "http", "port": 8080}],
                    "extraPorts": [{"name": "metrics", "port": 9100}],
                    "tags": ["b"],
                    "plain": [{"name": "q", "port": 2}]
                }
            });
            let patched = smp_with(schema, widget(), patch);
            assert_eq!(
                patched["spec"]["ports"],
                json!([{"name": "http", "port": 8080}, {"name": "https", "port": 443}])
            );
            assert_eq!(
                patched["spec"]["extraPorts"],
                json!([{"name": "metrics", "port": 9100}])
            );
            // New items go first unless the patch orders them, as in kube.
            assert_eq!(patched["spec"]["tags"], json!(["b", "a"]));
            assert_eq!(patched["spec"]["plain"], json!([{"name": "q", "port": 2}]));
            assert_eq!(patched["metadata"]["finalizers"], json!(["g", "f"]));
        }

        #[test]
        fn openapi3_settings() {
            let schema = SchemaSettings::openapi3()
                .into_generator()
                .root_schema_for::<Widget>();
            check(&PatchSchema::from_json_schema(schema.as_value()));
        }

        #[test]
        fn default_and_draft07_settings() {
            let schema = SchemaSettings::default()
                .into_generator()
                .root_schema_for::<Widget>();
            check(&PatchSchema::from_json_schema(schema.as_value()));
            let schema = SchemaSettings::draft07()
                .into_generator()
                .root_schema_for::<Widget>();
            check(&PatchSchema::from_json_schema(schema.as_value()));
            check(&PatchSchema::for_type::<Widget>());
        }
    }
}
