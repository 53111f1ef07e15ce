//! Delete and deletecollection: delete options, preconditions, the garbage collector's
//! finalizers, and `deletionTimestamp` while finalizers keep an object (kube's
//! `Store.Delete`, `BeforeDelete` and `deletionFinalizersForGarbageCollection`).

use serde_json::{Value, json};

use super::admit::Admit;
use super::codec::encode_for_storage;
use super::{Inner, MAX_ATTEMPTS, list};
use crate::admission::Operation;
use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{DeleteOptions, ListOptions};
use crate::registry::rest::{DeleteOutcome, ObjectList};
use crate::runtime::object::{self, set_meta};
use crate::runtime::{FieldError, GarbageCollectionPolicy};
use crate::storage::StorageError;

/// The finalizer that makes the garbage collector orphan an object's dependents.
pub const FINALIZER_ORPHAN_DEPENDENTS: &str = "orphan";
/// The finalizer that makes the garbage collector delete dependents first.
pub const FINALIZER_DELETE_DEPENDENTS: &str = "foregroundDeletion";

const PROPAGATION_POLICIES: [&str; 3] = ["Foreground", "Background", "Orphan"];

/// A delete of object `name`: the mutating admission plugins first (once, with no object,
/// as kube's delete handler runs them), then on each attempt the preconditions and the
/// validating plugins on the stored object.
pub(crate) async fn delete(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    options: &DeleteOptions,
) -> Result<DeleteOutcome> {
    validate_delete_options(options)?;
    Admit::new(inner, ctx).mutate_delete(name).await?;
    delete_admitted(inner, ctx, name, options).await
}

