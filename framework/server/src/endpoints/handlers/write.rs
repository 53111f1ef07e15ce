//! create, update, patch, delete and deletecollection.

use std::sync::Arc;
use std::time::Instant;

use axum::response::Response;
use http::{StatusCode, header};
use serde_json::{Value, json};

use super::read::accept_header;
use super::{Call, require};
use crate::admission::AdmissionContext;
use crate::admission::attributes::GroupVersionResource;
use crate::endpoints::body::read_limited;
use crate::endpoints::negotiation::{
    BodyEncoding, BodyError, Endpoint, Shape, Target, body_encoding, negotiate, off_workers,
    read_object, read_value, summarize_body,
};
use crate::endpoints::response::{
    respond, respond_list, respond_object as respond_encoded, shape_object,
};
use crate::error::{Error, Result, deleted_status};
use crate::metrics::{WriteStage, WriteVerb, write_stage};
use crate::registry::context::PatchDecoding;
use crate::registry::fieldmanager::{
    FieldManager, FieldOwner, FieldSet, PathElement, VersionConverter, manager_from_user_agent,
};
use crate::registry::options::{DeleteOptions, FieldValidation, WriteOptions, delete_dry_run};
use crate::registry::patch::{self, DecodedPatch, PatchError, PatchType};
use crate::registry::rest::{DeleteOutcome, Object, UpdateFn, Updater};
use crate::runtime::ResourceInfo;
use crate::runtime::jsonpath::go_print;
use crate::runtime::object;

/// Reads the body, refusing one larger than the limit with 413.
pub(super) async fn read_body(call: &mut Call) -> Result<bytes::Bytes> {
    let body = std::mem::take(&mut call.body);
    read_limited(body, call.state.max_body_bytes).await
}

pub(super) fn content_type(call: &Call) -> Option<&str> {
    call.parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// Decodes an object body and checks its `apiVersion` and `kind` against the URL, filling
/// them in when absent as kube-apiserver does.
async fn read_new_object(call: &mut Call, validation: FieldValidation) -> Result<Value> {
    let encoding = body_encoding(content_type(call))?;
    let bytes = read_body(call).await?;
    let (mut object, duplicates) = off_workers(bytes.clone(), move |b| read_object(b, encoding))
        .await?
        .map_err(|e| unrecognized(&call.resource.storage.info, encoding, &bytes, e))?;
    report_duplicates(call, &duplicates, validation)?;
    check_type(&call.resource.storage.info, &mut object)?;
    Ok(object)
}

/// A create or update body the decoder refused, as kube's `transformDecodeError` answers
/// one whose kind it could not read: the decoder's error and the start of the body.
fn unrecognized(info: &ResourceInfo, encoding: BodyEncoding, body: &[u8], e: BodyError) -> Error {
    let cause = match (e, encoding) {
        (BodyError::Unreadable(text), BodyEncoding::Json) => {
            format!("couldn't get version/kind; json parse error: {text}")
        }
        (BodyError::Unreadable(text), BodyEncoding::Yaml) => text,
        (e, _) => return e.into(),
    };
    Error::bad_request(format!(
        "the object provided is unrecognized (must be of type {}): {cause} ({})",
        info.kind,
        summarize_body(body)
    ))
}

/// Duplicate fields of a body, as `fieldValidation` asks: 400 with `Strict` (kube-apiserver's
/// strict decoding error), a `Warning` each with `Warn`, nothing with `Ignore`.
fn report_duplicates(
    call: &Call,
    duplicates: &[String],
    validation: FieldValidation,
) -> Result<()> {
    let messages = duplicates.iter().map(|p| format!("duplicate field {p:?}"));
    match validation {
        FieldValidation::Ignore => Ok(()),
        _ if duplicates.is_empty() => Ok(()),
        FieldValidation::Warn => {
            messages.for_each(|m| call.ctx.warn(m));
            Ok(())
        }
        FieldValidation::Strict => {
            let info = &call.resource.storage.info;
            let all: Vec<String> = messages.collect();
            Err(Error::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: strict decoding error: {}",
                info.kind,
                info.version,
                info.kind,
                all.join(", ")
            )))
        }
    }
}

