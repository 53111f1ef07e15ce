//! Create and update: the client's object decoded once to `T`, the generic and the type's
//! [`Strategy`] run on it typed, encoded once for a compare-and-swap.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;
use serde_json::{Value, json};

use super::admit::{AdmissionView, Admit};
use super::codec::{decode_typed, encode_answerable, encode_typed};
use super::managed::ManagedJson;
use super::{Inner, MAX_ATTEMPTS};
use crate::admission::Operation;
use crate::error::{Error, Result};
use crate::metrics::WriteStage;
use crate::registry::context::RequestContext;
use crate::registry::options::{FieldValidation, WriteOptions};
use crate::registry::rest::{Object, UpdateFn};
use crate::registry::strategy::{
    Strategy, StrategyContext, UpdateTarget, clear_status_on_create,
    keep_what_target_may_not_change, next_generation, prepare_meta_for_create,
    prepare_meta_for_update,
};
use crate::registry::validation::{
    validate_object_meta, validate_object_meta_update, validate_object_name,
};
use crate::runtime::object::{self, metadata_mut, set_meta};
use crate::runtime::{FieldError, FieldErrorType, Scope};
use crate::storage::StorageError;

pub(crate) async fn create<T: Strategy>(
    inner: &Inner,
    ctx: &RequestContext,
    object: Value,
    options: &WriteOptions,
) -> Result<Object> {
    let version_given = object::resource_version(&object)
        .and_then(|rv| rv.parse::<u64>().ok())
        .is_some_and(|rv| rv != 0);
    let set = inner.set.set();
    let strategy = StrategyContext::new(ctx, options).with_stores(set.as_ref());
    let admit = Admit::new(inner, ctx);
    let (new, mut managed) = decode_new::<T>(inner, &strategy, admit, object).await?;
    let meta = new.metadata();
    let generate_base = meta
        .generate_name
        .clone()
        .filter(|_| meta.name.as_deref().unwrap_or_default().is_empty())
        .filter(|base| !base.is_empty());
    let mut last_name = String::new();
    // Only a generated name is tried again: a named object is moved into its one attempt,
    // not copied.
    let mut new = Some(new);
    for _ in 0..MAX_ATTEMPTS {
        let candidate = match &generate_base {
            Some(base) => {
                let mut candidate = new.as_ref().expect("kept for each attempt").clone();
                candidate.metadata_mut().name = Some(generate_name(base));
                candidate
            }
            None => new.take().expect("a named object is tried once"),
        };
        let attempt = insert::<T>(
            inner,
            &strategy,
            admit,
            (candidate, &mut managed),
            version_given,
        );
        match attempt.await? {
            Inserted::Created(written) => return Ok(written.into_object()),
            // kube's createWithGenerateNameRetry: another name, up to MAX_ATTEMPTS times.
            Inserted::Taken(name) if generate_base.is_some() => last_name = name,
            Inserted::Taken(name) => {
                let key = inner.key(ctx, &name)?;
                return Err(name_taken(inner, &key, &name).await);
            }
        }
    }
    Err(Error::generate_name_conflict(&inner.info, &last_name))
}

/// The client's new object as `T`, decoded once, defaulted, admitted by the mutating
/// plugins and prepared: the URL's namespace, the status and server-managed metadata
/// cleared, the type's `prepare_for_create`; with the JSON of its `managedFields`.
async fn decode_new<T: Strategy>(
    inner: &Inner,
    strategy: &StrategyContext<'_>,
    admit: Admit<'_>,
    mut object: Value,
) -> Result<(T, ManagedJson)> {
    let ctx = strategy.request();
    let started = Instant::now();
    check_namespace(inner, ctx, &mut object)?;
    clear_status_on_create(&inner.info, &mut object);
    let validation = strategy.options().field_validation;
    let mut typed: T = decode_typed(&object, validation, ctx)?;
    let managed = ManagedJson::take(&mut object);
    let started = ctx.stage(WriteStage::Decode, started);
    typed.default_fields();
    let started = ctx.stage(WriteStage::Strategy, started);
    admit.mutate(Operation::Create, &mut typed, None).await?;
    let started = ctx.stage(WriteStage::Admission, started);
    prepare_meta_for_create(typed.metadata_mut());
    typed.prepare_for_create(strategy);
    ctx.stage(WriteStage::Strategy, started);
    Ok((typed, managed))
}

