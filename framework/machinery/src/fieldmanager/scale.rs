//! `managedFields` of the `scale` subresource, which kube derives from the parent's and
//! folds back into them (k8s.io/apiserver `fieldmanager/scalehandler.go`): an entry that
//! owns the parent's replicas owns `spec.replicas` of the Scale, and a Scale write moves
//! the ownership of the parent's replicas.

use serde_json::Value;

use super::managed::{self, Entry, Managed};
use super::path::PathElement;
use super::set::FieldSet;

/// The version of `Scale` kube serves (`autoscaling/v1`).
const SCALE_API_VERSION: &str = "autoscaling/v1";

/// Translates `managedFields` between a resource and its `scale` subresource.
///
/// ```
/// use extension_apiserver_machinery::fieldmanager::ScaleHandler;
/// use serde_json::json;
/// let parent = json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "example.com/v1",
///     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}, "f:image": {}}}}]);
/// let handler = ScaleHandler::new(&["spec", "replicas"], "example.com/v1");
/// let scale = handler.to_subresource(Some(&parent)).unwrap();
/// assert_eq!(scale[0]["apiVersion"], "autoscaling/v1");
/// assert_eq!(scale[0]["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
/// ```
#[derive(Clone, Debug)]
pub struct ScaleHandler {
    replicas: Vec<PathElement>,
    api_version: String,
}

impl ScaleHandler {
    /// For a resource whose replicas are at `replicas_path` (the same in every version),
    /// written through `api_version`.
    pub fn new(replicas_path: &[&str], api_version: &str) -> Self {
        let replicas = replicas_path
            .iter()
            .map(|f| PathElement::Field((*f).to_owned()))
            .collect();
        Self {
            replicas,
            api_version: api_version.to_owned(),
        }
    }

    /// `spec.replicas` of a Scale.
    fn scale_replicas_path() -> [PathElement; 2] {
        [
            PathElement::Field("spec".into()),
            PathElement::Field("replicas".into()),
        ]
    }

    fn scale_replicas() -> FieldSet {
        let mut set = FieldSet::new();
        set.insert(&Self::scale_replicas_path());
        set
    }

    fn parent_replicas(&self) -> FieldSet {
        let mut set = FieldSet::new();
        set.insert(&self.replicas);
        set
    }

    /// The Scale's `managedFields`: every parent entry that owns the replicas, owning the
    /// Scale's `spec.replicas` in `autoscaling/v1` (kube's `ToSubresource`). `None` when
    /// there are none (or the parent's cannot be read).
    pub fn to_subresource(&self, parent: Option<&Value>) -> Option<Value> {
        let parent = managed::decode(parent).ok()?;
        let scale: Managed = parent
            .into_iter()
            .filter(|(_, e)| e.set.has(&self.replicas))
            .map(|(id, e)| {
                let entry =
                    Entry::new(Self::scale_replicas(), SCALE_API_VERSION.to_owned(), e.time);
                (id, entry)
            })
            .collect();
        managed::encode(scale)
    }

    /// The parent's `managedFields` after a Scale write that left `scale` (kube's
    /// `ToParent`): a manager the Scale no longer lists loses the replicas, one it lists
    /// keeps its entry, and one new to the parent gets an entry for the replicas in the
    /// parent's version. `None` when no entry is left.
    pub fn to_parent(&self, parent: Option<&Value>, scale: Option<&Value>) -> Option<Value> {
        let parent = managed::decode(parent).unwrap_or_default();
        let mut scale = managed::decode(scale).unwrap_or_default();
        let replicas = self.parent_replicas();
        let mut out = Managed::new();
        for (id, entry) in parent {
            if !entry.set.has(&self.replicas) || scale.remove(&id).is_some() {
                out.insert(id, entry);
                continue;
            }
            let left = entry.set.difference(&replicas);
            if !left.is_empty() {
                out.insert(id, Entry::new(left, entry.api_version, entry.time));
            }
        }
        for (id, entry) in scale {
            if entry.set.has(&Self::scale_replicas_path()) {
                let moved = Entry::new(replicas.clone(), self.api_version.clone(), entry.time);
                out.insert(id, moved);
            }
        }
        managed::encode(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, op: &str, version: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": op, "apiVersion": version,
               "fieldsType": "FieldsV1", "fieldsV1": fields, "time": "2024-05-01T10:00:00Z"})
    }

    #[test]
    fn scale_entries_come_from_the_owners_of_replicas() {
        let parent = json!([
            entry(
                "kubectl",
                "Apply",
                "example.com/v1",
                json!({"f:spec": {"f:replicas": {}, "f:image": {}}})
            ),
            entry(
                "other",
                "Update",
                "example.com/v1",
                json!({"f:spec": {"f:image": {}}})
            )
        ]);
        let handler = ScaleHandler::new(&["spec", "replicas"], "example.com/v1");
        let scale = handler.to_subresource(Some(&parent)).unwrap();
        assert_eq!(scale.as_array().unwrap().len(), 1);
        assert_eq!(scale[0]["manager"], "kubectl");
        assert_eq!(scale[0]["operation"], "Apply");
        assert_eq!(handler.to_subresource(None), None);
    }

    #[test]
    fn a_scale_write_moves_the_replicas() {
        let parent = json!([
            entry(
                "kubectl",
                "Apply",
                "example.com/v1",
                json!({"f:spec": {"f:replicas": {}, "f:image": {}}})
            ),
            entry(
                "hpa",
                "Update",
                "example.com/v1",
                json!({"f:spec": {"f:replicas": {}}})
            )
        ]);
        // The HPA wrote the scale: it alone owns the Scale's replicas now.
        let scale = json!([entry(
            "hpa",
            "Update",
            "autoscaling/v1",
            json!({"f:spec": {"f:replicas": {}}})
        )]);
        let handler = ScaleHandler::new(&["spec", "replicas"], "example.com/v1");
        let back = handler.to_parent(Some(&parent), Some(&scale)).unwrap();
        let fields: Vec<(String, Value)> = back
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap().to_owned(),
                    e["fieldsV1"].clone(),
                )
            })
            .collect();
        assert_eq!(
            fields,
            [
                ("kubectl".to_owned(), json!({"f:spec": {"f:image": {}}})),
                ("hpa".to_owned(), json!({"f:spec": {"f:replicas": {}}}))
            ]
        );
        // A manager new to the parent gets the replicas in the parent's version.
        let scale = json!([entry(
            "new",
            "Update",
            "autoscaling/v1",
            json!({"f:spec": {"f:replicas": {}}})
        )]);
        let back = handler.to_parent(Some(&json!([])), Some(&scale)).unwrap();
        assert_eq!(back[0]["apiVersion"], "example.com/v1");
        assert_eq!(back[0]["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    }
}
