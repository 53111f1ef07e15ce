//! The generic strategy: what create and update do to every object before the type's own
//! [`Strategy`](super::Strategy) runs, as `k8s.io/apiserver`'s `BeforeCreate` /
//! `BeforeUpdate` and the custom-resource strategies.
//!
//! Metadata is handled typed ([`ObjectMeta`]); the status is kept or dropped on the JSON
//! before the object is decoded, so that a part a write ignores cannot fail it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use crate::runtime::ResourceInfo;
use crate::runtime::object::{metadata, metadata_mut};

/// Which path an update came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateTarget {
    /// The main resource: status changes are ignored.
    Main,
    /// The `status` subresource: only status changes are kept.
    Status,
    /// The `scale` subresource: the main resource's rules, and never a create.
    Scale,
}

impl UpdateTarget {
    /// The subresource's name, as a strategy sees it.
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Self::Main => None,
            Self::Status => Some("status"),
            Self::Scale => Some("scale"),
        }
    }
}

/// Drops the status of a new object of a type with a status subresource (kube's custom
/// resources' `PrepareForCreate`), before it is decoded.
pub fn clear_status_on_create(info: &ResourceInfo, object: &mut Value) {
    if info.status {
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }
}

/// Prepares the metadata of a new object: every server-managed field cleared, `generation` 1.
pub fn prepare_meta_for_create(meta: &mut ObjectMeta) {
    meta.uid = None;
    meta.creation_timestamp = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    meta.resource_version = None;
    meta.generation = Some(1);
}

/// kube's `BeforeUpdate`: a client cannot move the generation or creationTimestamp (they are
/// put back silently), nor remove the deletion fields once set; a uid, deletionTimestamp or
/// grace period it changes is left in place for `validate_object_meta_update` to refuse
/// (422 "field is immutable"), so an update aimed at another incarnation of the name fails.
/// The generation is bumped later ([`next_generation`]), once the new object is final.
pub fn prepare_meta_for_update(meta: &mut ObjectMeta, old: &ObjectMeta) {
    meta.generation = old.generation;
    meta.creation_timestamp = old.creation_timestamp.clone();
    if old.deletion_timestamp.is_some() {
        meta.deletion_timestamp = old.deletion_timestamp.clone();
    }
    // Filled in only when the client left them out.
    if meta.uid.is_none() {
        meta.uid = old.uid.clone();
    }
    if meta.deletion_grace_period_seconds.is_none() {
        meta.deletion_grace_period_seconds = old.deletion_grace_period_seconds;
    }
}

/// The generation of `new`, an update of `old`: one more when anything but metadata and
/// status changed.
pub fn next_generation(new: &Value, old: &Value) -> i64 {
    let generation = metadata(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if spec_changed(new, old) {
        generation + 1
    } else {
        generation
    }
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
        UpdateTarget::Main | UpdateTarget::Scale if info.status => copy_field(new, old, "status"),
        UpdateTarget::Main | UpdateTarget::Scale => {}
        UpdateTarget::Status => keep_only_status(new, old),
    }
}