/// What one attempt to store a new object did.
enum Inserted {
    /// Stored (or, in a dry run, found storable).
    Created(Written),
    /// The name is taken.
    Taken(String),
}

/// What a create or an update wrote: the object as stored, with its resourceVersion; and,
/// when it was stored and the stored bytes could be spliced, the bytes a client receives for
/// it (what was stored, with its resourceVersion), so that the answer is not encoded a
/// second time.
pub(crate) struct Written {
    pub(crate) object: Value,
    answer: Option<bytes::Bytes>,
}

impl Written {
    /// An object that was not stored by this write (a dry run, an update that changed
    /// nothing, an object deleted): no stored bytes to answer with.
    fn decoded(object: Value) -> Self {
        Self {
            object,
            answer: None,
        }
    }

    /// The object as a client receives it: the stored bytes when there are any.
    pub(crate) fn into_object(self) -> Object {
        match self.answer {
            Some(answer) => Object::Encoded(answer),
            None => Object::Decoded(self.object),
        }
    }
}

/// Validates `typed` (the type's rules, then the validating admission plugins) and stores it
/// under its name, unless that is taken.
async fn insert<T: Strategy>(
    inner: &Inner,
    strategy: &StrategyContext<'_>,
    admit: Admit<'_>,
    (typed, managed): (T, &mut ManagedJson),
    version_given: bool,
) -> Result<Inserted> {
    let ctx = strategy.request();
    let stored = admit_new::<T>(inner, strategy, typed, managed)?;
    let name = object::name(&stored).unwrap_or_default().to_string();
    let started = Instant::now();
    let stored = admit
        .validate_new(Operation::Create, &name, stored, None)
        .await?;
    let started = ctx.stage(WriteStage::Admission, started);
    let key = inner.key(ctx, &name)?;
    if strategy.dry_run() {
        return dry_run_create(inner, &key, &name, stored)
            .await
            .map(|stored| Inserted::Created(Written::decoded(stored)));
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
    let encoded = Arc::new(encode_answerable(&stored)?);
    let started = ctx.stage(WriteStage::Encode, started);
    let create = inner.backend.create(&key, encoded.bytes.clone());
    let created = inner.store_written(&key, &encoded, create).await;
    ctx.stage(WriteStage::Store, started);
    match created {
        // What was stored, as decode_stored would read it back; the answer is the bytes
        // stored with the revision spliced in, as a get would answer.
        Ok(kv) => {
            let answer = encoded.answer(kv.mod_revision);
            let mut created = stored;
            set_meta(
                &mut created,
                "resourceVersion",
                json!(kv.mod_revision.to_string()),
            );
            Ok(Inserted::Created(Written {
                object: created,
                answer,
            }))
        }
        Err(StorageError::KeyExists(_)) => Ok(Inserted::Taken(name)),
        Err(e) => Err(inner.storage_error(&name, e)),
    }
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

/// Validates a new object (metadata, then the type's rules), collects its warnings,
/// canonicalizes it and fills the server-set fields: the object as it will be stored.
fn admit_new<T: Strategy>(
    inner: &Inner,
    strategy: &StrategyContext<'_>,
    mut typed: T,
    managed: &mut ManagedJson,
) -> Result<Value> {
    let started = Instant::now();
    let name = typed.metadata().name.clone().unwrap_or_default();
    // The object as JSON once, for the metadata's checks and the schema's.
    let checked = checked_json(inner, &mut typed, managed)?;
    let json = checked.value();
    let mut errors = validate_meta_json(inner, &json["metadata"]);
    errors.extend(typed.validate(strategy));
    errors.extend(check_schema(inner, strategy, json, None)?);
    if !errors.is_empty() {
        return Err(Error::invalid(&inner.info, &name, &errors));
    }
    for warning in typed.warnings_on_create(strategy) {
        strategy.warn(warning);
    }
    let started = strategy.request().stage(WriteStage::Strategy, started);
    let mut stored = canonical_json(checked, &mut typed)?;
    let meta = metadata_mut(&mut stored);
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(object::now_timestamp()));
    strategy.request().stage(WriteStage::Encode, started);
    Ok(stored)
}

/// What the checks of a new object read as JSON ([`checked_json`]).
enum Checked {
    /// The whole object, for a type with a schema to check.
    Object(Value),
    /// Its metadata alone, as `{"metadata": …}`.
    Metadata(Value),
}

impl Checked {
    fn value(&self) -> &Value {
        match self {
            Checked::Object(value) | Checked::Metadata(value) => value,
        }
    }

    /// The JSON of the `managedFields` in it, taken out for the object's next encoding.
    fn take_managed(mut self) -> ManagedJson {
        match &mut self {
            Checked::Object(value) | Checked::Metadata(value) => ManagedJson::take(value),
        }
    }
}

/// What the checks of a new object read as JSON: the whole object when the type has a
/// schema to check, else its metadata alone; `managedFields` moved in from `managed` while
/// `typed`'s are still what it says.
fn checked_json<T: Strategy>(
    inner: &Inner,
    typed: &mut T,
    managed: &mut ManagedJson,
) -> Result<Checked> {
    match &inner.schema {
        Ok(Some(_)) => managed.encode(typed, encode_typed).map(Checked::Object),
        _ => {
            let meta = managed.encode(typed, |typed| {
                let meta = serde_json::to_value(typed.metadata()).map_err(Error::internal)?;
                Ok(json!({ "metadata": meta }))
            })?;
            Ok(Checked::Metadata(meta))
        }
    }
}

/// A new object canonicalized (kube's `Canonicalize`, after validation) as JSON: the
/// checks' JSON when it is the whole object and the type's `canonicalize` changes nothing
/// ([`Strategy::CANONICALIZES`]), else `typed` encoded anew (with the checks'
/// `managedFields`, if `canonicalize` left them alone).
fn canonical_json<T: Strategy>(checked: Checked, typed: &mut T) -> Result<Value> {
    typed.canonicalize();
    match checked {
        Checked::Object(json) if !T::CANONICALIZES => Ok(json),
        checked => checked.take_managed().encode(typed, encode_typed),
    }
}

/// The type's schema limits and rules on the new object (`json`, from [`checked_json`];
/// and, on update, the old one), as a CRD's strategy validates after its other checks;
/// errors ratcheted away on unchanged values are warnings. Nothing is done for a type
/// without limits or rules.
fn check_schema(
    inner: &Inner,
    strategy: &StrategyContext<'_>,
    json: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>> {
    let validator = match &inner.schema {
        Ok(None) => return Ok(Vec::new()),
        Ok(Some(validator)) => validator,
        Err(e) => return Err(Error::internal(e)),
    };
    let found = validator.validate(json, old);
    for warning in found.warnings {
        strategy.warn(warning);
    }
    Ok(found.errors)
}

/// kube's `ValidateObjectMetaAccessor` on the metadata as JSON.
fn validate_meta_json(inner: &Inner, meta: &Value) -> Vec<FieldError> {
    let namespaced = inner.info.scope == Scope::Namespaced;
    validate_object_meta(meta, namespaced, validate_object_name)
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
        Some(ns) if ns != url => {
            return Err(Error::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Some(_) => {}
    }
    Ok(())
}

/// An update of object `name` with what `update` makes of the stored one: on each attempt
/// the mutating admission plugins see the new object (as `view` shows it, for a
/// subresource of another kind), the strategy prepares and validates it, then the
/// validating plugins judge it.
pub(crate) async fn update<T: Strategy>(
    inner: &Inner,
    ctx: &RequestContext,
    name: &str,
    update: UpdateFn,
    options: &WriteOptions,
    (target, view): (UpdateTarget, Option<&dyn AdmissionView>),
) -> Result<(Written, bool)> {
    let key = inner.key(ctx, name)?;
    let set = inner.set.set();
    let strategy = StrategyContext::new(ctx, options)
        .for_subresource(target.subresource())
        .with_stores(set.as_ref());
    let admit = Admit {
        view,
        ..Admit::new(inner, ctx)
    };
    for _ in 0..MAX_ATTEMPTS {
        let started = Instant::now();
        let current = inner.current(&key, name).await?;
        let started = ctx.stage(WriteStage::Store, started);
        let Some(current) = current else {
            // `update` says first what it thinks of a missing object (a patch: NotFound).
            let new = update(None)?;
            let allowed = T::allow_create_on_update() || options.force_allow_create;
            if target != UpdateTarget::Main || !allowed {
                return Err(Error::not_found(&inner.info, name));
            }
            match create_on_update::<T>(inner, &strategy, Admit::new(inner, ctx), name, new).await?
            {
                Inserted::Created(written) => return Ok((written, true)),
                // Created meanwhile by another request: update that one.
                Inserted::Taken(_) => continue,
            }
        };
        let old = inner.decode(&current)?;
        ctx.stage(WriteStage::Decode, started);
        let new = update(Some(&old))?;
        let prepared =
            prepare_update::<T>(inner, &strategy, admit, name, new, &old, target).await?;
        // A no-op update of an object stored in an older version still writes it, in the
        // storage version: kube-apiserver writes whenever the stored bytes would change,
        // which is how kube-storage-version-migrator's no-op updates migrate objects.
        let stale = !inner.versions.is_current(&current);
        let Some(mut new) = prepared.or_else(|| stale.then(|| old.clone())) else {
            return Ok((Written::decoded(old), false));
        };
        if options.dry_run {
            return Ok((Written::decoded(new), false));
        }
        // kube's ShouldDeleteDuringUpdate: the last finalizer of an object being deleted is
        // gone, so the object goes; the answer is the object as this update made it.
        let emptied = object::is_being_deleted(&new) && object::finalizers(&new).is_empty();
        let started = Instant::now();
        let (result, encoded) = if emptied {
            let deleted = inner.backend.delete(&key, Some(current.mod_revision)).await;
            (deleted, None)
        } else {
            // Stored without its resourceVersion, which the key's revision gives (a stored
            // update sets it anew below; a conflict or an error drops `new`).
            let encoded = Arc::new(encode_answerable(&new)?);
            let started = ctx.stage(WriteStage::Encode, started);
            let bytes = encoded.bytes.clone();
            let update = inner.backend.update(&key, bytes, current.mod_revision);
            let result = inner.store_written(&key, &encoded, update).await;
            ctx.stage(WriteStage::Store, started);
            (result, Some(encoded))
        };
        match result {
            Ok(_) if emptied => return Ok((Written::decoded(new), false)),
            // What was stored, as decode_stored would read it back; the answer is the bytes
            // stored with the revision spliced in, as for a create.
            Ok(kv) => {
                let answer = encoded.and_then(|encoded| encoded.answer(kv.mod_revision));
                set_meta(
                    &mut new,
                    "resourceVersion",
                    json!(kv.mod_revision.to_string()),
                );
                let written = Written {
                    object: new,
                    answer,
                };
                return Ok((written, false));
            }
            Err(StorageError::Conflict { .. }) => continue,
            Err(e) => return Err(inner.storage_error(name, e)),
        }
    }
    Err(Error::conflict(&inner.info, name))
}

/// kube's `Store.Update` on a missing object of a kind that allows create on update: the
/// body is created as a create would (the create strategy, `generateName` ignored), with the
/// name from the URL; one that carries a resourceVersion was meant for an object that is
/// gone, and is a 404.
async fn create_on_update<T: Strategy>(
    inner: &Inner,
    strategy: &StrategyContext<'_>,
    admit: Admit<'_>,
    name: &str,
    new: Value,
) -> Result<Inserted> {
    check_name(&new, name)?;
    let version = object::resource_version(&new).unwrap_or_default();
    if version
        .parse::<u64>()
        .map_or(!version.is_empty(), |v| v != 0)
    {
        return Err(Error::not_found(&inner.info, name));
    }
    let (typed, mut managed) = decode_new::<T>(inner, strategy, admit, new).await?;
    insert::<T>(inner, strategy, admit, (typed, &mut managed), false).await
}

/// The name in an update's body must be the URL's.
fn check_name(new: &Value, name: &str) -> Result<()> {
    if object::name(new) == Some(name) {
        return Ok(());
    }
    let given = object::name(new).unwrap_or_default();
    Err(Error::bad_request(format!(
        "the name of the object ({given}) does not match the name on the URL ({name})"
    )))
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
fn check_resource_version<T: Strategy>(
    inner: &Inner,
    name: &str,
    new: &mut Value,
    stored: &str,
) -> Result<()> {
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
    if !T::allow_unconditional_update() {
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

/// Checks and prepares the new state of an object; `None` when nothing would change. The
/// parts the update may not change are put back on the JSON, then the object is decoded once,
/// the mutating admission plugins change it, the generic and the type's strategies run on it
/// typed, and the validating plugins judge it.
async fn prepare_update<T: Strategy>(
    inner: &Inner,
    strategy: &StrategyContext<'_>,
    admit: Admit<'_>,
    name: &str,
    mut new: Value,
    old: &Value,
    target: UpdateTarget,
) -> Result<Option<Value>> {
    let (ctx, options) = (strategy.request(), strategy.options());
    let started = Instant::now();
    check_name(&new, name)?;
    check_namespace(inner, ctx, &mut new)?;
    check_uid_precondition(inner, ctx, name, old, options)?;
    let old_rv = object::resource_version(old).unwrap_or_default();
    check_resource_version::<T>(inner, name, &mut new, old_rv)?;
    keep_what_target_may_not_change(&inner.info, target, &mut new, old);
    // Defaults first, as kube decodes with defaulting before the strategy runs: a client
    // that leaves out a defaulted field has not changed the spec.
    let mut typed: T = decode_typed(&new, options.field_validation, ctx)?;
    let mut managed = ManagedJson::take(&mut new);
    let started = ctx.stage(WriteStage::Decode, started);
    typed.default_fields();
    let started = ctx.stage(WriteStage::Strategy, started);
    admit
        .mutate(Operation::Update, &mut typed, Some(old))
        .await?;
    let started = ctx.stage(WriteStage::Admission, started);
    let old_typed: T = decode_typed(old, FieldValidation::Ignore, ctx)?;
    let started = ctx.stage(WriteStage::Decode, started);
    prepare_meta_for_update(typed.metadata_mut(), old_typed.metadata());
    typed.prepare_for_update(&old_typed, strategy);
    // The object as JSON once, for the metadata's checks and the schema's.
    let checked = checked_json(inner, &mut typed, &mut managed)?;
    let json = checked.value();
    let mut errors = validate_meta_json(inner, &json["metadata"]);
    errors.extend(validate_object_meta_update(
        &json["metadata"],
        &old["metadata"],
    ));
    errors.extend(typed.validate_update(&old_typed, strategy));
    errors.extend(check_schema(inner, strategy, json, Some(old))?);
    if !errors.is_empty() {
        return Err(Error::invalid(&inner.info, name, &errors));
    }
    for warning in typed.warnings_on_update(&old_typed, strategy) {
        strategy.warn(warning);
    }
    let started = ctx.stage(WriteStage::Strategy, started);
    // Encoded anew, the checks' tree freed first, rather than the checks' tree stored as a
    // create stores it: kept alive through the rest of an update, it left glibc's free
    // chunks to merge elsewhere, and server-side applies took 10–30% more CPU (book:
    // Benchmarks, writes stage by stage).
    // Its `managedFields` move on to the new encoding.
    let mut managed = checked.take_managed();
    typed.canonicalize();
    let mut stored = managed.encode(&mut typed, encode_typed)?;
    let started = ctx.stage(WriteStage::Encode, started);
    let generation = next_generation(&stored, old);
    set_meta(&mut stored, "generation", json!(generation));
    // kube runs validating admission on a no-op update too (storage finds it unchanged).
    let stored = admit
        .validate_new(Operation::Update, name, stored, Some(old))
        .await?;
    ctx.stage(WriteStage::Admission, started);
    if &stored == old {
        return Ok(None);
    }
    Ok(Some(stored))
}
