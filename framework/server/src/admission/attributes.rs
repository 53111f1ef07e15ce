//! What an admission plugin sees of a request: kube's `admission.Attributes`.

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Admission;
use crate::audit::AuditAnnotations;
use crate::codec::VersionConvertor;
use crate::codec::{encode_typed, from_object};
use crate::error::{Error, Result};
use crate::runtime::{Resource, ResourceInfo};
use crate::user::UserInfo;
use extension_apiserver_machinery::patch::PatchSchema;
use extension_apiserver_machinery::warning::WarningRecorder;

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A create (POST, or a PUT that creates).
    Create,
    /// An update, a patch, or a write of a subresource.
    Update,
    /// A delete, or one object of a deletecollection.
    Delete,
    /// A connect (proxy, exec); the framework serves none yet.
    Connect,
}

impl Operation {
    /// The name kube uses: `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
        }
    }
}

/// Kinds and resources in kube-core's vocabulary (`ResourceInfo::gvk` and `gvr` make them of a
/// resource's static information).
pub use kube_core::{GroupVersionKind, GroupVersionResource};

/// The resource under admission as one served version shows it (kube's equivalent
/// resources): what a webhook whose rules match this version rather than the request's sees.
#[derive(Clone)]
pub struct EquivalentResource {
    /// The resource in this version.
    pub resource: GroupVersionResource,
    /// The kind of its objects in this version (`autoscaling/v1` `Scale` for `scale`).
    pub kind: GroupVersionKind,
    /// Objects to and from the storage version; `None` when they are the same.
    pub convertor: Option<Arc<dyn VersionConvertor>>,
}

impl std::fmt::Debug for EquivalentResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EquivalentResource")
            .field("resource", &self.resource)
            .field("kind", &self.kind)
            .field("converted", &self.convertor.is_some())
            .finish()
    }
}

/// What the endpoint knows of a request that the chain needs, carried to storage in the
/// registry's `RequestContext`: the chain itself, the resource as the client named it, and the
/// operation's options.
#[derive(Clone, Debug)]
pub struct AdmissionContext {
    /// The server's chain.
    pub chain: Admission,
    /// The kind the client sent or asked for (kube's `requestKind`): of another version
    /// than the stored one when the version is served converted.
    pub request_kind: GroupVersionKind,
    /// The resource as the URL names it (kube's `requestResource`).
    pub request_resource: GroupVersionResource,
    /// The subresource (`status`, `scale`), empty for the main resource.
    pub subresource: String,
    /// The operation's options, as JSON (`CreateOptions`, `UpdateOptions`, `PatchOptions`
    /// or `DeleteOptions` of `meta.k8s.io/v1`).
    pub options: Value,
    /// The audit annotations of the request.
    pub audit: AuditAnnotations,
    /// The resource in every version the server serves it in over the same storage, the
    /// request's included, in the group's priority order.
    pub equivalents: Arc<[EquivalentResource]>,
    /// The list and map semantics of the request's type (what a MutatingAdmissionPolicy's
    /// apply configuration merges by); `None` when unknown.
    pub patch_schema: Option<Arc<PatchSchema>>,
}

/// What a plugin sees of a request (kube's `admission.Attributes`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Attributes {
    /// The operation.
    pub operation: Operation,
    /// The kind of [`object`](Self::object): the storage version's (`autoscaling/v1`
    /// `Scale` for the scale subresource).
    pub kind: GroupVersionKind,
    /// The resource, in the storage version.
    pub resource: GroupVersionResource,
    /// The kind in the version the client used (kube's `requestKind`).
    pub request_kind: GroupVersionKind,
    /// The resource in the version the client used (kube's `requestResource`).
    pub request_resource: GroupVersionResource,
    /// The subresource, empty for the main resource.
    pub subresource: String,
    /// The namespace; empty for cluster-scoped resources.
    pub namespace: String,
    /// The object's name; empty for a create with `generateName` before the name is made,
    /// and for the mutating step of a deletecollection.
    pub name: String,
    /// Who asked.
    pub user: UserInfo,
    /// Whether the request is a dry run: a plugin must then have no side effects.
    pub dry_run: bool,
    /// The operation's options (`CreateOptions`, `UpdateOptions`, `PatchOptions`,
    /// `DeleteOptions`), as JSON.
    pub options: Value,
    /// The new object (create and update), with `apiVersion` and `kind`.
    pub object: Option<Value>,
    /// The stored object (update and delete), with `apiVersion` and `kind`.
    pub old_object: Option<Value>,
    audit: AuditAnnotations,
    equivalents: Arc<[EquivalentResource]>,
    patch_schema: Option<Arc<PatchSchema>>,
    warnings: Arc<WarningRecorder>,
}

