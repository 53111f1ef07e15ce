//! The scale subresource of a [`Store`]: `{plural}/{name}/scale` reads and writes the object as
//! an `autoscaling/v1` `Scale`, as apiextensions-apiserver serves a CRD's
//! `subresources.scale`, so `kubectl scale` and a HorizontalPodAutoscaler work.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::admit::AdmissionView;
use super::{Store, write};
use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::fieldmanager::ScaleHandler;
use crate::registry::options::{GetOptions, WriteOptions};
use crate::registry::rest::{Getter, UpdateFn, Updater};
use crate::registry::strategy::{Strategy, UpdateTarget};
use crate::runtime::{FieldError, Resource, ResourceInfo, ScaleInfo};

/// What the scale subresource serves: `autoscaling/v1` `Scale`, in the parent's scope.
pub(crate) fn scale_info(parent: &ResourceInfo) -> ResourceInfo {
    ResourceInfo {
        group: "autoscaling",
        version: "v1",
        kind: "Scale",
        status: false,
        scale: None,
        printer_columns: &[],
        selectable_fields: &[],
        ..*parent
    }
}

/// The `scale` subresource of a [`Store`] whose type declares `scale(...)`.
pub struct ScaleStore<T: Resource> {
    store: Store<T>,
    paths: ScaleInfo,
    /// `autoscaling/v1` `Scale`, as admission plugins see the subresource's objects.
    scale: ResourceInfo,
}

impl<T: Resource> ScaleStore<T> {
    pub(super) fn new(store: Store<T>, paths: ScaleInfo) -> Self {
        Self {
            store,
            paths,
            scale: scale_info(&T::INFO),
        }
    }
}

/// Admission plugins of the scale subresource see `Scale`s (kube's
/// `toScaleCreateValidation` / `toScaleUpdateValidation`); a mutating plugin's `spec.replicas`
/// is written to the object.
impl<T: Resource> AdmissionView for ScaleStore<T> {
    fn info(&self) -> &ResourceInfo {
        &self.scale
    }

    fn project(&self, object: &Value) -> Result<Value> {
        scale_of(&self.paths, object)
    }

    fn inject(&self, object: &mut Value, projected: &Value) -> Result<()> {
        let name = crate::runtime::object::name(object)
            .unwrap_or_default()
            .to_string();
        let replicas = validated_replicas(projected, &name)?;
        set_path(object, self.paths.spec_replicas_path, json!(replicas));
        Ok(())
    }
}

#[async_trait]
impl<T: Resource> Getter for ScaleStore<T> {
    async fn get(&self, ctx: &RequestContext, name: &str, options: &GetOptions) -> Result<Value> {
        let object = self.store.get(ctx, name, options).await?;
        let mut scale = scale_of(&self.paths, &object)?;
        let managed = object.pointer("/metadata/managedFields");
        if let Some(managed) = scale_fields(&self.paths, &object).to_subresource(managed) {
            scale["metadata"]["managedFields"] = managed;
        }
        Ok(scale)
    }
}

#[async_trait]
impl<T: Strategy> Updater for ScaleStore<T> {
    /// apiextensions' `scaleUpdatedObjectInfo`: the current object as a Scale goes to
    /// `update`; the Scale it returns is validated, its `spec.replicas` written to the
    /// object, and its `resourceVersion`, when given, becomes the write's precondition. The
    /// object then goes through the type's update strategy like any update.
    async fn update(
        &self,
        ctx: &RequestContext,
        name: &str,
        update: UpdateFn,
        options: &WriteOptions,
    ) -> Result<(Value, bool)> {
        let paths = self.paths;
        let scale_name = name.to_string();
        let to_object: UpdateFn = Arc::new(move |current: Option<&Value>| {
            let Some(current) = current else {
                // No object: let `update` say what it thinks of that (it may fail first).
                return update(None);
            };
            // The Scale carries the managers of the parent's replicas (kube's scale
            // handler), so a field manager working on Scales records this write too.
            let fields = scale_fields(&paths, current);
            let mut scale = scale_of(&paths, current)?;
            let parent_managed = current.pointer("/metadata/managedFields");
            if let Some(managed) = fields.to_subresource(parent_managed) {
                scale["metadata"]["managedFields"] = managed;
            }
            let scale = update(Some(&scale))?;
            let replicas = validated_replicas(&scale, &scale_name)?;
            let mut object = current.clone();
            set_path(&mut object, paths.spec_replicas_path, json!(replicas));
            let scale_managed = scale.pointer("/metadata/managedFields");
            let meta = crate::runtime::object::metadata_mut(&mut object);
            match fields.to_parent(parent_managed, scale_managed) {
                Some(managed) => meta.insert("managedFields".into(), managed),
                None => meta.remove("managedFields"),
            };
            if let Some(rv) = scale
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .filter(|rv| !rv.is_empty())
            {
                object["metadata"]["resourceVersion"] = json!(rv);
            }
            Ok(object)
        });
        let (written, created) = write::update::<T>(
            &self.store.inner,
            ctx,
            name,
            to_object,
            options,
            (UpdateTarget::Scale, Some(self as &dyn AdmissionView)),
        )
        .await?;
        Ok((scale_of(&self.paths, &written.object)?, created))
    }
}