/// Replaces everything in `new` but its status (and the resourceVersion the client sent,
/// which the precondition check needs, and the managedFields the field manager recorded
/// for this write, as kube's `ResetObjectMetaForStatus` keeps them) with `old`'s.
fn keep_only_status(new: &mut Value, old: &Value) {
    let status = new.get("status").cloned();
    let rv = metadata(new)
        .and_then(|m| m.get("resourceVersion"))
        .cloned();
    // What the field manager recorded of this status write (kube keeps it too).
    let managed = metadata(new).and_then(|m| m.get("managedFields")).cloned();
    *new = old.clone();
    if let Some(managed) = managed {
        metadata_mut(new).insert("managedFields".into(), managed);
    }
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
///
/// Compared member by member in place: every update and patch asks, and a copy of both
/// objects without those members would copy their `managedFields` too.
pub fn spec_changed(new: &Value, old: &Value) -> bool {
    const IGNORED: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];
    let (Some(new), Some(old)) = (new.as_object(), old.as_object()) else {
        return new != old;
    };
    let compared = |map: &'_ Map<String, Value>| {
        map.iter()
            .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
            .count()
    };
    compared(new) != compared(old)
        || new
            .iter()
            .filter(|(k, _)| !IGNORED.contains(&k.as_str()))
            .any(|(k, v)| old.get(k) != Some(v))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    const INFO: ResourceInfo = crate::test_kinds::TEST_INFO;

    fn meta(value: Value) -> ObjectMeta {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn create_clears_status_and_server_fields() {
        let mut o = json!({"metadata": {"name": "a"}, "spec": {}, "status": {"a": 1}});
        clear_status_on_create(&INFO, &mut o);
        assert!(o.get("status").is_none());
        let mut m = meta(json!({"name": "a", "uid": "x", "generation": 7,
            "deletionTimestamp": "2020-01-01T00:00:00Z", "resourceVersion": "3"}));
        prepare_meta_for_create(&mut m);
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"name": "a", "generation": 1})
        );
    }

    #[test]
    fn main_update_keeps_status_and_bumps_generation_on_spec_change() {
        let old = json!({"metadata": {"name": "a", "uid": "u", "generation": 2}, "spec": {"x": 1}, "status": {"s": 1}});
        let mut new = json!({"metadata": {"name": "a", "uid": "other"}, "spec": {"x": 2}, "status": {"s": 9}});
        keep_what_target_may_not_change(&INFO, UpdateTarget::Main, &mut new, &old);
        assert_eq!(new["status"], json!({"s": 1}));
        let mut m = meta(new["metadata"].clone());
        prepare_meta_for_update(&mut m, &meta(old["metadata"].clone()));
        // Left for validation to refuse as immutable, as kube's BeforeUpdate does.
        assert_eq!(m.uid.as_deref(), Some("other"));
        assert_eq!(m.generation, Some(2));
        assert_eq!(next_generation(&new, &old), 3);
    }

    #[test]
    fn update_keeps_creation_and_deletion_fields() {
        let when = Time("2020-01-01T00:00:00Z".parse().unwrap());
        let old = ObjectMeta {
            uid: Some("u".into()),
            creation_timestamp: Some(when.clone()),
            deletion_timestamp: Some(when.clone()),
            deletion_grace_period_seconds: Some(0),
            ..ObjectMeta::default()
        };
        let mut new = ObjectMeta::default();
        prepare_meta_for_update(&mut new, &old);
        assert_eq!(new, old);
    }

    #[test]
    fn metadata_only_update_keeps_generation() {
        let old = json!({"metadata": {"name": "a", "generation": 2}, "spec": {"x": 1}});
        let new = json!({"metadata": {"name": "a", "labels": {"l": "v"}}, "spec": {"x": 1}});
        assert_eq!(next_generation(&new, &old), 2);
    }

    #[test]
    fn status_update_keeps_everything_but_status() {
        let old = json!({"metadata": {"name": "a", "generation": 2, "resourceVersion": "5"}, "spec": {"x": 1}});
        let mut new = json!({"metadata": {"name": "a", "labels": {"l": "v"}, "resourceVersion": "5"},
            "spec": {"x": 2}, "status": {"ok": true}});
        keep_what_target_may_not_change(&INFO, UpdateTarget::Status, &mut new, &old);
        assert_eq!(new["spec"], json!({"x": 1}));
        assert_eq!(new["status"], json!({"ok": true}));
        assert!(new["metadata"].get("labels").is_none());
        assert_eq!(next_generation(&new, &old), 2);
    }

    #[test]
    fn spec_changed_looks_past_type_metadata_and_status_only() {
        let old = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"x": 1}, "data": [1]});
        let same = json!({"data": [1], "kind": "K2", "metadata": {"name": "b",
            "managedFields": [{"manager": "m"}]}, "spec": {"x": 1}, "status": {"ok": true}});
        assert!(!spec_changed(&same, &old));
        for changed in [
            json!({"spec": {"x": 1}}),
            json!({"spec": {"x": 1}, "data": [1], "extra": null}),
            json!({"spec": {"x": 2}, "data": [1]}),
            json!({"spec": {"x": 1}, "other": [1]}),
            json!("not an object"),
        ] {
            assert!(spec_changed(&changed, &old), "{changed}");
            assert!(spec_changed(&old, &changed), "{changed}");
        }
        assert!(!spec_changed(&json!(1), &json!(1)));
    }
}