fn check_type(info: &ResourceInfo, object: &mut Value) -> Result<()> {
    let expected_version = info.api_version();
    let map = object
        .as_object_mut()
        .ok_or_else(|| Error::bad_request("the request body must be an object"))?;
    match map
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        None => {
            map.insert("apiVersion".into(), json!(expected_version));
        }
        Some(v) if v != expected_version => {
            return Err(Error::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected_version})"
            )));
        }
        Some(_) => {}
    }
    match map
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        None => {
            map.insert("kind".into(), json!(info.kind));
        }
        Some(k) if k != info.kind => {
            return Err(Error::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                info.kind
            )));
        }
        Some(_) => {}
    }
    Ok(())
}

/// Hands storage the server's admission chain with what it needs to know of this request:
/// the kind and resource as the client named them, the subresource, the options.
pub(super) fn admit_with(call: &mut Call, options: Value) {
    let info = &call.resource.storage.info;
    let request_resource = GroupVersionResource::gvr(
        &call.info.api_group,
        &call.info.api_version,
        &call.info.resource,
    );
    call.ctx.admission = Some(AdmissionContext {
        chain: call.state.admission.clone(),
        request_kind: info.gvk(),
        request_resource,
        subresource: call.info.subresource.clone(),
        options,
        audit: crate::audit::AuditAnnotations::of(&call.parts.extensions),
        equivalents: call.resource.equivalents.clone(),
        patch_schema: Some(call.resource.storage.patch_schema.clone()),
    });
}

/// `CreateOptions`, `UpdateOptions` or `PatchOptions` as admission plugins and webhooks
/// see them.
fn write_options_json(kind: &str, options: &WriteOptions) -> Value {
    let mut json = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if options.dry_run {
        json["dryRun"] = json!(["All"]);
    }
    if let Some(manager) = &options.field_manager {
        json["fieldManager"] = json!(manager);
    }
    json
}

/// The `PatchOptions` of an apply as admission plugins and webhooks see them.
fn apply_options_json(options: &WriteOptions, force: bool) -> Value {
    let mut json = write_options_json("PatchOptions", options);
    if force {
        json["force"] = json!(true);
    }
    json
}

/// `DeleteOptions` as admission plugins and webhooks see them.
fn delete_options_json(options: &DeleteOptions) -> Value {
    let mut json = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if options.dry_run {
        json["dryRun"] = json!(["All"]);
    }
    if let Some(seconds) = options.grace_period_seconds {
        json["gracePeriodSeconds"] = json!(seconds);
    }
    if let Some(policy) = &options.propagation_policy {
        json["propagationPolicy"] = json!(policy);
    }
    if let Some(orphan) = options.orphan_dependents {
        json["orphanDependents"] = json!(orphan);
    }
    let preconditions = [
        ("uid", &options.precondition_uid),
        ("resourceVersion", &options.precondition_resource_version),
    ];
    for (key, value) in preconditions {
        if let Some(value) = value {
            json["preconditions"][key] = json!(value);
        }
    }
    json
}

fn respond_object(call: &Call, code: StatusCode, object: impl Into<Object>) -> Result<Response> {
    let started = Instant::now();
    let target = negotiate(accept_header(call), Endpoint::Object)?;
    let include = call.query.include_object(target.shape)?;
    let response = match object.into() {
        // The object as the store encoded it (a create's stored bytes): sent as they are.
        object @ (Object::Encoded(_) | Object::Cached(_)) if target.shape == Shape::Object => {
            respond_encoded(code, target, object)
        }
        object => {
            let object = object.into_value()?;
            let body = shape_object(target, object, &call.resource.table, include);
            respond(code, target, &body)
        }
    };
    call.ctx.stage(WriteStage::Encode, started);
    response
}

/// Times the stages of this request's write as `verb`'s.
fn timed(call: &mut Call, verb: WriteVerb) {
    call.ctx = std::mem::take(&mut call.ctx).for_write(verb);
}

pub(crate) async fn create(mut call: Call) -> Result<Response> {
    negotiate(accept_header(&call), Endpoint::Object)?;
    let creater = require(&call.resource.storage.creater, &call)?.clone();
    let options = call.query.write_options()?;
    if !call.info.name.is_empty() {
        return Err(Error::method_not_allowed());
    }
    timed(&mut call, WriteVerb::Create);
    let started = Instant::now();
    let mut object = read_new_object(&mut call, options.field_validation).await?;
    let started = call.ctx.stage(WriteStage::Decode, started);
    let (fields, owner) = field_manager(&call, &options);
    fields.update(None, &mut object, &owner);
    call.ctx.stage(WriteStage::FieldManager, started);
    admit_with(&mut call, write_options_json("CreateOptions", &options));
    let created = creater.create(&call.ctx, object, &options).await?;
    respond_object(&call, StatusCode::CREATED, created)
}

