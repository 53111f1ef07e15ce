//! The generic strategy: what create and update do to an object before it is validated and
//! stored, as `k8s.io/apiserver`'s `RESTCreateStrategy` / `RESTUpdateStrategy` defaults.
//!
//! These work on JSON so that they apply to every type alike; the per-type hooks
//! (defaulting, validation) are methods of [`Resource`](crate::Resource).

use serde_json::{json, Map, Value};

use crate::runtime::object::{metadata, metadata_mut};
use crate::runtime::ResourceInfo;

/// Which path an update came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateTarget {
    /// The main resource: status changes are ignored.
    Main,
    /// The `status` subresource: only status changes are kept.
    Status,
}

/// Fields of `metadata` only the server sets; a client's values are replaced.
const SERVER_MANAGED: [&str; 5] = [
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
];

/// Prepares a new object: clears `status` (for types with a status subresource) and every
/// server-managed metadata field; sets `generation` to 1.
pub fn prepare_for_create(info: &ResourceInfo, object: &mut Value) {
    if info.status {
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }
    let meta = metadata_mut(object);
    for field in SERVER_MANAGED {
        meta.remove(field);
    }
    meta.remove("resourceVersion");
    meta.insert("generation".into(), json!(1));
}

/// Prepares an update of `old` to `new` through `target`: keeps the part the target may not
/// change, keeps server-managed metadata, and bumps `generation` when anything but metadata
/// and status changed.
pub fn prepare_for_update(info: &ResourceInfo, target: UpdateTarget, new: &mut Value, old: &Value) {
    keep_what_target_may_not_change(info, target, new, old);
    let old_meta = metadata(old).cloned().unwrap_or_default();
    keep_server_managed(metadata_mut(new), &old_meta);
    let generation = old_meta
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let bumped = if spec_changed(new, old) {
        generation + 1
    } else {
        generation
    };
    metadata_mut(new).insert("generation".into(), json!(bumped));
}

/// Puts back the part of `old` an update through `target` may not change: the status on
/// the main resource (for types with a status subresource), everything but the status on
/// `/status`. Done before the object is decoded too, so that a part the update ignores
/// cannot fail it (kube validates custom resources after its strategy ran).
pub fn keep_what_target_may_not_change(
    info: &ResourceInfo,
    target: UpdateTarget,
    new: &mut Value,
    old: &Value,
) {
    match target {
        UpdateTarget::Main if info.status => copy_field(new, old, "status"),
        UpdateTarget::Main => {}
        UpdateTarget::Status => keep_only_status(new, old),
    }
}

/// kube's `BeforeUpdate`: a client cannot move the generation or creationTimestamp (they are
/// put back silently), nor remove the deletion fields once set; a uid, deletionTimestamp or
/// grace period it changes is left in place for `validate_object_meta_update` to refuse
/// (422 "field is immutable"), so an update aimed at another incarnation of the name fails.
fn keep_server_managed(meta: &mut Map<String, Value>, old: &Map<String, Value>) {
    let is_set = |m: &Map<String, Value>, k: &str| m.get(k).is_some_and(|v| !v.is_null());
    for field in SERVER_MANAGED {
        let restore = match field {
            "generation" | "creationTimestamp" => true,
            "deletionTimestamp" => is_set(old, field),
            // uid, deletionGracePeriodSeconds: filled in only when the client left them out.
            _ => !is_set(meta, field),
        };
        if !restore {
            continue;
        }
        match old.get(field) {
            Some(v) => meta.insert(field.to_string(), v.clone()),
            None => meta.remove(field),
        };
    }
}

/// Replaces everything in `new` but its status (and the resourceVersion the client sent,
/// which the precondition check needs) with `old`'s.
fn keep_only_status(new: &mut Value, old: &Value) {
    let status = new.get("status").cloned();
    let rv = metadata(new)
        .and_then(|m| m.get("resourceVersion"))
        .cloned();
    *new = old.clone();
    if let Some(map) = new.as_object_mut() {
        match status {
            Some(s) => map.insert("status".into(), s),
            None => map.remove("status"),
        };
    }
    if let Some(rv) = rv {
        metadata_mut(new).insert("resourceVersion".into(), rv);
    }
}

fn copy_field(new: &mut Value, old: &Value, field: &str) {
    let Some(map) = new.as_object_mut() else {
        return;
    };
    match old.get(field) {
        Some(v) => map.insert(field.to_string(), v.clone()),
        None => map.remove(field),
    };
}

/// Whether anything but `apiVersion`, `kind`, `metadata` and `status` differs.
pub fn spec_changed(new: &Value, old: &Value) -> bool {
    const IGNORED: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            for k in IGNORED {
                map.remove(k);
            }
        }
        v
    };
    strip(new) != strip(old)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: ResourceInfo = crate::runtime::resource::TEST_INFO;

    #[test]
    fn create_clears_status_and_server_fields() {
        let mut o = json!({"metadata": {"name": "a", "uid": "x", "generation": 7,
            "deletionTimestamp": "2020-01-01T00:00:00Z"}, "spec": {}, "status": {"a": 1}});
        prepare_for_create(&INFO, &mut o);
        assert!(o.get("status").is_none());
        assert_eq!(o["metadata"], json!({"name": "a", "generation": 1}));
    }

    #[test]
    fn main_update_keeps_status_and_bumps_generation_on_spec_change() {
        let old = json!({"metadata": {"name": "a", "uid": "u", "generation": 2}, "spec": {"x": 1}, "status": {"s": 1}});
        let mut new = json!({"metadata": {"name": "a", "uid": "other"}, "spec": {"x": 2}, "status": {"s": 9}});
        prepare_for_update(&INFO, UpdateTarget::Main, &mut new, &old);
        assert_eq!(new["status"], json!({"s": 1}));
        // Left for validation to refuse as immutable, as kube's BeforeUpdate does.
        assert_eq!(new["metadata"]["uid"], "other");
        assert_eq!(new["metadata"]["generation"], 3);
    }

    #[test]
    fn metadata_only_update_keeps_generation() {
        let old = json!({"metadata": {"name": "a", "generation": 2}, "spec": {"x": 1}});
        let mut new = json!({"metadata": {"name": "a", "labels": {"l": "v"}}, "spec": {"x": 1}});
        prepare_for_update(&INFO, UpdateTarget::Main, &mut new, &old);
        assert_eq!(new["metadata"]["generation"], 2);
        assert_eq!(new["metadata"]["labels"]["l"], "v");
    }

    #[test]
    fn status_update_keeps_everything_but_status() {
        let old = json!({"metadata": {"name": "a", "generation": 2, "resourceVersion": "5"}, "spec": {"x": 1}});
        let mut new = json!({"metadata": {"name": "a", "labels": {"l": "v"}, "resourceVersion": "5"},
            "spec": {"x": 2}, "status": {"ok": true}});
        prepare_for_update(&INFO, UpdateTarget::Status, &mut new, &old);
        assert_eq!(new["spec"], json!({"x": 1}));
        assert_eq!(new["status"], json!({"ok": true}));
        assert!(new["metadata"].get("labels").is_none());
        assert_eq!(new["metadata"]["generation"], 2);
    }
}
