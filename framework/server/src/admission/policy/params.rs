//! The params of a binding (`paramKind` of the policy, `paramRef` of the binding), as kube's
//! `generic.CollectParams`: of a kind this server serves, read in process
//! ([`OwnObjects`]); of a core kind, from an informer of that kind in the core cluster,
//! started the first time a policy needs it (kube's param informers). Errors are
//! configuration errors in kube's words, subject to the policy's `failurePolicy`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use extension_apiserver_machinery::selector::LabelSelector;
use k8s_openapi::api::admissionregistration::v1::{ParamKind, ParamRef};
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::watcher;
use serde_json::Value;

use crate::admission::objects::{ObjectReader, OwnObjects};
use crate::core_api::{self, Followed};
use crate::lifecycle::ShutdownSignal;

/// kube's wait for a param informer's first list before it answers "not yet synced".
const SYNC_WAIT: Duration = Duration::from_secs(1);

/// Where the params of one kind come from.
#[derive(Clone)]
enum Source {
    Own(Arc<dyn ObjectReader>),
    Core {
        followed: Followed<DynamicObject>,
        namespaced: bool,
    },
}

impl Source {
    fn namespaced(&self) -> bool {
        match self {
            Self::Own(reader) => reader.namespaced(),
            Self::Core { namespaced, .. } => *namespaced,
        }
    }