pub(crate) async fn update(mut call: Call) -> Result<Response> {
    negotiate(accept_header(&call), Endpoint::Object)?;
    let updater = require(&call.resource.storage.updater, &call)?.clone();
    let mut options = call.query.write_options()?;
    timed(&mut call, WriteVerb::Update);
    let started = Instant::now();
    let object = Arc::new(read_new_object(&mut call, options.field_validation).await?);
    call.ctx.stage(WriteStage::Decode, started);
    // kube's `UpdatedObjectInfo.Preconditions` of a PUT: the body's uid, if it has one.
    options.precondition_uid = object::meta_str(&object, "uid").map(str::to_string);
    admit_with(&mut call, write_options_json("UpdateOptions", &options));
    let (fields, owner) = field_manager(&call, &options);
    let update: UpdateFn = Arc::new(move |current| {
        let started = Instant::now();
        let mut new = (*object).clone();
        fields.update(current, &mut new, &owner);
        write_stage(WriteVerb::Update, WriteStage::FieldManager, started);
        Ok(new)
    });
    let written = updater
        .update_object(&call.ctx, &call.info.name, update, &options)
        .await?;
    respond_written(&call, written)
}

/// The object an update stored: 201 when it created it, else 200.
fn respond_written(call: &Call, (stored, created): (Object, bool)) -> Result<Response> {
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    respond_object(call, code, stored)
}

pub(crate) async fn patch(mut call: Call) -> Result<Response> {
    negotiate(accept_header(&call), Endpoint::Object)?;
    if !call.resource.storage.can_patch() {
        return Err(Error::method_not_supported(
            &call.resource.storage.info,
            "patch",
        ));
    }
    let updater = require(&call.resource.storage.updater, &call)?.clone();
    // The media type is judged before the options, as kube-apiserver does.
    let patch_type = patch_type(content_type(&call))?;
    if patch_type == PatchType::Apply {
        return apply(call, updater).await;
    }
    let options = call.query.write_options()?;
    timed(&mut call, WriteVerb::Patch);
    let started = Instant::now();
    let body = read_body(&mut call).await?;
    let validation = options.field_validation;
    let body = off_workers(body, move |b| decode_patch(patch_type, validation, b)).await?;
    call.ctx.stage(WriteStage::Decode, started);
    if let (Ok(body), FieldValidation::Strict) = (&body, validation) {
        let decoding = PatchDecoding {
            errors: body.strict_errors.clone(),
            shown: body.shown.clone(),
        };
        call.ctx = call.ctx.clone().for_patch(decoding);
    }
    admit_with(&mut call, write_options_json("PatchOptions", &options));
    let info = call.resource.storage.info;
    let schema = call.resource.storage.patch_schema.clone();
    let name = call.info.name.clone();
    let (fields, owner) = field_manager(&call, &options);
    let ctx = call.ctx.clone();
    let update: UpdateFn = Arc::new(move |current| {
        // As kube's patcher, the object first (404), then the patch.
        let current = current.ok_or_else(|| Error::not_found(&info, &name))?;
        let body = body.as_ref().map_err(|e| Error::from(e.clone()))?;
        if validation == FieldValidation::Warn {
            body.strict_errors.iter().for_each(|e| ctx.warn(e.clone()));
        }
        let started = Instant::now();
        let mut patched = body.patch.apply(current, &schema).map_err(Error::from)?;
        check_type(&info, &mut patched)?;
        let started = write_stage(WriteVerb::Patch, WriteStage::Patch, started);
        fields.update(Some(current), &mut patched, &owner);
        write_stage(WriteVerb::Patch, WriteStage::FieldManager, started);
        Ok(patched)
    });
    let (stored, _) = updater
        .update_object(&call.ctx, &call.info.name, update, &options)
        .await?;
    respond_object(&call, StatusCode::OK, stored)
}

/// A PATCH body decoded (on a blocking thread when large), with its strict decoding errors
/// when `fieldValidation` asks for them.
struct PatchBody {
    patch: DecodedPatch,
    strict_errors: Vec<String>,
    /// What a strict 422 of a strategic merge patch shows: the patch as Go prints a map.
    shown: Option<String>,
}

