//! A written object's `metadata.managedFields` kept as the JSON the field manager made,
//! beside the typed object decoded from it, so that encoding the typed object (for the
//! checks, and to store it) moves that JSON into place instead of copying every entry out
//! of `T` again. The entries are most of a small object's strings and maps.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use serde_json::{Map, Value};

use crate::error::Result;
use crate::runtime::Resource;
use crate::runtime::object::metadata_mut;

/// The JSON of an object's `managedFields`, taken out of the object once `T` was decoded from
/// it; used only while `T`'s entries are still what it says.
#[derive(Default)]
pub(super) struct ManagedJson(Option<Value>);

impl ManagedJson {
    /// Takes `metadata.managedFields` out of `object`, whose typed decoding holds them.
    pub(super) fn take(object: &mut Value) -> Self {
        let taken = object
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .and_then(|meta| meta.remove("managedFields"));
        Self(taken)
    }

    /// `encode(typed)` with `typed`'s `managedFields`: the kept JSON moved into the
    /// encoding's `metadata` when it is what `typed` holds (nothing changed them since the
    /// decoding), else `typed`'s encoded as they are. `encode` must put `typed`'s metadata
    /// at `metadata`.
    pub(super) fn encode<T: Resource>(
        &mut self,
        typed: &mut T,
        encode: impl FnOnce(&T) -> Result<Value>,
    ) -> Result<Value> {
        let kept = self.0.take();
        let Some(kept) =
            kept.filter(|json| holds(typed.metadata().managed_fields.as_deref(), json))
        else {
            return encode(typed);
        };
        let entries = typed.metadata_mut().managed_fields.take();
        let encoded = encode(typed);
        typed.metadata_mut().managed_fields = entries;
        let mut encoded = encoded?;
        metadata_mut(&mut encoded).insert("managedFields".into(), kept);
        Ok(encoded)
    }
}

/// Whether `json` is what `entries` encode to (the time compared by its encoding; no other
/// copy made).
fn holds(entries: Option<&[ManagedFieldsEntry]>, json: &Value) -> bool {
    let (Some(entries), Some(items)) = (entries, json.as_array()) else {
        return false;
    };
    entries.len() == items.len()
        && entries.iter().zip(items).all(|(entry, item)| {
            item.as_object()
                .is_some_and(|fields| entry_holds(entry, fields))
        })
}

fn entry_holds(entry: &ManagedFieldsEntry, json: &Map<String, Value>) -> bool {
    let strings = [
        ("apiVersion", &entry.api_version),
        ("fieldsType", &entry.fields_type),
        ("manager", &entry.manager),
        ("operation", &entry.operation),
        ("subresource", &entry.subresource),
    ];
    let present = strings.iter().filter(|(_, value)| value.is_some()).count()
        + usize::from(entry.fields_v1.is_some())
        + usize::from(entry.time.is_some());
    // Every member `entry` has is in `json`, and `json` has no other.
    json.len() == present
        && strings.iter().all(|(key, value)| {
            value
                .as_deref()
                .is_none_or(|value| json.get(*key).and_then(Value::as_str) == Some(value))
        })
        && entry
            .fields_v1
            .as_ref()
            .is_none_or(|fields| json.get("fieldsV1") == Some(&fields.0))
        && entry.time.as_ref().is_none_or(|time| {
            serde_json::to_value(time).is_ok_and(|time| json.get("time") == Some(&time))
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1;
    use serde_json::json;

    use super::*;
    use crate::test_kinds::Flunder;

    fn entries(json: &Value) -> Vec<ManagedFieldsEntry> {
        serde_json::from_value(json.clone()).unwrap()
    }

    fn sample() -> Value {
        json!([
            {"apiVersion": "wardle.example.com/v1alpha1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:reference": {}}},
             "manager": "bench", "operation": "Update", "time": "2026-11-28T10:00:00Z"},
            {"apiVersion": "wardle.example.com/v1beta1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {}}, "manager": "kubectl", "operation": "Apply",
             "subresource": "status", "time": "2026-11-28T10:00:01Z"}
        ])
    }

    #[test]
    fn the_json_of_the_decoded_entries_holds_them() {
        let json = sample();
        assert!(holds(Some(&entries(&json)), &json));
    }

    #[test]
    fn entries_changed_since_the_decoding_are_not_held() {
        let json = sample();
        let mut changed = entries(&json);
        changed[1].subresource = None;
        assert!(!holds(Some(&changed), &json));
        let mut changed = entries(&json);
        changed[0].fields_v1 = Some(FieldsV1(json!({"f:spec": {}})));
        assert!(!holds(Some(&changed), &json));
        let mut changed = entries(&json);
        changed[0].time = Some(serde_json::from_value(json!("2026-11-28T10:00:02Z")).unwrap());
        assert!(!holds(Some(&changed), &json));
        let mut changed = entries(&json);
        changed.pop();
        assert!(!holds(Some(&changed), &json));
        assert!(!holds(None, &json));
        // The time as `T` reads it, not as it encodes it: not held.
        let fraction = json!([{"manager": "m", "time": "2026-11-28T10:00:00.5Z"}]);
        assert!(!holds(Some(&entries(&fraction)), &fraction));
    }

    fn encode(typed: &Flunder) -> Result<Value> {
        serde_json::to_value(typed).map_err(crate::error::Error::internal)
    }

    #[test]
    fn the_encoding_is_the_typed_objects_either_way() {
        let mut object = json!({"metadata": {"name": "a", "managedFields": sample()}});
        let mut typed: Flunder = serde_json::from_value(object.clone()).unwrap();
        let expected = encode(&typed).unwrap();
        let mut kept = ManagedJson::take(&mut object);
        assert_eq!(object, json!({"metadata": {"name": "a"}}));
        assert_eq!(kept.encode(&mut typed, encode).unwrap(), expected);
        // The typed object keeps its entries, and the JSON is spent.
        assert_eq!(encode(&typed).unwrap(), expected);
        assert!(kept.0.is_none());

        // Entries changed after the decoding are encoded from `T`.
        let mut object = json!({"metadata": {"name": "a", "managedFields": sample()}});
        let mut typed: Flunder = serde_json::from_value(object.clone()).unwrap();
        let mut kept = ManagedJson::take(&mut object);
        typed.metadata.managed_fields.as_mut().unwrap()[0].manager = Some("other".into());
        let expected = encode(&typed).unwrap();
        assert_eq!(kept.encode(&mut typed, encode).unwrap(), expected);
    }
}
