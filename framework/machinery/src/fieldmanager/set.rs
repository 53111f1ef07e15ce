//! Sets of field paths (structured-merge-diff's `fieldpath.Set`), as a trie, and their
//! `FieldsV1` JSON form (`managedFields[].fieldsV1`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::path::{Path, PathElement};

/// A set of paths. A path is in the set when its last element is a *member* of the node its
/// prefix leads to; a node's children hold the longer paths through it. `FieldsV1` writes a
/// member with children as `".": {}` inside the child's object.
///
/// ```
/// use extension_apiserver_machinery::fieldmanager::FieldSet;
/// let fields = r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:replicas":{}}}"#;
/// let set = FieldSet::from_fields_v1_str(fields).unwrap();
/// assert_eq!(set.to_fields_v1_string(), fields);
/// assert_eq!(set.len(), 3);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no path is in the set.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// How many paths are in the set.
    pub fn len(&self) -> usize {
        self.members.len() + self.children.values().map(FieldSet::len).sum::<usize>()
    }

    /// Adds `path` (a no-op for the empty path).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is in the set.
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether the set holds `path` or any path below it.
    pub fn has_prefix(&self, path: &[PathElement]) -> bool {
        match path {
            [] => !self.is_empty(),
            [first, rest @ ..] => {
                (rest.is_empty() && self.members.contains(first))
                    || self.children.get(first).is_some_and(|c| c.has_prefix(rest))
            }
        }
    }

    /// The paths below `element`, relative to it.
    pub(crate) fn child(&self, element: &PathElement) -> Option<&FieldSet> {
        self.children.get(element)
    }

    /// Whether `element` itself is a member here.
    pub(crate) fn has_member(&self, element: &PathElement) -> bool {
        self.members.contains(element)
    }

    /// Adds `element` as a member, with `below` (the paths through it, relative to it):
    /// how a walk builds a set node by node instead of path by path from the root.
    pub(super) fn insert_member(&mut self, element: PathElement, below: FieldSet) {
        if !below.is_empty() {
            let merged = match self.children.remove(&element) {
                Some(mine) => mine.union(&below),
                None => below,
            };
            self.children.insert(element.clone(), merged);
        }
        self.members.insert(element);
    }

    /// Paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (e, child) in &other.children {
            let merged = match out.children.get(e) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(e.clone(), merged);
        }
        out
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(e, mine)| {
                let both = mine.intersection(other.children.get(e)?);
                (!both.is_empty()).then(|| (e.clone(), both))
            })
            .collect();
        FieldSet { members, children }
    }

    /// Paths in this set and not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        self.without(other, Below::Kept)
    }

    /// Paths in this set that neither are in `other` nor lie below one of its paths (SMD's
    /// `RecursiveDifference`): how fields a strategy resets are kept out of every entry.
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        self.without(other, Below::Removed)
    }

    /// Takes the paths of `other` out of this set, in place ([`difference`](Self::difference)
    /// without a copy).
    pub(super) fn remove_all(&mut self, other: &FieldSet) {
        self.take_out(other, Below::Kept);
    }

    /// Takes the paths in or below those of `other` out of this set, in place
    /// ([`recursive_difference`](Self::recursive_difference) without a copy).
    pub(super) fn remove_recursive(&mut self, other: &FieldSet) {
        self.take_out(other, Below::Removed);
    }

    /// This set without the paths of `other` (and, by `below`, those under them), copying
    /// only what is kept.
    fn without(&self, other: &FieldSet, below: Below) -> FieldSet {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter(|(e, _)| below == Below::Kept || !other.members.contains(e))
            .filter_map(|(e, mine)| {
                let left = match other.children.get(e) {
                    Some(theirs) => mine.without(theirs, below),
                    None => mine.clone(),
                };
                (!left.is_empty()).then(|| (e.clone(), left))
            })
            .collect();
        FieldSet { members, children }
    }

    /// [`without`](Self::without) in place.
    fn take_out(&mut self, other: &FieldSet, below: Below) {
        if other.is_empty() {
            return;
        }
        self.members.retain(|e| !other.members.contains(e));
        self.children.retain(|e, mine| {
            if below == Below::Removed && other.members.contains(e) {
                return false;
            }
            match other.children.get(e) {
                Some(theirs) => {
                    mine.take_out(theirs, below);
                    !mine.is_empty()
                }
                None => true,
            }
        });
    }

    /// Every path, in SMD's order (`Set.Iterate`): a node's members, then the paths
    /// through its children; kube lists conflicts in this order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        for member in &self.members {
            prefix.push(member.clone());
            out.push(Path(prefix.clone()));
            prefix.pop();
        }
        for (element, child) in &self.children {
            prefix.push(element.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON text, byte for byte as kube writes it: `"."` first, then the
    /// elements in SMD's order (fields, keys, values, indexes).
    pub fn to_fields_v1_string(&self) -> String {
        let mut out = String::new();
        self.write_fields_v1(false, &mut out);
        out
    }

    fn write_fields_v1(&self, include_self: bool, out: &mut String) {
        out.push('{');
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push(',');
            }
        };
        if include_self {
            sep(out);
            out.push_str("\".\":{}");
        }
        let mut elements: BTreeSet<&PathElement> = self.members.iter().collect();
        elements.extend(self.children.keys());
        for e in elements {
            sep(out);
            out.push_str(&Value::from(e.to_fields_v1_key()).to_string());
            out.push(':');
            match self.children.get(e) {
                Some(child) => child.write_fields_v1(self.members.contains(e), out),
                None => out.push_str("{}"),
            }
        }
        out.push('}');
    }

    /// The `FieldsV1` object (members in `serde_json`'s key order; use
    /// [`to_fields_v1_string`](Self::to_fields_v1_string) for kube's exact bytes): the
    /// value [`to_fields_v1_string`](Self::to_fields_v1_string)'s text parses to, built
    /// without the text.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_map(false))
    }

    fn fields_v1_map(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        // The map orders its keys itself: children, then the members that are not also
        // children, with no set of both made first.
        for (e, child) in &self.children {
            let inner = child.fields_v1_map(self.members.contains(e));
            out.insert(e.to_fields_v1_key(), Value::Object(inner));
        }
        for e in &self.members {
            if !self.children.contains_key(e) {
                out.insert(e.to_fields_v1_key(), Value::Object(Map::new()));
            }
        }
        out
    }

    /// Reads a `FieldsV1` object; an error names the first key that is not a path element.
    pub fn from_fields_v1(fields: &Value) -> Result<FieldSet, FieldsV1Error> {
        let Value::Object(map) = fields else {
            return Err(FieldsV1Error("FieldsV1 must be an object".into()));
        };
        Self::read_fields_v1(map).map_err(FieldsV1Error)
    }

    /// Reads `FieldsV1` JSON text.
    pub fn from_fields_v1_str(text: &str) -> Result<FieldSet, FieldsV1Error> {
        let value: Value = serde_json::from_str(text).map_err(|e| FieldsV1Error(e.to_string()))?;
        Self::from_fields_v1(&value)
    }

    fn read_fields_v1(map: &Map<String, Value>) -> Result<FieldSet, String> {
        let mut set = FieldSet::new();
        for (key, value) in map {
            if key == "." {
                continue;
            }
            let element = PathElement::from_fields_v1_key(key)
                .ok_or_else(|| format!("invalid path element {key:?}"))?;
            let Value::Object(inner) = value else {
                return Err(format!("the value of {key:?} must be an object"));
            };
            let child = Self::read_fields_v1(inner)?;
            let is_member = inner.is_empty() || inner.contains_key(".");
            if is_member {
                set.members.insert(element.clone());
            }
            if !child.is_empty() {
                set.children.insert(element, child);
            }
        }
        Ok(set)
    }
}