/// Who asked, and where: what the chain needs of the request besides its
/// [`AdmissionContext`] (the registry hands it over from its request context).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Requester<'a> {
    /// The namespace of the URL; `None` for cluster-scoped requests.
    pub(crate) namespace: Option<&'a str>,
    /// Who made the request; `None` when it did not go through authentication.
    pub(crate) user: Option<&'a UserInfo>,
    /// Where the plugins' warnings go.
    pub(crate) warnings: &'a Arc<WarningRecorder>,
}

impl Attributes {
    /// The attributes of a write of `info`'s objects by `requester`, `None` when the request
    /// carries no admission chain or no plugin handles `operation` (in the mutating step,
    /// when `mutating`: no plugin that mutates).
    pub(crate) fn of(
        (admission, requester): (Option<&AdmissionContext>, Requester<'_>),
        (resource, kind): (&ResourceInfo, &ResourceInfo),
        (operation, mutating): (Operation, bool),
        name: &str,
    ) -> Option<(Admission, Self)> {
        let admission = admission?;
        let chain = &admission.chain;
        let handled = if mutating {
            chain.mutates(operation)
        } else {
            chain.handles(operation)
        };
        if !handled {
            return None;
        }
        let attributes = Self {
            operation,
            kind: kind.gvk(),
            resource: resource.gvr(),
            request_kind: admission.request_kind.clone(),
            request_resource: admission.request_resource.clone(),
            subresource: admission.subresource.clone(),
            namespace: requester.namespace.unwrap_or_default().to_string(),
            name: name.to_string(),
            user: requester.user.cloned().unwrap_or_default(),
            dry_run: options_dry_run(&admission.options),
            options: admission.options.clone(),
            object: None,
            old_object: None,
            audit: admission.audit.clone(),
            equivalents: admission.equivalents.clone(),
            patch_schema: admission.patch_schema.clone(),
            warnings: requester.warnings.clone(),
        };
        Some((admission.chain.clone(), attributes))
    }

    /// Attributes made by hand, for a plugin's unit tests: a request by nobody, no options,
    /// no objects.
    pub fn new(operation: Operation, info: &ResourceInfo, namespace: &str, name: &str) -> Self {
        Self {
            operation,
            kind: info.gvk(),
            resource: info.gvr(),
            request_kind: info.gvk(),
            request_resource: info.gvr(),
            subresource: String::new(),
            namespace: namespace.into(),
            name: name.into(),
            user: UserInfo::default(),
            dry_run: false,
            options: Value::Null,
            object: None,
            old_object: None,
            audit: AuditAnnotations::default(),
            equivalents: Arc::from(Vec::new()),
            patch_schema: None,
            warnings: Arc::default(),
        }
    }

    /// Whether the object is a `T`: its group, kind and version are `T`'s (a plugin of one
    /// resource skips the others with it).
    pub fn is<T: Resource>(&self) -> bool {
        let kind = &self.kind;
        kind.group == T::INFO.group && kind.kind == T::INFO.kind && kind.version == T::INFO.version
    }

    /// [`object`](Self::object) as `T`: `Ok(None)` when the request has no object (a
    /// delete, the mutating step of a deletecollection), an error when it does not decode
    /// as `T` (check [`is`](Self::is) first: a plugin sees every resource's writes).
    ///
    /// ```
    /// # use extension_apiserver::prelude::*;
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Widget", namespaced)]
    /// # pub struct Widget { #[serde(default)] pub metadata: ObjectMeta }
    /// /// A mutating plugin's step: labels every new widget.
    /// fn label(attributes: &mut Attributes) -> extension_apiserver::Result<()> {
    ///     if !attributes.is::<Widget>() {
    ///         return Ok(());
    ///     }
    ///     let Some(mut widget) = attributes.object_as::<Widget>()? else {
    ///         return Ok(()); // no object: a delete
    ///     };
    ///     let labels = widget.metadata.labels.get_or_insert_with(Default::default);
    ///     labels.insert("example.com/admitted".into(), "true".into());
    ///     attributes.set_object(&widget)
    /// }
    ///
    /// let mut attributes = Attributes::new(Operation::Create, &Widget::INFO, "default", "w");
    /// label(&mut attributes).unwrap(); // no object yet: nothing to do
    /// attributes.set_object(&Widget::default()).unwrap();
    /// label(&mut attributes).unwrap();
    /// let widget = attributes.object_as::<Widget>().unwrap().unwrap();
    /// assert_eq!(widget.metadata.labels.unwrap()["example.com/admitted"], "true");
    /// ```
    pub fn object_as<T: Resource + DeserializeOwned>(&self) -> Result<Option<T>> {
        self.object.as_ref().map(decode::<T>).transpose()
    }

    /// [`old_object`](Self::old_object) as `T`; `None` when there is none.
    pub fn old_object_as<T: Resource + DeserializeOwned>(&self) -> Result<Option<T>> {
        self.old_object.as_ref().map(decode::<T>).transpose()
    }

    /// Replaces the object with `object` (for a mutating plugin).
    pub fn set_object<T: Resource + Serialize>(&mut self, object: &T) -> Result<()> {
        self.object = Some(encode_typed(object)?);
        Ok(())
    }

    /// Adds `key: value` to the request's audit events (kube's `AddAnnotation`), e.g.
    /// `mutation.example.com/reason`.
    pub fn add_audit_annotation(&self, key: &str, value: &str) {
        self.audit.add(key, value);
    }

    /// These attributes with `equivalents`, for the webhooks' unit tests.
    #[cfg(test)]
    pub(crate) fn with_equivalents(mut self, equivalents: Vec<EquivalentResource>) -> Self {
        self.equivalents = equivalents.into();
        self
    }

    /// The resource in every version served over the same storage (empty when the request
    /// did not come through an endpoint), the request's version among them.
    pub fn equivalent_resources(&self) -> &[EquivalentResource] {
        &self.equivalents
    }

    /// The list and map semantics of the request's version of the type, when known.
    pub(crate) fn patch_schema(&self) -> Option<&Arc<PatchSchema>> {
        self.patch_schema.as_ref()
    }

    /// Sends the client a warning (`Warning: 299 - "…"`).
    pub fn warn(&self, message: impl Into<String>) {
        self.warnings.add(message.into());
    }

    /// kube's `admission.NewForbidden`: 403, `{resource}.{group} "{name}" is forbidden: {why}`.
    pub fn forbidden(&self, why: impl std::fmt::Display) -> Error {
        let name = match (&self.name, &self.object) {
            (name, _) if !name.is_empty() => name.as_str(),
            (_, Some(object)) => crate::runtime::object::name(object).unwrap_or_default(),
            _ => "",
        };
        let resource = &self.resource;
        Error::forbidden_in(&resource.group, &resource.resource, name, why)
    }
}

/// `dryRun: ["All"]` in the options.
fn options_dry_run(options: &Value) -> bool {
    options["dryRun"]
        .as_array()
        .is_some_and(|list| list.iter().any(|v| v == "All"))
}

/// The object under admission as `T` (see `codec::from_object`).
fn decode<T: Resource + DeserializeOwned>(object: &Value) -> Result<T> {
    from_object(object.clone()).map_err(|e| {
        Error::internal(format!(
            "the object under admission does not decode as {}: {e}",
            T::INFO.kind
        ))
    })
}