    async fn synced(&self) -> bool {
        let Self::Core { followed, .. } = self else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + SYNC_WAIT;
        while !followed.synced() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<Value>, String> {
        match self {
            Self::Own(reader) => reader.get(namespace, name).await.map_err(|e| e.to_string()),
            Self::Core { followed, .. } => Ok(core_objects(followed, namespace)
                .find(|o| o.metadata.name.as_deref() == Some(name))
                .map(|o| serde_json::to_value(o).unwrap_or_default())),
        }
    }

    async fn list(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Result<Vec<Value>, String> {
        match self {
            Self::Own(reader) => reader
                .list(namespace, selector)
                .await
                .map_err(|e| e.to_string()),
            Self::Core { followed, .. } => Ok(core_objects(followed, namespace)
                .map(|o| serde_json::to_value(o).unwrap_or_default())
                .filter(|o| selector.matches_object(o))
                .collect()),
        }
    }
}

/// The followed core objects of `namespace` (or all), in name order as a lister gives them.
fn core_objects(
    followed: &Followed<DynamicObject>,
    namespace: Option<&str>,
) -> impl Iterator<Item = DynamicObject> {
    let mut objects: Vec<DynamicObject> = followed
        .store()
        .state()
        .iter()
        .filter(|o| namespace.is_none() || o.metadata.namespace.as_deref() == namespace)
        .map(|o| (**o).clone())
        .collect();
    objects.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    objects.into_iter()
}

/// The params of every kind a policy names, the sources found once per kind.
pub(crate) struct Params {
    client: kube::Client,
    own: OwnObjects,
    shutdown: ShutdownSignal,
    /// `(apiVersion, kind)` → where its objects come from.
    sources: Mutex<HashMap<(String, String), Source>>,
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

impl Params {
    pub(crate) fn new(client: kube::Client, own: OwnObjects, shutdown: ShutdownSignal) -> Self {
        Self {
            client,
            own,
            shutdown,
            sources: Mutex::default(),
        }
    }

    /// The source of `kind`: the server's own kind, or a core kind, followed from now on.
    async fn source(&self, kind: &ParamKind) -> Result<Source, String> {
        let api_version = kind.api_version.clone().unwrap_or_default();
        let kind_name = kind.kind.clone().unwrap_or_default();
        let key = (api_version.clone(), kind_name.clone());
        if let Some(found) = self.lock().get(&key) {
            return Ok(found.clone());
        }
        let source = match self.own.reader(&api_version, &kind_name) {
            Some(reader) => Source::Own(reader),
            None => {
                let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
                let gvk = GroupVersionKind::gvk(group, version, &kind_name);
                let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
                    .await
                    .map_err(|_| format!("paramKind kind `{}` not known", describe(kind)))?;
                // Another request may have started following it meanwhile.
                if let Some(found) = self.lock().get(&key) {
                    return Ok(found.clone());
                }
                let api = Api::<DynamicObject>::all_with(self.client.clone(), &resource);
                let what = format!("params {}", resource.plural);
                let followed = core_api::follow_dynamic(
                    api,
                    resource,
                    watcher::Config::default(),
                    what,
                    self.shutdown.clone(),
                    |_| {},
                );
                Source::Core {
                    followed,
                    namespaced: capabilities.scope == Scope::Namespaced,
                }
            }
        };
        self.lock().insert(key, source.clone());
        Ok(source)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Source>> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
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
        let source = self.source(kind).await?;
        let namespaced = source.namespaced();
        let reference_namespace = reference.namespace.as_deref().filter(|n| !n.is_empty());
        let scope = if namespaced {
            match reference_namespace {
                Some(n) => Some(n),
                None if !namespace.is_empty() => Some(namespace),
                None => {
                    return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".into());
                }
            }
        } else {
            None
        };
        if !source.synced().await {
            return Err(format!(
                "paramKind kind `{}` not yet synced to use for admission",
                describe(kind)
            ));
        }
        if !namespaced && reference_namespace.is_some() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        let name = reference.name.as_deref().filter(|n| !n.is_empty());
        let found: Vec<Value> = match (name, &reference.selector) {
            (Some(_), Some(_)) => {
                return Err("paramRef.name and paramRef.selector are mutually exclusive".into());
            }
            (Some(name), None) => source.get(scope, name).await?.into_iter().collect(),
            (None, Some(selector)) => {
                let selector =
                    LabelSelector::from_label_selector(selector).map_err(|e| e.to_string())?;
                source.list(scope, &selector).await?
            }
            (None, None) => return Err("one of name or selector must be provided".into()),
        };
        if found.is_empty() && reference.parameter_not_found_action.as_deref() == Some("Deny") {
            return Err(
                "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
            );
        }
        let typed = |mut value: Value| {
            value["apiVersion"] = Value::from(kind.api_version.clone().unwrap_or_default());
            value["kind"] = Value::from(kind.kind.clone().unwrap_or_default());
            value
        };
        Ok(found.into_iter().map(typed).collect())
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ApiResource;

    use super::*;

    /// A core that never answers: nothing listens on the port.
    fn unreachable_core() -> kube::Client {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let uri = format!("http://127.0.0.1:{port}").parse().unwrap();
        kube::Client::try_from(kube::Config::new(uri)).unwrap()
    }

    #[tokio::test]
    async fn a_core_kind_not_listed_yet_is_kubes_not_yet_synced() {
        let shutdown = ShutdownSignal::new();
        let client = unreachable_core();
        let params = Params::new(client.clone(), OwnObjects::default(), shutdown.clone());
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let followed = core_api::follow_dynamic(
            Api::<DynamicObject>::all_with(client, &resource),
            resource,
            watcher::Config::default(),
            "configmaps".into(),
            shutdown.clone(),
            |_| {},
        );
        let key = ("v1".to_string(), "ConfigMap".to_string());
        params.lock().insert(
            key,
            Source::Core {
                followed,
                namespaced: true,
            },
        );
        let kind = ParamKind {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
        };
        let reference = ParamRef {
            name: Some("limits".into()),
            ..ParamRef::default()
        };
        let started = std::time::Instant::now();
        let answer = params
            .collect(Some(&kind), Some(&reference), "default")
            .await;
        assert_eq!(
            answer,
            Err(
                "paramKind kind `&ParamKind{APIVersion:v1,Kind:ConfigMap,}` not yet synced to use for admission"
                    .to_string()
            )
        );
        assert!(started.elapsed() >= SYNC_WAIT, "waited for the first list");
        // Without a paramRef, no params are needed: evaluated once with null.
        let none = params.collect(Some(&kind), None, "default").await;
        assert_eq!(none, Ok(vec![Value::Null]));
        shutdown.trigger();
    }
}