fn decode_patch(
    patch_type: PatchType,
    validation: FieldValidation,
    bytes: &[u8],
) -> std::result::Result<PatchBody, PatchError> {
    let (value, duplicates) = read_value(bytes, BodyEncoding::Json).map_err(|e| match e {
        BodyError::Unreadable(text) => patch::too_deep(patch_type, validation, text),
        BodyError::Malformed(_, text) => patch::malformed(patch_type, text),
        BodyError::Refused(e) => PatchError::Malformed(e.message().to_string()),
    })?;
    let strict_errors = match validation {
        FieldValidation::Ignore => Vec::new(),
        _ => patch::body_strict_errors(patch_type, &value, &duplicates),
    };
    let shown = (validation == FieldValidation::Strict && patch_type == PatchType::StrategicMerge)
        .then(|| go_print(&value));
    Ok(PatchBody {
        patch: DecodedPatch::from_value(patch_type, value)?,
        strict_errors,
        shown,
    })
}

/// Server-side apply: the body (YAML or JSON) is the manager's configuration, merged into
/// the object by the schema, with conflicts refused unless `force`; a missing object is
/// created (201).
async fn apply(mut call: Call, updater: Arc<dyn Updater>) -> Result<Response> {
    let (options, force) = call.query.apply_options()?;
    timed(&mut call, WriteVerb::Apply);
    let started = Instant::now();
    let body = read_body(&mut call).await?;
    // kube's apply patcher decodes with sigs.k8s.io/yaml, whose errors it wraps so.
    let (config, _) = off_workers(body, |b| read_object(b, BodyEncoding::Yaml))
        .await?
        .map_err(|e| match e {
            BodyError::Unreadable(text) => Error::bad_request(format!(
                "error decoding YAML: error converting YAML to JSON: {text}"
            )),
            e => e.into(),
        })?;
    call.ctx.stage(WriteStage::Decode, started);
    admit_with(&mut call, apply_options_json(&options, force));
    let info = call.resource.storage.info;
    let (fields, owner) = field_manager(&call, &options);
    let update: UpdateFn = Arc::new(move |current| {
        let started = Instant::now();
        let mut applied = fields.apply(current, &config, &owner, force)?;
        check_type(&info, &mut applied)?;
        write_stage(WriteVerb::Apply, WriteStage::FieldManager, started);
        Ok(applied)
    });
    let written = updater
        .update_object(&call.ctx, &call.info.name, update, &options)
        .await?;
    respond_written(&call, written)
}

/// The field manager of the resource and who writes (kube's `managerOrUserAgent`: the
/// `fieldManager` parameter, else the User-Agent's first word), in the request's version,
/// through its subresource, now; the fields the subresource's strategy resets are never
/// recorded. The scale subresource's are `Scale`s, whose managers the store translates to
/// and from the object's.
fn field_manager(call: &Call, options: &WriteOptions) -> (FieldManager, FieldOwner) {
    let subresource = call.info.subresource.as_str();
    let info = &call.resource.storage.info;
    let manager = options.field_manager.clone().unwrap_or_else(|| {
        let agent = call.parts.headers.get(header::USER_AGENT);
        manager_from_user_agent(agent.and_then(|v| v.to_str().ok()).unwrap_or_default())
    });
    let owner = FieldOwner::new(&manager, &info.api_version(), &object::now_timestamp())
        .subresource(subresource)
        .reset_fields(reset_fields(info, subresource));
    let mut fields = FieldManager::new(call.resource.storage.patch_schema.clone());
    if subresource == "scale" {
        return (fields, owner);
    }
    if let Some(converter) = version_converter(call) {
        fields = fields.with_converter(converter);
    }
    (fields, owner)
}

/// How the field manager sees an object of one version the resource is served in as
/// another (through the storage version), to compare the fields of managers who wrote
/// through other versions: `None` when there is one version. An object is taken to be in the
/// version its `apiVersion` names (the request's when it names none): the field manager
/// also converts back to the request's version what it read in a manager's.
fn version_converter(call: &Call) -> Option<Arc<dyn VersionConverter>> {
    let equivalents = call.resource.equivalents.clone();
    if equivalents.len() < 2 {
        return None;
    }
    let own = call.info.api_version.clone();
    let convert = move |object: &Value, api_version: &str| -> Option<Value> {
        let served_as = |api_version: &str| {
            equivalents.iter().find(|e| {
                let kind = &e.kind;
                api_version.split_once('/') == Some((kind.group.as_str(), kind.version.as_str()))
                    || (kind.group.is_empty() && api_version == kind.version)
            })
        };
        let target = served_as(api_version)?;
        let source = match object.get("apiVersion").and_then(Value::as_str) {
            Some(from) => served_as(from)?,
            None => equivalents.iter().find(|e| e.resource.version == own)?,
        };
        let stored = match &source.convertor {
            Some(convertor) => convertor.to_storage(object).ok()?,
            None => object.clone(),
        };
        match &target.convertor {
            Some(convertor) => convertor.to_served(&stored).ok(),
            None => Some(stored),
        }
    };
    Some(Arc::new(convert))
}

