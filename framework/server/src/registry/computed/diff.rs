//! The diff of the provider's answer against the mirror: which writes make the mirror equal
//! to what the provider says, and none when nothing changed (so a resourceVersion moves only
//! when an object does).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::runtime::object::{meta_str, metadata_mut};
use crate::storage::Revision;

/// Metadata the server sets when the provider leaves it out, kept from one answer to the
/// next: what a stored object gets on create.
const SERVER_SET: [&str; 2] = ["uid", "creationTimestamp"];

/// One object as the mirror holds it: its JSON (without `resourceVersion`) and the revision
/// that last wrote it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Mirrored {
    pub(crate) value: Value,
    pub(crate) revision: Revision,
}

/// A write to the mirror, by key.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum MirrorWrite {
    /// A new object.
    Create(String, Value),
    /// A changed object, last written at the revision given.
    Update(String, Value, Revision),
    /// An object gone, last written at the revision given.
    Delete(String, Revision),
}

/// The writes that turn `current` (every mirrored object under a prefix) into `desired`
/// (every object the provider answered for that prefix), in key order. `now` is the
/// creationTimestamp of objects seen for the first time.
pub(crate) fn diff(
    current: &BTreeMap<String, Mirrored>,
    desired: BTreeMap<String, Value>,
    now: &str,
) -> Vec<MirrorWrite> {
    let gone = current
        .iter()
        .filter(|(key, _)| !desired.contains_key(*key))
        .map(|(key, old)| MirrorWrite::Delete(key.clone(), old.revision));
    let mut writes: Vec<MirrorWrite> = gone.collect();
    for (key, object) in desired {
        let old = current.get(&key);
        writes.extend(reconcile(key, Some(object), old, now));
    }
    writes.sort_by(|a, b| key_of(a).cmp(key_of(b)));
    writes
}

/// The write that turns `current` into `desired` at `key` (`None`: the object is gone), if
/// any.
pub(crate) fn reconcile(
    key: String,
    desired: Option<Value>,
    current: Option<&Mirrored>,
    now: &str,
) -> Option<MirrorWrite> {
    let Some(mut object) = desired else {
        return current.map(|old| MirrorWrite::Delete(key, old.revision));
    };
    carry_server_set(&mut object, current.map(|old| &old.value), now);
    match current {
        None => Some(MirrorWrite::Create(key, object)),
        // Compared as JSON values, not bytes: a map serialized in another order is no change.
        Some(old) if old.value == object => None,
        Some(old) => Some(MirrorWrite::Update(key, object, old.revision)),
    }
}

/// Fills what the server sets (uid, creationTimestamp) when the provider does not: from the
/// mirrored object, or new. The provider's `resourceVersion`, if any, is dropped: the
/// mirror's revision is the version.
fn carry_server_set(object: &mut Value, old: Option<&Value>, now: &str) {
    let carried: Vec<(&str, Value)> = SERVER_SET
        .iter()
        .filter(|field| meta_str(object, field).is_none())
        .map(|field| {
            let value = match old.and_then(|old| meta_str(old, field)) {
                Some(kept) => json!(kept),
                None if *field == "uid" => json!(uuid::Uuid::new_v4().to_string()),
                None => json!(now),
            };
            (*field, value)
        })
        .collect();
    let meta = metadata_mut(object);
    meta.remove("resourceVersion");
    for (field, value) in carried {
        meta.insert(field.to_string(), value);
    }
}

fn key_of(write: &MirrorWrite) -> &str {
    match write {
        MirrorWrite::Create(key, _)
        | MirrorWrite::Update(key, _, _)
        | MirrorWrite::Delete(key, _) => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn stored(name: &str, spec: i64, revision: Revision) -> (String, Mirrored) {
        let value = json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": spec,
        });
        (format!("/{name}"), Mirrored { value, revision })
    }

    fn wanted(name: &str, spec: i64) -> (String, Value) {
        (
            format!("/{name}"),
            json!({"metadata": {"name": name}, "spec": spec}),
        )
    }

    #[test]
    fn the_same_answer_writes_nothing() {
        let current = BTreeMap::from([stored("a", 1, 5), stored("b", 2, 6)]);
        let desired = BTreeMap::from([wanted("a", 1), wanted("b", 2)]);
        assert_eq!(diff(&current, desired, NOW), vec![]);
    }

    #[test]
    fn new_changed_and_gone_objects_are_written_in_key_order() {
        let current = BTreeMap::from([stored("a", 1, 5), stored("b", 2, 6)]);
        let desired = BTreeMap::from([wanted("b", 3), wanted("c", 4)]);
        let writes = diff(&current, desired, NOW);
        assert_eq!(writes.len(), 3, "{writes:?}");
        assert_eq!(writes[0], MirrorWrite::Delete("/a".into(), 5));
        let MirrorWrite::Update(key, b, 6) = &writes[1] else {
            panic!("{writes:?}")
        };
        assert_eq!(key, "/b");
        assert_eq!(b["spec"], 3);
        // What the server set when b was first seen stays.
        assert_eq!(b["metadata"]["uid"], "uid-b");
        assert_eq!(b["metadata"]["creationTimestamp"], "2025-01-01T00:00:00Z");
        let MirrorWrite::Create(key, c) = &writes[2] else {
            panic!("{writes:?}")
        };
        assert_eq!(key, "/c");
        assert_eq!(c["metadata"]["creationTimestamp"], NOW);
        assert!(c["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    }

    #[test]
    fn what_the_provider_sets_wins_and_its_resource_version_is_dropped() {
        let current = BTreeMap::from([stored("a", 1, 5)]);
        let mut object =
            json!({"metadata": {"name": "a", "uid": "mine", "resourceVersion": "9"}, "spec": 1});
        let write = reconcile("/a".into(), Some(object.clone()), current.get("/a"), NOW);
        let Some(MirrorWrite::Update(_, written, 5)) = write else {
            panic!("{write:?}")
        };
        assert_eq!(written["metadata"]["uid"], "mine");
        assert!(written["metadata"].get("resourceVersion").is_none());
        // A resourceVersion alone is no change.
        object["metadata"]["uid"] = json!("uid-a");
        assert_eq!(
            reconcile("/a".into(), Some(object), current.get("/a"), NOW),
            None
        );
    }

    #[test]
    fn member_order_is_no_change() {
        let (key, mut old) = stored("a", 1, 5);
        old.value["spec"] = json!({"x": 1, "y": 2});
        let desired: Value =
            serde_json::from_str(r#"{"spec": {"y": 2, "x": 1}, "metadata": {"name": "a"}}"#)
                .unwrap();
        assert_eq!(reconcile(key, Some(desired), Some(&old), NOW), None);
    }

    #[test]
    fn an_object_gone_is_deleted_once() {
        let (key, old) = stored("a", 1, 5);
        assert_eq!(
            reconcile(key.clone(), None, Some(&old), NOW),
            Some(MirrorWrite::Delete(key.clone(), 5))
        );
        assert_eq!(reconcile(key, None, None, NOW), None);
    }
}
