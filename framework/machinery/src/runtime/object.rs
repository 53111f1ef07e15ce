//! Reading and writing well-known fields of objects held as JSON values.
//!
//! Storage and the REST layer move objects as `serde_json::Value`; these helpers keep the
//! paths of `metadata` fields in one place.

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// The `metadata` map, if the object has one.
pub fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata")?.as_object()
}

/// The `metadata` map, created when absent (or when `metadata` is not a map).
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = object.as_object_mut().expect("object");
    let entry = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("metadata map")
}

/// A string field of `metadata` (`name`, `namespace`, `uid`, `resourceVersion`, ...); empty
/// strings count as absent.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    metadata(object)?
        .get(field)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// Sets a field of `metadata`; `Value::Null` removes it.
pub fn set_meta(object: &mut Value, field: &str, value: Value) {
    let meta = metadata_mut(object);
    if value.is_null() {
        meta.remove(field);
    } else {
        meta.insert(field.to_string(), value);
    }
}

/// `metadata.name`.
pub fn name(object: &Value) -> Option<&str> {
    meta_str(object, "name")
}

/// `metadata.namespace`.
pub fn namespace(object: &Value) -> Option<&str> {
    meta_str(object, "namespace")
}

/// `metadata.resourceVersion`.
pub fn resource_version(object: &Value) -> Option<&str> {
    meta_str(object, "resourceVersion")
}

/// `metadata.labels` as a map (non-string values are skipped).
pub fn labels(object: &Value) -> BTreeMap<String, String> {
    let Some(map) = metadata(object)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    else {
        return BTreeMap::new();
    };
    map.iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// `metadata.finalizers`.
pub fn finalizers(object: &Value) -> Vec<String> {
    metadata(object)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_being_deleted(object: &Value) -> bool {
    meta_str(object, "deletionTimestamp").is_some()
}

/// The current time as kube writes timestamps: RFC 3339, whole seconds, UTC. Formatted once
/// a second on each thread (a write asks twice: its creation time and its managedFields'),
/// copied for the other calls of the second.
pub fn now_timestamp() -> String {
    thread_local! {
        /// The second last formatted on this thread, and its text.
        static LAST: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
    }
    let now = jiff::Timestamp::now();
    let format = || {
        let seconds = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
        seconds.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    };
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != now.as_second() {
            *last = (now.as_second(), format());
        }
        last.1.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_and_writes_metadata() {
        let mut o = json!({"metadata": {"name": "a", "labels": {"x": "1"}, "namespace": ""}});
        assert_eq!(name(&o), Some("a"));
        assert_eq!(namespace(&o), None);
        assert_eq!(labels(&o).get("x").map(String::as_str), Some("1"));
        set_meta(&mut o, "uid", json!("u"));
        assert_eq!(meta_str(&o, "uid"), Some("u"));
        set_meta(&mut o, "uid", Value::Null);
        assert_eq!(meta_str(&o, "uid"), None);
        let mut bare = json!(5);
        set_meta(&mut bare, "name", json!("b"));
        assert_eq!(name(&bare), Some("b"));
    }

    /// Whole seconds in UTC, the time now; a second call (formatted once, then copied) never
    /// goes back.
    #[test]
    fn timestamps_are_whole_seconds() {
        let (t, again) = (now_timestamp(), now_timestamp());
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
        let parsed: jiff::Timestamp = again.parse().unwrap();
        assert!((jiff::Timestamp::now().as_second() - parsed.as_second()).abs() <= 1);
        assert!(t <= again, "{t} {again}");
    }
}
