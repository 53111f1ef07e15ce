//! The params of a binding (`paramKind` of the policy, `paramRef` of the binding), read from
//! the core cluster, as kube's `generic.CollectParams`; errors are configuration errors in
//! kube's words, subject to the policy's `failurePolicy`.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::admissionregistration::v1::{ParamKind, ParamRef};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind, Selector};
use kube::discovery::Scope;
use serde_json::Value;

/// The core cluster's objects of any kind a policy names, their resources discovered once.
pub(crate) struct CoreParams {
    client: kube::Client,
    /// `(apiVersion, kind)` → the resource and whether it is namespaced.
    resources: Mutex<HashMap<(String, String), (ApiResource, bool)>>,
}

/// Go's rendering of a `ParamKind` (`&ParamKind{APIVersion:v1,Kind:ConfigMap,}`), as kube's
/// messages quote it.
fn describe(kind: &ParamKind) -> String {
    format!(
        "&ParamKind{{APIVersion:{},Kind:{},}}",
        kind.api_version.as_deref().unwrap_or_default(),
        kind.kind.as_deref().unwrap_or_default()
    )
}

impl CoreParams {
    pub(crate) fn new(client: kube::Client) -> Self {
        Self {
            client,
            resources: Mutex::default(),
        }
    }

    async fn resource(&self, kind: &ParamKind) -> Result<(ApiResource, bool), String> {
        let api_version = kind.api_version.clone().unwrap_or_default();
        let kind_name = kind.kind.clone().unwrap_or_default();
        let key = (api_version.clone(), kind_name.clone());
        if let Some(found) = self.lock().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let gvk = GroupVersionKind::gvk(group, version, &kind_name);
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|_| format!("paramKind kind `{}` not known", describe(kind)))?;
        let found = (resource, capabilities.scope == Scope::Namespaced);
        self.lock().insert(key, found.clone());
        Ok(found)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (ApiResource, bool)>> {
        self.resources.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The params to evaluate with: `[null]` without `paramKind` or `paramRef`; otherwise the
    /// objects the reference names or selects (none found: no evaluation, or with
    /// `parameterNotFoundAction: Deny` an error).
    pub(crate) async fn collect(
        &self,
        kind: Option<&ParamKind>,
        reference: Option<&ParamRef>,
        namespace: &str,
    ) -> Result<Vec<Value>, String> {
        let (Some(kind), Some(reference)) = (kind, reference) else {
            return Ok(vec![Value::Null]);
        };
        let (resource, namespaced) = self.resource(kind).await?;
        let api: Api<DynamicObject> = if namespaced {
            let namespace = match reference.namespace.as_deref() {
                Some(n) if !n.is_empty() => n,
                _ if !namespace.is_empty() => namespace,
                _ => {
                    return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
                }
            };
            Api::namespaced_with(self.client.clone(), namespace, &resource)
        } else {
            if reference
                .namespace
                .as_deref()
                .is_some_and(|n| !n.is_empty())
            {
                return Err(
                    "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
                        .into(),
                );
            }
            Api::all_with(self.client.clone(), &resource)
        };
        let name = reference.name.as_deref().filter(|n| !n.is_empty());
        let found: Vec<DynamicObject> = match (name, &reference.selector) {
            (Some(_), Some(_)) => {
                return Err("paramRef.name and paramRef.selector are mutually exclusive".into());
            }
            (Some(name), None) => api
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .collect(),
            (None, Some(selector)) => {
                let selector = Selector::try_from(selector.clone()).map_err(|e| e.to_string())?;
                let params = ListParams::default().labels_from(&selector);
                api.list(&params).await.map_err(|e| e.to_string())?.items
            }
            (None, None) => return Err("one of name or selector must be provided".into()),
        };
        if found.is_empty() && reference.parameter_not_found_action.as_deref() == Some("Deny") {
            return Err(
                "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
            );
        }
        let typed = |object: DynamicObject| {
            let mut value = serde_json::to_value(object).unwrap_or_default();
            value["apiVersion"] = Value::from(kind.api_version.clone().unwrap_or_default());
            value["kind"] = Value::from(kind.kind.clone().unwrap_or_default());
            value
        };
        Ok(found.into_iter().map(typed).collect())
    }
}
