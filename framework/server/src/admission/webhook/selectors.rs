//! `namespaceSelector` and `objectSelector`, as kube's `predicates/namespace` and
//! `predicates/object`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt as _};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;

use crate::admission::Attributes;
use crate::admission::namespace::{CoreNamespaces, namespace_not_found};
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
        Ok(self
            .get(namespace)
            .await?
            .metadata
            .labels
            .unwrap_or_default())
    }

    /// The namespace `namespace`, from the cache or else from the core API.
    pub(crate) async fn get(&self, namespace: &str) -> Result<Namespace> {
        if let Some(ns) = self.followed.store().get(&ObjectRef::new(namespace)) {
            return Ok(Namespace::clone(&ns));
        }
        // Not followed yet, or not there: kube asks the API, and answers a namespace that
        // does not exist with its 404, as NamespaceLifecycle would.
        match self.api.get_opt(namespace).await {
            Ok(Some(found)) => Ok(found),
            Ok(None) => Err(namespace_not_found(namespace)),
            Err(e) => {
                let why = format!("looking up namespace {namespace:?}: {e}");
                Err(Error::internal(why))
            }
        }
    }
}
