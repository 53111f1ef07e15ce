//! `namespaceSelector` and `objectSelector`, as kube's `predicates/namespace` and
//! `predicates/object`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt as _};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;

use crate::admission::namespace::CoreNamespaces;
use crate::admission::Attributes;
use crate::error::{Error, Result};

/// A selector that selects everything: kube skips the lookups then.
fn selects_all(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|l| l.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

fn parse(selector: &LabelSelector) -> Result<Selector> {
    Selector::try_from(selector.clone())
        .map_err(|e| Error::internal(format!("invalid label selector: {e}")))
}

/// The labels of a JSON object.
fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// kube's object matcher: the selector matches the labels of the object or of the old one.
pub(crate) fn object_matches(selector: &LabelSelector, attributes: &Attributes) -> Result<bool> {
    if selects_all(selector) {
        return Ok(true);
    }
    let selector = parse(selector)?;
    let objects = [&attributes.object, &attributes.old_object];
    Ok(objects
        .into_iter()
        .flatten()
        .any(|o| selector.matches(&labels(o))))
}

impl CoreNamespaces {
    /// kube's namespace matcher: cluster-scoped requests always match; otherwise the labels
    /// of the request's namespace, from the cache or else from the core API (an unknown
    /// namespace is an internal error, as kube's).
    pub(crate) async fn matches(
        &self,
        selector: &LabelSelector,
        attributes: &Attributes,
    ) -> Result<bool> {
        if attributes.namespace.is_empty() || selects_all(selector) {
            return Ok(true);
        }
        let parsed = parse(selector)?;
        Ok(parsed.matches(&self.labels(&attributes.namespace).await?))
    }

    async fn labels(&self, namespace: &str) -> Result<BTreeMap<String, String>> {
        let cached = self.followed.store().get(&ObjectRef::new(namespace));
        let found =
            match cached {
                Some(ns) => Namespace::clone(&ns),
                None => self.api.get(namespace).await.map_err(|e| {
                    Error::internal(format!("looking up namespace {namespace:?}: {e}"))
                })?,
            };
        Ok(found.metadata.labels.unwrap_or_default())
    }
}
