//! Paths a group version serves that are no resource's CRUD routes (the metrics APIs'
//! `{resource}/{name}/{metric}`), contributed to the documents with their definitions.

use std::collections::BTreeMap;

use serde_json::Value;

use super::operations::PathItem;

/// The paths of one group version served beside (or instead of) resources.
#[derive(Debug)]
pub(crate) struct ExtraPaths {
    /// The group, e.g. `custom.metrics.k8s.io`.
    pub(crate) group: String,
    /// The version, e.g. `v1beta2`.
    pub(crate) version: String,
    /// Its paths and operations.
    pub(crate) items: Vec<PathItem>,
    /// The definitions they name, by Kubernetes name, in the neutral form (references
    /// `#/$defs/{name}`; see [`neutral_definitions`](super::neutral_definitions) for the
    /// apimachinery types they refer to).
    pub(crate) definitions: BTreeMap<String, Value>,
}