/// [`delete`] after the mutating step.
async fn delete_admitted(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    options: &DeleteOptions,
) -> Result<DeleteOutcome> {
    let key = inner.key(ctx, name)?;
    let admit = Admit::new(inner, ctx);
    for _ in 0..MAX_ATTEMPTS {
        let current = inner.current(&key, name).await?;
        let current = current.ok_or_else(|| Error::not_found(&inner.info, name))?;
        let object = inner.decode(&current)?;
        check_preconditions(inner, name, &object, options)?;
        admit
            .validate(Operation::Delete, name, None, Some(&object))
            .await?;
        let finalizers = finalizers_for_deletion(inner.gc_policy, &object, options);
        let pending = !finalizers.is_empty();
        let result = if !pending {
            if options.dry_run {
                return Ok(DeleteOutcome::Deleted(object));
            }
            inner.backend.delete(&key, Some(current.mod_revision)).await
        } else {
            let marked = mark_as_deleting(object.clone(), finalizers);
            // An object already being deleted, asked again: nothing to write.
            if options.dry_run || marked == object {
                return Ok(DeleteOutcome::Pending(marked));
            }
            let bytes = encode_for_storage(&marked)?;
            inner
                .backend
                .update(&key, bytes, current.mod_revision)
                .await
        };
        match result {
            Ok(kv) => {
                let object = inner.decode(&kv)?;
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

/// kube's `ValidateDeleteOptions`, checked before anything is read, as kube's delete
/// handler does.
fn validate_delete_options(options: &DeleteOptions) -> Result<()> {
    let mut errors = Vec::new();
    if let Some(policy) = &options.propagation_policy {
        if options.orphan_dependents.is_some() {
            errors.push(FieldError::invalid(
                "propagationPolicy",
                policy,
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        if !PROPAGATION_POLICIES.contains(&policy.as_str()) {
            let mut supported = PROPAGATION_POLICIES.to_vec();
            supported.push("nil");
            errors.push(FieldError::not_supported(
                "propagationPolicy",
                policy,
                &supported,
            ));
        }
    }
    if errors.is_empty() {
        return Ok(());
    }
    Err(Error::invalid_in(
        "meta.k8s.io",
        "DeleteOptions",
        "",
        &errors,
    ))
}

/// The finalizers an object has once this delete is applied: its own, with the garbage
/// collector's `orphan` / `foregroundDeletion` set as the options, then the object's
/// finalizers, then the kind's policy ask (kube's `deletionFinalizersForGarbageCollection`).
/// The object's list is kept as it is when the set does not change.
fn finalizers_for_deletion(
    policy: GarbageCollectionPolicy,
    object: &Value,
    options: &DeleteOptions,
) -> Vec<String> {
    let existing = object::finalizers(object);
    let orphan = should_orphan_dependents(policy, &existing, options);
    let foreground = should_delete_dependents(policy, &existing, options);
    let gc = [FINALIZER_ORPHAN_DEPENDENTS, FINALIZER_DELETE_DEPENDENTS];
    let mut wanted: Vec<String> = existing
        .iter()
        .filter(|f| !gc.contains(&f.as_str()))
        .cloned()
        .collect();
    if orphan {
        wanted.push(FINALIZER_ORPHAN_DEPENDENTS.to_string());
    }
    if foreground {
        wanted.push(FINALIZER_DELETE_DEPENDENTS.to_string());
    }
    let same_set =
        wanted.iter().all(|f| existing.contains(f)) && existing.iter().all(|f| wanted.contains(f));
    if same_set { existing } else { wanted }
}

/// kube's `shouldOrphanDependents`: the request's options, then the object's finalizers,
/// then the kind's default.
fn should_orphan_dependents(
    policy: GarbageCollectionPolicy,
    finalizers: &[String],
    options: &DeleteOptions,
) -> bool {
    if policy == GarbageCollectionPolicy::Unsupported {
        return false;
    }
    if let Some(orphan) = options.orphan_dependents {
        return orphan;
    }
    match options.propagation_policy.as_deref() {
        Some("Orphan") => return true,
        Some("Background" | "Foreground") => return false,
        _ => {}
    }
    for f in finalizers {
        match f.as_str() {
            FINALIZER_ORPHAN_DEPENDENTS => return true,
            FINALIZER_DELETE_DEPENDENTS => return false,
            _ => {}
        }
    }
    policy == GarbageCollectionPolicy::OrphanDependents
}

/// kube's `shouldDeleteDependents`: only on request, or when the object already asks.
fn should_delete_dependents(
    policy: GarbageCollectionPolicy,
    finalizers: &[String],
    options: &DeleteOptions,
) -> bool {
    if policy == GarbageCollectionPolicy::Unsupported || options.orphan_dependents.is_some() {
        return false;
    }
    match options.propagation_policy.as_deref() {
        Some("Foreground") => return true,
        Some("Background" | "Orphan") => return false,
        _ => {}
    }
    for f in finalizers {
        match f.as_str() {
            FINALIZER_DELETE_DEPENDENTS => return true,
            FINALIZER_ORPHAN_DEPENDENTS => return false,
            _ => {}
        }
    }
    false
}

/// kube's `markAsDeleting` with the finalizers set: a deletionTimestamp of now unless one
/// is set already, a zero grace period, and (the first time, for kinds without graceful
/// deletion, which is all of ours) a generation bump, so that controllers keyed on
/// `observedGeneration` notice the deletion.
fn mark_as_deleting(mut object: Value, finalizers: Vec<String>) -> Value {
    if !object::is_being_deleted(&object) {
        if let Some(generation) = object["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
            set_meta(&mut object, "generation", json!(generation + 1));
        }
        set_meta(
            &mut object,
            "deletionTimestamp",
            json!(object::now_timestamp()),
        );
    }
    set_meta(&mut object, "deletionGracePeriodSeconds", json!(0));
    set_meta(&mut object, "finalizers", json!(finalizers));
    object
}

/// kube's `BeforeDelete` precondition check: a 409 naming the kind (not the resource, as
/// other conflicts do).
fn check_preconditions(
    inner: &Inner,
    name: &str,
    object: &Value,
    options: &DeleteOptions,
) -> Result<()> {
    let info = &inner.info;
    if let Some(uid) = &options.precondition_uid {
        let actual = object::meta_str(object, "uid").unwrap_or_default();
        if uid != actual {
            let why = format!(
                "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
            );
            return Err(Error::conflict_in(info.group, info.kind, name, &why));
        }
    }
    if let Some(rv) = &options.precondition_resource_version {
        let actual = object::resource_version(object).unwrap_or_default();
        if rv != actual {
            let why = format!(
                "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
            );
            return Err(Error::conflict_in(info.group, info.kind, name, &why));
        }
    }
    Ok(())
}

/// kube's `DeleteCollection`: deletes every selected object with the same options and
/// answers the list as it was read. The mutating admission plugins run once (no name), the
/// validating ones on each object.
pub(crate) async fn delete_collection(
    inner: &Inner,
    ctx: &RequestContext,
    options: &DeleteOptions,
    list_options: &ListOptions,
) -> Result<ObjectList> {
    validate_delete_options(options)?;
    Admit::new(inner, ctx).mutate_delete("").await?;
    let selected = list::list(inner, ctx, list_options).await?;
    for item in &selected.items {
        let item = item.to_value()?;
        let name = object::name(&item).unwrap_or_default().to_string();
        let mut item_ctx = ctx.clone();
        item_ctx.namespace = object::namespace(&item)
            .map(str::to_string)
            .or(ctx.namespace.clone());
        match delete_admitted(inner, &item_ctx, &name, options).await {
            Ok(_) => {}
            // Deleted by someone else in the meantime: that is what was asked.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(selected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_finalizers(finalizers: &[&str]) -> Value {
        json!({"metadata": {"name": "a", "finalizers": finalizers}})
    }

    fn policy(p: &str) -> DeleteOptions {
        DeleteOptions {
            propagation_policy: Some(p.into()),
            ..DeleteOptions::default()
        }
    }

    #[test]
    fn finalizers_follow_kube_gc_rules() {
        use GarbageCollectionPolicy::*;
        let none = DeleteOptions::default();
        let cases: [(GarbageCollectionPolicy, &[&str], DeleteOptions, &[&str]); 9] = [
            (DeleteDependents, &[], none.clone(), &[]),
            (DeleteDependents, &["x"], none.clone(), &["x"]),
            (
                DeleteDependents,
                &["x"],
                policy("Foreground"),
                &["x", "foregroundDeletion"],
            ),
            (DeleteDependents, &[], policy("Orphan"), &["orphan"]),
            (
                DeleteDependents,
                &["orphan", "x"],
                policy("Background"),
                &["x"],
            ),
            (DeleteDependents, &["orphan"], none.clone(), &["orphan"]),
            (OrphanDependents, &[], none.clone(), &["orphan"]),
            (
                DeleteDependents,
                &["foregroundDeletion"],
                DeleteOptions {
                    orphan_dependents: Some(true),
                    ..DeleteOptions::default()
                },
                &["orphan"],
            ),
            (Unsupported, &["orphan", "x"], policy("Orphan"), &["x"]),
        ];
        for (gc, existing, options, want) in cases {
            let got = finalizers_for_deletion(gc, &with_finalizers(existing), &options);
            assert_eq!(got, want, "{gc:?} {existing:?} {options:?}");
        }
    }

    #[test]
    fn invalid_propagation_policy_is_kube_422() {
        let e = validate_delete_options(&policy("Sideways")).unwrap_err();
        let json = e.to_json();
        assert_eq!(json["code"], 422);
        assert_eq!(json["reason"], "Invalid");
        assert_eq!(
            json["message"],
            r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil""#
        );
        assert_eq!(json["details"]["group"], "meta.k8s.io");
        assert_eq!(json["details"]["kind"], "DeleteOptions");
        assert_eq!(json["details"]["causes"][0]["field"], "propagationPolicy");
        assert_eq!(
            json["details"]["causes"][0]["reason"],
            "FieldValueNotSupported"
        );
        let both = DeleteOptions {
            orphan_dependents: Some(false),
            ..policy("Orphan")
        };
        assert_eq!(validate_delete_options(&both).unwrap_err().code(), 422);
        assert!(validate_delete_options(&policy("Foreground")).is_ok());
    }
}
