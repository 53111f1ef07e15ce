//! Delete and deletecollection: preconditions, finalizers and `deletionTimestamp`.

use serde_json::{json, Value};

use super::codec::{decode_stored, encode_for_storage};
use super::{list, Inner, MAX_ATTEMPTS};
use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{DeleteOptions, ListOptions};
use crate::registry::rest::{DeleteOutcome, ObjectList};
use crate::runtime::object::{self, set_meta};
use crate::storage::StorageError;

pub(crate) async fn delete(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    options: &DeleteOptions,
) -> Result<DeleteOutcome> {
    let key = inner.key(ctx, name)?;
    for _ in 0..MAX_ATTEMPTS {
        let current = inner.current(&key, name).await?;
        let current = current.ok_or_else(|| Error::not_found(&inner.info, name))?;
        let object = decode_stored(&current)?;
        check_preconditions(inner, name, &object, options)?;
        let pending = !object::finalizers(&object).is_empty();
        if options.dry_run {
            return Ok(if pending {
                DeleteOutcome::Pending(object)
            } else {
                DeleteOutcome::Deleted(object)
            });
        }
        let result = if pending {
            if object::is_being_deleted(&object) {
                return Ok(DeleteOutcome::Pending(object));
            }
            let bytes = encode_for_storage(&mark_as_deleting(object.clone()))?;
            inner
                .backend
                .update(&key, bytes, current.mod_revision)
                .await
        } else {
            inner.backend.delete(&key, Some(current.mod_revision)).await
        };
        match result {
            Ok(kv) => {
                let object = decode_stored(&kv)?;
                return Ok(if pending {
                    DeleteOutcome::Pending(object)
                } else {
                    DeleteOutcome::Deleted(object)
                });
            }
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(inner.storage_error(name, e)),
        }
    }
    Err(Error::conflict(&inner.info, name))
}

/// kube's `markAsDeleting`: a deletionTimestamp of now, a zero grace period, and (for kinds
/// without graceful deletion, which is all of ours) a generation bump, so that controllers
/// keyed on `observedGeneration` notice the deletion.
fn mark_as_deleting(mut object: Value) -> Value {
    if let Some(generation) = object["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
        set_meta(&mut object, "generation", json!(generation + 1));
    }
    set_meta(
        &mut object,
        "deletionTimestamp",
        json!(object::now_timestamp()),
    );
    set_meta(&mut object, "deletionGracePeriodSeconds", json!(0));
    object
}

fn check_preconditions(
    inner: &Inner,
    name: &str,
    object: &Value,
    options: &DeleteOptions,
) -> Result<()> {
    if let Some(uid) = &options.precondition_uid {
        let actual = object::meta_str(object, "uid").unwrap_or_default();
        if uid != actual {
            let why = format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
            );
            return Err(Error::conflict_because(&inner.info, name, &why));
        }
    }
    if let Some(rv) = &options.precondition_resource_version {
        let actual = object::resource_version(object).unwrap_or_default();
        if rv != actual {
            let why = format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
            );
            return Err(Error::conflict_because(&inner.info, name, &why));
        }
    }
    Ok(())
}

pub(crate) async fn delete_collection(
    inner: &Inner,
    ctx: &RequestContext,
    options: &DeleteOptions,
    list_options: &ListOptions,
) -> Result<ObjectList> {
    let selected = list::list(inner, ctx, list_options).await?;
    let mut deleted = ObjectList {
        resource_version: selected.resource_version.clone(),
        ..ObjectList::default()
    };
    for item in selected.items {
        let item = item.into_value()?;
        let name = object::name(&item).unwrap_or_default().to_string();
        let mut item_ctx = ctx.clone();
        item_ctx.namespace = object::namespace(&item)
            .map(str::to_string)
            .or(ctx.namespace.clone());
        match delete(inner, &item_ctx, &name, options).await {
            Ok(DeleteOutcome::Deleted(o) | DeleteOutcome::Pending(o)) => {
                deleted.items.push(o.into())
            }
            // Deleted by someone else in the meantime: that is what was asked.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}
