//! Create and update: the strategy, the user's hooks, validation, then a compare-and-swap.

use rand::Rng;
use serde_json::{json, Value};

use super::codec::{decode_stored, decode_typed, encode_for_storage, encode_typed};
use super::{Inner, MAX_ATTEMPTS};
use crate::error::{Error, Result};
use crate::registry::context::RequestContext;
use crate::registry::options::{FieldValidation, WriteOptions};
use crate::registry::rest::UpdateFn;
use crate::registry::strategy::{
    keep_what_target_may_not_change, prepare_for_create, prepare_for_update, UpdateTarget,
};
use crate::registry::validation::{
    validate_object_meta, validate_object_meta_update, validate_object_name,
};
use crate::runtime::object::{self, metadata_mut, set_meta};
use crate::runtime::{FieldError, FieldErrorType, Resource, Scope};
use crate::storage::StorageError;

pub(crate) async fn create<T: Resource>(
    inner: &Inner,
    ctx: &RequestContext,
    mut object: Value,
    options: &WriteOptions,
) -> Result<Value> {
    check_namespace(inner, ctx, &mut object)?;
    let version_given = object::resource_version(&object)
        .and_then(|rv| rv.parse::<u64>().ok())
        .is_some_and(|rv| rv != 0);
    prepare_for_create(&inner.info, &mut object);
    let generate =
        object::name(&object).is_none() && object::meta_str(&object, "generateName").is_some();
    let mut last_name = String::new();
    for _ in 0..MAX_ATTEMPTS {
        let mut candidate = object.clone();
        if generate {
            let base = object::meta_str(&object, "generateName").unwrap_or_default();
            set_meta(&mut candidate, "name", json!(generate_name(base)));
        }
        let stored = admit_new::<T>(inner, ctx, candidate, options)?;
        let name = object::name(&stored).unwrap_or_default().to_string();
        let key = inner.key(ctx, &name)?;
        if options.dry_run {
            return dry_run_create(inner, &key, &name, stored).await;
        }
        if version_given {
            // kube's storage refuses it with an error that is not a Status: a 500 without a
            // reason. (Its dry run does not look, nor does it at a version that is no number.)
            return Err(Error::new(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        match inner
            .backend
            .create(&key, encode_for_storage(&stored)?)
            .await
        {
            // What was stored, as decode_stored would read it back.
            Ok(kv) => {
                let mut created = stored;
                set_meta(
                    &mut created,
                    "resourceVersion",
                    json!(kv.mod_revision.to_string()),
                );
                return Ok(created);
            }
            // kube's createWithGenerateNameRetry: another name, up to MAX_ATTEMPTS times.
            Err(StorageError::KeyExists(_)) if generate => last_name = name,
            Err(StorageError::KeyExists(_)) => return Err(name_taken(inner, &key, &name).await),
            Err(e) => return Err(inner.storage_error(&name, e)),
        }
    }
    Err(Error::generate_name_conflict(&inner.info, &last_name))
}

/// kube's answer to a create whose name is taken: `AlreadyExists`, which says so when the
/// object holding the name is being deleted.
async fn name_taken(inner: &Inner, key: &str, name: &str) -> Error {
    let holder = inner.backend.get(key).await.ok().flatten();
    let deleting = holder
        .and_then(|kv| inner.decode(&kv).ok())
        .is_some_and(|o| object::is_being_deleted(&o));
    if deleting {
        Error::already_exists_being_deleted(&inner.info, name)
    } else {
        Error::already_exists(&inner.info, name)
    }
}

/// kube's `DryRunnableStorage.Create`: nothing is written, but a name already taken is still
/// `AlreadyExists`, so a dry run answers as the real create would.
async fn dry_run_create(inner: &Inner, key: &str, name: &str, stored: Value) -> Result<Value> {
    let existing = inner.backend.get(key).await;
    match existing.map_err(|e| inner.storage_error(name, e))? {
        Some(_) => Err(name_taken(inner, key, name).await),
        None => Ok(stored),
    }
}

/// Runs defaulting and validation on a new object and fills the server-set fields.
fn admit_new<T: Resource>(
    inner: &Inner,
    ctx: &RequestContext,
    object: Value,
    options: &WriteOptions,
) -> Result<Value> {
    let name = object::name(&object).unwrap_or_default().to_string();
    let mut typed: T = decode_typed(&object, options.field_validation, ctx)?;
    typed.default_fields();
    let mut stored = encode_typed(&typed)?;
    let mut errors = validate_meta(inner, &stored);
    errors.extend(typed.validate());
    if !errors.is_empty() {
        return Err(Error::invalid(&inner.info, &name, &errors));
    }
    let meta = metadata_mut(&mut stored);
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(object::now_timestamp()));
    Ok(stored)
}

fn validate_meta(inner: &Inner, object: &Value) -> Vec<FieldError> {
    let namespaced = inner.info.scope == Scope::Namespaced;
    validate_object_meta(&object["metadata"], namespaced, validate_object_name)
}

/// kube's `SimpleNameGenerator`: five characters that cannot spell words.
fn generate_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    const MAX_BASE: usize = 63 - 5;
    let base = if base.len() > MAX_BASE {
        &base[..MAX_BASE]
    } else {
        base
    };
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// Makes the body's namespace agree with the URL's: filled in when empty, an error when it
/// differs; cleared for cluster-scoped kinds.
fn check_namespace(inner: &Inner, ctx: &RequestContext, object: &mut Value) -> Result<()> {
    if inner.info.scope == Scope::Cluster {
        metadata_mut(object).remove("namespace");
        return Ok(());
    }
    let url = ctx.namespace.as_deref().unwrap_or_default();
    match object::namespace(object) {
        None => set_meta(object, "namespace", json!(url)),
        Some(ns) if ns != url => return Err(Error::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        Some(_) => {}
    }
    Ok(())
}

pub(crate) async fn update<T: Resource>(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    update: UpdateFn,
    options: &WriteOptions,
    target: UpdateTarget,
) -> Result<(Value, bool)> {
    let key = inner.key(ctx, name)?;
    for _ in 0..MAX_ATTEMPTS {
        let current = inner.current(&key, name).await?;
        let Some(current) = current else {
            update(None)?;
            return Err(Error::not_found(&inner.info, name));
        };
        let old = inner.decode(&current)?;
        let new = update(Some(&old))?;
        let prepared = prepare_update::<T>(inner, ctx, name, new, &old, options, target)?;
        // A no-op update of an object stored in an older version still writes it, in the
        // storage version: kube-apiserver writes whenever the stored bytes would change,
        // which is how kube-storage-version-migrator's no-op updates migrate objects.
        let stale = !inner.versions.is_current(&current);
        let Some(new) = prepared.or_else(|| stale.then(|| old.clone())) else {
            return Ok((old, false));
        };
        if options.dry_run {
            return Ok((new, false));
        }
        // kube's ShouldDeleteDuringUpdate: the last finalizer of an object being deleted is
        // gone, so the object goes; the answer is the object as this update made it.
        let emptied = object::is_being_deleted(&new) && object::finalizers(&new).is_empty();
        let result = if emptied {
            inner.backend.delete(&key, Some(current.mod_revision)).await
        } else {
            let bytes = encode_for_storage(&new)?;
            inner
                .backend
                .update(&key, bytes, current.mod_revision)
                .await
        };
        match result {
            Ok(_) if emptied => return Ok((new, false)),
            Ok(kv) => return Ok((decode_stored(&kv)?, false)),
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(inner.storage_error(name, e)),
        }
    }
    Err(Error::conflict(&inner.info, name))
}

/// kube's storage precondition of a PUT: the body's uid must be the stored object's. kube
/// answers with its storage error's text inside a `Conflict` on the resource.
fn check_uid_precondition(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    old: &Value,
    options: &WriteOptions,
) -> Result<()> {
    let Some(uid) = options
        .precondition_uid
        .as_deref()
        .filter(|u| !u.is_empty())
    else {
        return Ok(());
    };
    let actual = object::meta_str(old, "uid").unwrap_or_default();
    if uid == actual {
        return Ok(());
    }
    let key = inner.key(ctx, name)?;
    let why = format!(
        "StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
    );
    Err(Error::conflict_because(&inner.info, name, &why))
}

/// The optimistic-concurrency check of an update: the version sent must be the stored one.
/// kube reads it as a number: "" and "0" are none (an unconditional update, when the kind
/// allows it), and one that is no number fails kube's parse with a 500 without a reason.
fn check_resource_version(inner: &Inner, name: &str, new: &mut Value, stored: &str) -> Result<()> {
    let given = object::resource_version(new).unwrap_or_default();
    let number = match given.parse::<u64>() {
        _ if given.is_empty() => 0,
        Ok(n) => n,
        Err(e) => {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow => "value out of range",
                _ => "invalid syntax",
            };
            let message = format!("strconv.ParseUint: parsing {given:?}: {why}");
            return Err(Error::new(500, "", message));
        }
    };
    if number != 0 && stored.parse::<u64>() == Ok(number) {
        return Ok(());
    }
    if number != 0 {
        return Err(Error::conflict(&inner.info, name));
    }
    if !inner.allow_unconditional_update {
        return Err(resource_version_required(inner, name));
    }
    // Unconditional: it applies to the version just read.
    set_meta(new, "resourceVersion", json!(stored));
    Ok(())
}

/// kube's answer to an update without a resourceVersion when the kind does not allow
/// unconditional updates: a 422 on the resource (kube has no kind at hand there), the
/// missing version printed as Go prints a `uint64` zero.
fn resource_version_required(inner: &Inner, name: &str) -> Error {
    let error = FieldError {
        type_: FieldErrorType::Invalid,
        field: "metadata.resourceVersion".into(),
        value: Some("0x0".into()),
        detail: "must be specified for an update".into(),
    };
    Error::invalid_in(inner.info.group, inner.info.plural, name, &[error])
}

/// `object` through `T` with its defaults applied.
fn defaulted<T: Resource>(
    object: &Value,
    options: &WriteOptions,
    ctx: &RequestContext,
) -> Result<Value> {
    let mut typed: T = decode_typed(object, options.field_validation, ctx)?;
    typed.default_fields();
    encode_typed(&typed)
}

/// Checks and prepares the new state of an object; `None` when nothing would change.
fn prepare_update<T: Resource>(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    mut new: Value,
    old: &Value,
    options: &WriteOptions,
    target: UpdateTarget,
) -> Result<Option<Value>> {
    if object::name(&new) != Some(name) {
        let given = object::name(&new).unwrap_or_default();
        return Err(Error::bad_request(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    check_namespace(inner, ctx, &mut new)?;
    check_uid_precondition(inner, ctx, name, old, options)?;
    let old_rv = object::resource_version(old).unwrap_or_default();
    check_resource_version(inner, name, &mut new, old_rv)?;
    keep_what_target_may_not_change(&inner.info, target, &mut new, old);
    // Defaults first, as kube decodes with defaulting before the strategy runs: a client
    // that leaves out a defaulted field has not changed the spec.
    let mut stored = defaulted::<T>(&new, options, ctx)?;
    prepare_for_update(&inner.info, target, &mut stored, old);
    let old_typed: T = decode_typed(old, FieldValidation::Ignore, ctx)?;
    let typed: T = decode_typed(&stored, FieldValidation::Ignore, ctx)?;
    let mut errors: Vec<FieldError> = validate_meta(inner, &stored);
    errors.extend(validate_object_meta_update(
        &stored["metadata"],
        &old["metadata"],
    ));
    errors.extend(typed.validate_update(&old_typed));
    if !errors.is_empty() {
        return Err(Error::invalid(&inner.info, name, &errors));
    }
    if &stored == old {
        return Ok(None);
    }
    Ok(Some(stored))
}