/// The translation of `managedFields` between `object` and its Scale.
fn scale_fields(paths: &ScaleInfo, object: &Value) -> ScaleHandler {
    let replicas: Vec<&str> = paths
        .spec_replicas_path
        .trim_start_matches('.')
        .split('.')
        .collect();
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    ScaleHandler::new(&replicas, api_version)
}

/// apiextensions' `scaleFromCustomResource`: replicas missing from the object are 0; the
/// selector is the string at its path, if any.
fn scale_of(paths: &ScaleInfo, object: &Value) -> Result<Value> {
    let replicas = |path: &str| -> Result<i64> {
        match get_path(object, path) {
            None | Some(Value::Null) => Ok(0),
            Some(value) => value.as_i64().ok_or_else(|| {
                Error::internal(format!(
                    "{path} accessor error: {value} is of the type {}, expected int64",
                    json_type(value)
                ))
            }),
        }
    };
    let metadata = object.get("metadata").cloned().unwrap_or_default();
    let mut meta = Map::new();
    for key in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = metadata.get(key).filter(|v| !v.is_null()) {
            meta.insert(key.into(), value.clone());
        }
    }
    let mut status = json!({ "replicas": replicas(paths.status_replicas_path)? });
    if let Some(selector) = paths
        .label_selector_path
        .and_then(|path| get_path(object, path))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        status["selector"] = json!(selector);
    }
    let spec_replicas = replicas(paths.spec_replicas_path)?;
    let mut spec = Map::new();
    // Go's `omitempty` on `ScaleSpec.Replicas`.
    if spec_replicas != 0 {
        spec.insert("replicas".into(), json!(spec_replicas));
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }))
}

/// `validation.ValidateScale`: `spec.replicas` at least 0 (and an int32).
fn validated_replicas(scale: &Value, name: &str) -> Result<i64> {
    let given = scale.pointer("/spec/replicas");
    let replicas = match given {
        None | Some(Value::Null) => 0,
        Some(value) => value
            .as_i64()
            .filter(|r| i32::try_from(*r).is_ok())
            .ok_or_else(|| {
                Error::bad_request(format!(
                    "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: \
                     {value} is not an int32"
                ))
            })?,
    };
    if replicas < 0 {
        let error = FieldError::invalid(
            "spec.replicas",
            replicas,
            "must be greater than or equal to 0",
        );
        return Err(Error::invalid_in("autoscaling", "Scale", name, &[error]));
    }
    Ok(replicas)
}

/// The value at a dotted JSONPath such as `.spec.replicas`.
fn get_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    path.trim_start_matches('.')
        .split('.')
        .try_fold(object, |value, key| value.get(key))
}

/// Sets the value at a dotted JSONPath, making the objects on the way.
fn set_path(object: &mut Value, path: &str, value: Value) {
    let mut keys: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let Some(last) = keys.pop() else { return };
    let mut at = object;
    for key in keys {
        if !at.get(key).is_some_and(Value::is_object) {
            at[key] = json!({});
        }
        at = &mut at[key];
    }
    at[last] = value;
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATHS: ScaleInfo = ScaleInfo {
        spec_replicas_path: ".spec.replicas",
        status_replicas_path: ".status.replicas",
        label_selector_path: Some(".status.selector"),
    };

    #[test]
    fn a_scale_is_made_of_the_objects_numbers() {
        let object = json!({
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"x": "y"}},
            "spec": {"replicas": 3},
            "status": {"replicas": 2, "selector": "app=a"},
        });
        let scale = scale_of(&PATHS, &object).unwrap();
        assert_eq!(
            scale,
            json!({
                "kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"replicas": 3},
                "status": {"replicas": 2, "selector": "app=a"},
            })
        );
    }

    #[test]
    fn missing_numbers_are_zero_and_wrong_types_an_error() {
        let scale = scale_of(&PATHS, &json!({"metadata": {"name": "a"}})).unwrap();
        assert_eq!(scale["spec"], json!({}));
        assert_eq!(scale["status"], json!({"replicas": 0}));
        let error = scale_of(&PATHS, &json!({"spec": {"replicas": "3"}})).unwrap_err();
        assert_eq!(error.code(), 500);
    }

    #[test]
    fn negative_replicas_are_invalid() {
        let error = validated_replicas(&json!({"spec": {"replicas": -1}}), "a").unwrap_err();
        assert_eq!(error.code(), 422);
        assert!(
            error
                .to_string()
                .contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
            "{error}"
        );
        assert_eq!(validated_replicas(&json!({"spec": {}}), "a").unwrap(), 0);
    }

    #[test]
    fn paths_are_set_through_missing_objects() {
        let mut object = json!({"metadata": {}});
        set_path(&mut object, ".spec.replicas", json!(4));
        assert_eq!(object["spec"]["replicas"], 4);
    }
}