/// Why a `FieldsV1` value is not a set of fields: not an object, or a key that is no path
/// element (kube's `fieldpath` decoding error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FieldsV1Error(String);

/// What a difference does with the paths below a member of the set taken away: kept
/// ([`FieldSet::difference`]) or removed with it ([`FieldSet::recursive_difference`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Below {
    Kept,
    Removed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Deployment's `fieldsV1` as kube-apiserver 1.33 records it for `kubectl apply`
    /// (client-side, manager `kubectl-client-side-apply`).
    const DEPLOYMENT_CSA: &str = r#"{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:ports":{".":{},"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:protocol":{}}},"f:resources":{},"f:terminationMessagePath":{},"f:terminationMessagePolicy":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}}}"#;

    /// The status a kube-controller-manager writes (subresource `status`).
    const DEPLOYMENT_STATUS: &str = r#"{"f:metadata":{"f:annotations":{"f:deployment.kubernetes.io/revision":{}}},"f:status":{"f:availableReplicas":{},"f:conditions":{".":{},"k:{\"type\":\"Available\"}":{".":{},"f:lastTransitionTime":{},"f:lastUpdateTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{},"f:readyReplicas":{},"f:replicas":{},"f:updatedReplicas":{}}}"#;

    /// A Pod's finalizers and ownerReferences (a set and a list map by uid).
    const OWNED: &str = r#"{"f:metadata":{"f:finalizers":{".":{},"v:\"example.com/a\"":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0b6ab3b6-1a44-4d4c-8a46-4c0b5c1a3b9e\"}":{}}}}"#;

    #[test]
    fn round_trips_kube_fields_v1() {
        for text in [DEPLOYMENT_CSA, DEPLOYMENT_STATUS, OWNED, "{}"] {
            let set = FieldSet::from_fields_v1_str(text).unwrap();
            assert_eq!(set.to_fields_v1_string(), text);
            // The object built without the text is the one the text parses to.
            let parsed: Value = serde_json::from_str(text).unwrap();
            assert_eq!(set.to_fields_v1(), parsed);
            assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()).unwrap(), set);
        }
    }

    #[test]
    fn reads_members_and_children() {
        let set = FieldSet::from_fields_v1_str(DEPLOYMENT_CSA).unwrap();
        let f = |n: &str| PathElement::Field(n.into());
        assert!(set.has(&[f("spec"), f("replicas")]));
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(!set.has(&[f("spec")]));
        assert!(set.has_prefix(&[f("spec")]));
        let printed: Vec<String> = set.paths().iter().map(ToString::to_string).collect();
        assert!(printed.contains(&r#".spec.template.spec.containers[name="nginx"].ports[containerPort=80,protocol="TCP"].protocol"#.to_string()));
    }

    #[test]
    fn set_algebra() {
        let a = FieldSet::from_fields_v1_str(r#"{"f:a":{},"f:b":{"f:c":{},"f:d":{}}}"#).unwrap();
        let b = FieldSet::from_fields_v1_str(r#"{"f:b":{".":{},"f:c":{}},"f:e":{}}"#).unwrap();
        assert_eq!(
            a.union(&b).to_fields_v1_string(),
            r#"{"f:a":{},"f:b":{".":{},"f:c":{},"f:d":{}},"f:e":{}}"#
        );
        assert_eq!(
            a.intersection(&b).to_fields_v1_string(),
            r#"{"f:b":{"f:c":{}}}"#
        );
        assert_eq!(
            a.difference(&b).to_fields_v1_string(),
            r#"{"f:a":{},"f:b":{"f:d":{}}}"#
        );
        assert!(a.difference(&a).is_empty());
        let printed: Vec<String> = a
            .union(&b)
            .paths()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(printed, [".a", ".b", ".e", ".b.c", ".b.d"]);
        let b_only = FieldSet::from_fields_v1_str(r#"{"f:b":{}}"#).unwrap();
        assert_eq!(a.difference(&b_only), a);
        assert_eq!(
            a.recursive_difference(&b_only).to_fields_v1_string(),
            r#"{"f:a":{}}"#
        );
        assert_eq!(a.len(), 3);
        // The in-place forms give what the copying ones give.
        let sets = [&a, &b, &b_only, &a.union(&b), &FieldSet::new()];
        for x in sets {
            for y in sets {
                let mut left = x.clone();
                left.remove_all(y);
                assert_eq!(left, x.difference(y));
                let mut left = x.clone();
                left.remove_recursive(y);
                assert_eq!(left, x.recursive_difference(y));
            }
        }
    }

    #[test]
    fn refuses_what_is_not_fields_v1() {
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }
}