/// kube's `GetResetFields` of custom resources: the main resource resets `status` (when
/// it has a status subresource), `status` resets `spec` and `metadata`.
fn reset_fields(info: &ResourceInfo, subresource: &str) -> FieldSet {
    let top = |names: &[&str]| {
        let mut set = FieldSet::new();
        for name in names {
            set.insert(&[PathElement::Field((*name).to_string())]);
        }
        set
    };
    match subresource {
        "status" => top(&["spec", "metadata"]),
        _ if info.status => top(&["status"]),
        _ => FieldSet::new(),
    }
}

/// The patch type of a `Content-Type`; 415 for anything else.
fn patch_type(content_type: Option<&str>) -> Result<PatchType> {
    match content_type.and_then(PatchType::from_content_type) {
        Some(t) => Ok(t),
        None => Err(PatchError::UnsupportedMediaType.into()),
    }
}

/// `DeleteOptions` from the query, overridden by a body when one is sent.
async fn delete_options(call: &mut Call) -> Result<DeleteOptions> {
    let mut options = call.query.delete_options()?;
    let bytes = read_body(call).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(options);
    }
    let encoding = body_encoding(content_type(call).or(Some("application/json")))?;
    let (body, _) = off_workers(bytes, move |b| read_object(b, encoding)).await??;
    let body: k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions =
        serde_json::from_value(body)
            .map_err(|e| Error::bad_request(format!("invalid DeleteOptions: {e}")))?;
    if let Some(dry_run) = body.dry_run {
        options.dry_run = delete_dry_run(&dry_run)?;
    }
    if let Some(p) = body.preconditions {
        options.precondition_uid = p.uid;
        options.precondition_resource_version = p.resource_version;
    }
    options.grace_period_seconds = body.grace_period_seconds.or(options.grace_period_seconds);
    options.propagation_policy = body.propagation_policy.or(options.propagation_policy);
    options.orphan_dependents = body.orphan_dependents.or(options.orphan_dependents);
    Ok(options)
}

pub(crate) async fn delete(mut call: Call) -> Result<Response> {
    let target = negotiate(accept_header(&call), Endpoint::Object)?;
    let deleter = require(&call.resource.storage.deleter, &call)?.clone();
    let options = delete_options(&mut call).await?;
    admit_with(&mut call, delete_options_json(&options));
    match deleter.delete(&call.ctx, &call.info.name, &options).await? {
        // kube answers 202 only when the object stays and the (deprecated) orphanDependents
        // was sent as false; otherwise 200 with the object, now carrying deletionTimestamp.
        DeleteOutcome::Pending(object) if options.orphan_dependents == Some(false) => {
            respond_object(&call, StatusCode::ACCEPTED, object)
        }
        DeleteOutcome::Pending(object) => respond_object(&call, StatusCode::OK, object),
        DeleteOutcome::Deleted(object) => {
            let uid = object::meta_str(&object, "uid").unwrap_or_default();
            let status = deleted_status(&call.resource.storage.info, &call.info.name, uid);
            // A Status is a plain object whatever shape the client asked for.
            respond(
                StatusCode::OK,
                Target {
                    shape: Shape::Object,
                    ..target
                },
                &status,
            )
        }
    }
}

pub(crate) async fn delete_collection(mut call: Call) -> Result<Response> {
    let target = negotiate(accept_header(&call), Endpoint::List)?;
    let deleter = require(&call.resource.storage.collection_deleter, &call)?.clone();
    let list_options = call.query.list_options()?;
    let options = delete_options(&mut call).await?;
    admit_with(&mut call, delete_options_json(&options));
    let deleted = deleter
        .delete_collection(&call.ctx, &options, &list_options)
        .await?;
    let include = call.query.include_object(target.shape)?;
    let info = &call.resource.storage.info;
    respond_list(
        StatusCode::OK,
        target,
        info,
        deleted,
        &call.resource.table,
        include,
    )
}
