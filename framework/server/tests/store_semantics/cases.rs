// The cases of store_semantics.rs and store_semantics_cached.rs; each defines WATCH_CACHE.

use std::sync::Arc;
use std::time::Duration;

use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::registry::context::RequestContext;
use extension_apiserver::registry::options::{
    DeleteOptions, GetOptions, ListOptions, ResourceVersionMatch, WriteOptions,
};
use extension_apiserver::registry::rest::{
    CollectionDeleter, Creater, DeleteOutcome, Getter, GracefulDeleter, Lister, ObjectList,
    UpdateFn, Updater, WatchEvent, WatchEventType, WatchStream, Watcher,
};
use extension_apiserver::registry::selector::{FieldSelector, LabelSelector};
use extension_apiserver::registry::store::Store;
use extension_apiserver::storage::{
    Backend, KeyValue, ListRequest, ListResult, MemoryBackend, ProgressStream, StorageError,
};
use extension_apiserver::{Error, FieldError, Resource};
use futures::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "test.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    selectable_field = ".spec.color",
    validate = validate_widget,
    defaults = default_widget
)]
pub struct Widget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WidgetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WidgetStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WidgetSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    /// Defaulted to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// A kind with kube's other strategy choices: unconditional updates and create on update
/// allowed, dependents orphaned by default.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "test.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    allow_unconditional_update,
    allow_create_on_update,
    garbage_collection = "OrphanDependents"
)]
pub struct Gadget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: WidgetSpec,
}

fn default_widget(w: &mut Widget) {
    if w.spec.size.is_none() {
        w.spec.size = Some(1);
    }
}

fn validate_widget(w: &Widget) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if w.spec.size.is_some_and(|s| s < 0) {
        errors.push(FieldError::invalid(
            "spec.size",
            w.spec.size,
            "must be non-negative",
        ));
    }
    if w.spec.color.as_deref() == Some("forbidden") {
        errors.push(FieldError::forbidden("spec.color", "that colour is taboo"));
    }
    errors
}

const WAIT: Duration = Duration::from_secs(5);

fn setup() -> (Store<Widget>, Arc<MemoryBackend>) {
    let backend = Arc::new(MemoryBackend::new());
    let store = Store::new(backend.clone(), "/registry");
    let store = if WATCH_CACHE {
        store.with_watch_cache()
    } else {
        store
    };
    (store, backend)
}

fn ns() -> RequestContext {
    RequestContext::namespaced("default")
}

fn widget(name: &str, labels: Value, color: &str) -> Value {
    json!({
        "apiVersion": "test.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": labels},
        "spec": {"color": color},
    })
}

async fn create(store: &Store<Widget>, ctx: &RequestContext, object: Value) -> Value {
    store
        .create(ctx, object, &WriteOptions::default())
        .await
        .expect("create")
        .into_value()
        .expect("the created object decodes")
}

async fn get(store: &Store<Widget>, name: &str) -> Result<Value, Error> {
    store.get(&ns(), name, &GetOptions::default()).await
}

/// An update that replaces the object with `object` whatever is stored.
fn replace(object: Value) -> UpdateFn {
    Arc::new(move |_| Ok(object.clone()))
}

/// An update that edits the stored object (keeping its resourceVersion).
fn edit(f: impl Fn(&mut Value) + Send + Sync + 'static) -> UpdateFn {
    Arc::new(move |current| {
        let mut object = current.cloned().expect("object exists");
        f(&mut object);
        Ok(object)
    })
}

async fn update(store: &Store<Widget>, name: &str, f: UpdateFn) -> Result<Value, Error> {
    Updater::update(store, &ns(), name, f, &WriteOptions::default())
        .await
        .map(|(o, _)| o)
}

async fn revision(backend: &MemoryBackend) -> i64 {
    backend.current_revision().await.unwrap()
}

fn rv(object: &Value) -> i64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .parse()
        .unwrap()
}

fn names(list: &ObjectList) -> Vec<String> {
    list.items
        .iter()
        .map(|o| {
            o.to_value().unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

fn labels(selector: &str) -> ListOptions {
    ListOptions {
        label_selector: Some(LabelSelector::parse(selector).unwrap()),
        ..ListOptions::default()
    }
}

fn fields(selector: &str) -> ListOptions {
    ListOptions {
        field_selector: Some(FieldSelector::parse(selector).unwrap()),
        ..ListOptions::default()
    }
}

async fn list(store: &Store<Widget>, ctx: &RequestContext, options: ListOptions) -> ObjectList {
    store.list(ctx, &options).await.expect("list")
}

/// A watch event with its object decoded, for assertions.
#[derive(Debug)]
struct Event {
    type_: WatchEventType,
    object: Value,
}

async fn next(stream: &mut WatchStream) -> Event {
    let event: WatchEvent = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("a watch event in time")
        .expect("the watch is still open");
    Event {
        type_: event.type_,
        object: event.object.into_value().expect("a JSON object"),
    }
}

/// The items of a list, decoded.
fn items(list: &ObjectList) -> Vec<Value> {
    list.items.iter().map(|o| o.to_value().unwrap()).collect()
}

/// Nothing arrives within a short while.
async fn quiet(stream: &mut WatchStream) {
    let got = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(got.is_err(), "unexpected watch item: {got:?}");
}

fn event_name(event: &Event) -> &str {
    event.object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
}

fn assert_error(result: Result<impl std::fmt::Debug, Error>, code: u16, reason: &str) -> Error {
    let error = result.expect_err("an error");
    assert_eq!((error.code(), error.reason()), (code, reason), "{error}");
    error
}

// ---------------------------------------------------------------- create

#[tokio::test]
async fn create_sets_server_fields_and_clears_status() {
    let (store, backend) = setup();
    let mut object = widget("a", json!({}), "red");
    object["status"] = json!({"phase": "Ready"});
    object["metadata"]["uid"] = json!("client-uid");
    object["metadata"]["generation"] = json!(9);
    let created = create(&store, &ns(), object).await;
    let meta = &created["metadata"];
    assert_ne!(meta["uid"], "client-uid");
    assert_eq!(meta["uid"].as_str().unwrap().len(), 36);
    assert!(meta["creationTimestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(meta["generation"], 1);
    assert_eq!(meta["namespace"], "default");
    assert_eq!(rv(&created), revision(&backend).await);
    assert!(
        created.get("status").is_none(),
        "status is cleared on create"
    );
    assert_eq!(created["spec"]["size"], 1, "defaults hook applied");
    assert_eq!(get(&store, "a").await.unwrap(), created);
}

#[tokio::test]
async fn create_with_generate_name() {
    let (store, _) = setup();
    let object = json!({"metadata": {"generateName": "gen-"}, "spec": {}});
    let a = create(&store, &ns(), object.clone()).await;
    let b = create(&store, &ns(), object).await;
    for o in [&a, &b] {
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("gen-") && name.len() == 4 + 5, "{name}");
        assert_eq!(o["metadata"]["generateName"], "gen-");
    }
    assert_ne!(a["metadata"]["name"], b["metadata"]["name"]);
}

#[tokio::test]
async fn create_dry_run_stores_nothing() {
    let (store, backend) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    let dry = WriteOptions {
        dry_run: true,
        ..WriteOptions::default()
    };
    let answer = store
        .create(&ns(), widget("b", json!({}), "red"), &dry)
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert_eq!(answer["metadata"]["name"], "b");
    assert_eq!(answer["spec"]["size"], 1);
    assert_eq!(revision(&backend).await, before);
    assert_eq!(
        names(&list(&store, &ns(), ListOptions::default()).await),
        ["a"]
    );
    assert_error(get(&store, "b").await, 404, "NotFound");
    // DryRunnableStorage.Create: a dry run of an existing name is AlreadyExists too.
    let clash = store
        .create(&ns(), widget("a", json!({}), "red"), &dry)
        .await;
    assert_error(clash, 409, "AlreadyExists");
}

#[tokio::test]
async fn create_errors() {
    let (store, _) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    let again = store
        .create(
            &ns(),
            widget("a", json!({}), "blue"),
            &WriteOptions::default(),
        )
        .await;
    let e = assert_error(again, 409, "AlreadyExists");
    assert_eq!(e.message(), "widgets.test.example.com \"a\" already exists");

    // A resourceVersion on a new object: kube's storage refuses it (a 500 without a reason,
    // which is what kubectl shows for `create -f` of an exported object).
    let mut versioned = widget("v", json!({}), "red");
    versioned["metadata"]["resourceVersion"] = json!("5");
    let e = assert_error(
        store
            .create(&ns(), versioned.clone(), &WriteOptions::default())
            .await,
        500,
        "",
    );
    assert_eq!(
        e.message(),
        "resourceVersion should not be set on objects to be created"
    );
    assert_error(get(&store, "v").await, 404, "NotFound");

    let mut elsewhere = widget("b", json!({}), "red");
    elsewhere["metadata"]["namespace"] = json!("other");
    let mismatch = store
        .create(&ns(), elsewhere, &WriteOptions::default())
        .await;
    assert_error(mismatch, 400, "BadRequest");

    let bad_name = store
        .create(
            &ns(),
            widget("Bad_Name", json!({}), "red"),
            &WriteOptions::default(),
        )
        .await;
    let e = assert_error(bad_name, 422, "Invalid");
    let causes = &e.status().details.as_ref().unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "metadata.name");
    assert_eq!(causes[0].reason, "FieldValueInvalid");

    let mut invalid = widget("c", json!({}), "forbidden");
    invalid["spec"]["size"] = json!(-1);
    let hooks = store.create(&ns(), invalid, &WriteOptions::default()).await;
    let e = assert_error(hooks, 422, "Invalid");
    let details = e.status().details.as_ref().unwrap();
    assert_eq!(
        (details.kind.as_str(), details.name.as_str()),
        ("Widget", "c")
    );
    let causes: Vec<_> = details
        .causes
        .iter()
        .map(|c| (c.field.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        causes,
        [
            ("spec.size", "FieldValueInvalid"),
            ("spec.color", "FieldValueForbidden")
        ]
    );
    assert_error(get(&store, "c").await, 404, "NotFound");
}

#[tokio::test]
async fn bodies_that_do_not_fit_the_type_are_invalid_per_field() {
    let (store, backend) = setup();
    let before = revision(&backend).await;
    // kube-apiserver validates a custom resource of this shape against its schema: 422, one
    // cause per field, in kube-openapi's words.
    let mut wrong = widget("t", json!({}), "red");
    wrong["spec"] = json!({"color": 5, "size": "big"});
    let e = assert_error(
        store.create(&ns(), wrong, &WriteOptions::default()).await,
        422,
        "Invalid",
    );
    assert_eq!(
        e.message(),
        r#"Widget.test.example.com "t" is invalid: [spec.color: Invalid value: "integer": spec.color in body must be of type string: "integer", spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"]"#
    );
    let details = e.status().details.clone().unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str(), details.name.as_str()),
        ("test.example.com", "Widget", "t")
    );
    let causes: Vec<_> = details
        .causes
        .iter()
        .map(|c| (c.field.as_str(), c.reason.as_str(), c.message.as_str()))
        .collect();
    assert_eq!(
        causes,
        [
            (
                "spec.color",
                "FieldValueTypeInvalid",
                r#"Invalid value: "integer": spec.color in body must be of type string: "integer""#
            ),
            (
                "spec.size",
                "FieldValueTypeInvalid",
                r#"Invalid value: "string": spec.size in body must be of type integer: "string""#
            ),
        ]
    );
    // What the schema does not say (an i32 out of range) is named at the field serde stopped.
    let mut huge = widget("h", json!({}), "red");
    huge["spec"]["size"] = json!(3_000_000_000u64);
    let e = assert_error(
        store.create(&ns(), huge, &WriteOptions::default()).await,
        422,
        "Invalid",
    );
    let cause = &e.status().details.as_ref().unwrap().causes[0];
    assert_eq!(cause.field, "spec.size");
    assert!(cause.message.starts_with("Invalid value: 3000000000: "), "{cause:?}");
    assert_eq!(revision(&backend).await, before);

    // An update (a patch reaches the store the same way) gets the same answer.
    create(&store, &ns(), widget("u", json!({}), "red")).await;
    let e = assert_error(
        update(&store, "u", edit(|o| o["spec"]["size"] = json!([1]))).await,
        422,
        "Invalid",
    );
    assert_eq!(
        e.message(),
        r#"Widget.test.example.com "u" is invalid: spec.size: Invalid value: "array": spec.size in body must be of type integer: "array""#
    );
}

/// A backend where every name is taken: creates fail with KeyExists, all else is memory's.
struct EveryNameTaken(MemoryBackend);

#[async_trait::async_trait]
impl Backend for EveryNameTaken {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        self.0.get(key).await
    }
    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        self.0.list(request).await
    }
    async fn create(&self, key: &str, _: bytes::Bytes) -> Result<KeyValue, StorageError> {
        Err(StorageError::KeyExists(key.to_string()))
    }
    async fn update(
        &self,
        key: &str,
        value: bytes::Bytes,
        expected: i64,
    ) -> Result<KeyValue, StorageError> {
        self.0.update(key, value, expected).await
    }
    async fn delete(&self, key: &str, expected: Option<i64>) -> Result<KeyValue, StorageError> {
        self.0.delete(key, expected).await
    }
    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: i64,
    ) -> Result<ProgressStream, StorageError> {
        self.0.watch_with_progress(prefix, after).await
    }
    async fn current_revision(&self) -> Result<i64, StorageError> {
        self.0.current_revision().await
    }
    async fn compact(&self, revision: i64) -> Result<(), StorageError> {
        self.0.compact(revision).await
    }
}

#[tokio::test]
async fn taken_names_are_already_exists_as_kube_words_them() {
    // Every generated name taken, eight times over: kube's NewGenerateNameConflict.
    let store = Store::<Widget>::new(Arc::new(EveryNameTaken(MemoryBackend::new())), "/registry");
    let mut generated = widget("", json!({}), "red");
    generated["metadata"] = json!({"generateName": "w-"});
    let e = assert_error(
        store.create(&ns(), generated, &WriteOptions::default()).await,
        409,
        "AlreadyExists",
    );
    assert!(
        e.message().starts_with("widgets.test.example.com \"w-")
            && e.message()
                .ends_with("\" already exists, the server was not allowed to generate a unique name"),
        "{e}"
    );
    let details = e.status().details.clone().unwrap();
    assert_eq!(details.retry_after_seconds, 1);
    assert!(details.name.starts_with("w-") && details.name.len() == 7, "{details:?}");

    // A name held by an object that waits for its finalizers: kube says it is being deleted.
    let (store, _) = setup();
    let mut held = widget("a", json!({}), "red");
    held["metadata"]["finalizers"] = json!(["test.example.com/hold"]);
    create(&store, &ns(), held).await;
    store.delete(&ns(), "a", &DeleteOptions::default()).await.unwrap();
    for dry_run in [false, true] {
        let options = WriteOptions {
            dry_run,
            ..WriteOptions::default()
        };
        let again = store.create(&ns(), widget("a", json!({}), "red"), &options).await;
        let e = assert_error(again, 409, "AlreadyExists");
        assert_eq!(
            e.message(),
            "object is being deleted: widgets.test.example.com \"a\" already exists"
        );
    }
}

// ---------------------------------------------------------------- update

#[tokio::test]
async fn update_with_stale_resource_version_conflicts() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    update(&store, "a", edit(|o| o["spec"]["color"] = json!("blue")))
        .await
        .unwrap();
    let before = revision(&backend).await;
    let mut stale = created.clone();
    stale["spec"]["color"] = json!("green");
    let e = assert_error(update(&store, "a", replace(stale)).await, 409, "Conflict");
    assert!(e.message().contains("the object has been modified"));
    assert_eq!(revision(&backend).await, before);
    assert_eq!(get(&store, "a").await.unwrap()["spec"]["color"], "blue");
}

#[tokio::test]
async fn update_without_resource_version_is_invalid_unless_the_kind_allows_it() {
    let (store, backend) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    // kube's Store.Update for a strategy without AllowUnconditionalUpdate (custom resources,
    // sample-apiserver): 422 on the resource, the missing version printed as Go's uint64 0.
    let blind = widget("a", json!({"x": "y"}), "green");
    let e = assert_error(update(&store, "a", replace(blind.clone())).await, 422, "Invalid");
    assert_eq!(
        e.message(),
        r#"widgets.test.example.com "a" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"#
    );
    let details = e.status().details.clone().unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str(), details.name.as_str()),
        ("test.example.com", "widgets", "a")
    );
    assert_eq!(details.causes[0].field, "metadata.resourceVersion");
    assert_eq!(details.causes[0].reason, "FieldValueInvalid");
    assert_eq!(
        details.causes[0].message,
        "Invalid value: 0x0: must be specified for an update"
    );
    // "0" is no version either, as kube reads it as a number.
    let mut zero = widget("a", json!({}), "green");
    zero["metadata"]["resourceVersion"] = json!("0");
    assert_error(update(&store, "a", replace(zero)).await, 422, "Invalid");
    // One that is no number fails kube's parse: a 500 without a reason.
    let mut word = widget("a", json!({}), "green");
    word["metadata"]["resourceVersion"] = json!("abc");
    let e = assert_error(update(&store, "a", replace(word)).await, 500, "");
    assert_eq!(
        e.message(),
        r#"strconv.ParseUint: parsing "abc": invalid syntax"#
    );
    // The status subresource too.
    let status = store.status_rest_storage().updater.unwrap();
    let blind_status = status
        .update(&ns(), "a", replace(blind), &WriteOptions::default())
        .await;
    assert_error(blind_status, 422, "Invalid");
    assert_eq!(revision(&backend).await, before);

    // A kind that allows it: the update applies to what is stored.
    let gadgets = Store::<Gadget>::new(backend.clone(), "/registry");
    let mut gadget = widget("g", json!({}), "red");
    gadget["kind"] = json!("Gadget");
    gadgets
        .create(&ns(), gadget.clone(), &WriteOptions::default())
        .await
        .unwrap();
    gadget["spec"]["color"] = json!("green");
    let (updated, _) = Updater::update(&gadgets, &ns(), "g", replace(gadget), &WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(updated["spec"]["color"], "green");
}

#[tokio::test]
async fn update_with_another_uid_is_a_precondition_conflict() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    let mut other = created.clone();
    other["metadata"]["uid"] = json!("6a7d4a62-0000-0000-0000-000000000000");
    // A PUT's body uid is a storage precondition in kube (defaultUpdatedObjectInfo): 409,
    // with the storage error's text, on the resource.
    let options = WriteOptions {
        precondition_uid: Some("6a7d4a62-0000-0000-0000-000000000000".into()),
        ..WriteOptions::default()
    };
    let e = Updater::update(&store, &ns(), "a", replace(other), &options).await;
    let e = assert_error(e, 409, "Conflict");
    let uid = created["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        e.message(),
        format!(
            "Operation cannot be fulfilled on widgets.test.example.com \"a\": StorageError: invalid object, Code: 4, Key: /registry/test.example.com/widgets/default/a, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: 6a7d4a62-0000-0000-0000-000000000000, UID in object meta: {uid}"
        )
    );
    let details = e.status().details.clone().unwrap();
    assert_eq!((details.group.as_str(), details.kind.as_str()), ("test.example.com", "widgets"));
    assert_eq!(revision(&backend).await, before);
}

#[tokio::test]
async fn generation_bumps_only_on_spec_change_and_status_is_kept() {
    let (store, _) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    let status = store.status_rest_storage().updater.unwrap();
    status
        .update(
            &ns(),
            "a",
            edit(|o| o["status"] = json!({"phase": "Ready"})),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    let labelled = update(
        &store,
        "a",
        edit(|o| o["metadata"]["labels"] = json!({"l": "v"})),
    )
    .await
    .unwrap();
    assert_eq!(labelled["metadata"]["generation"], 1);
    let changed = update(
        &store,
        "a",
        edit(|o| {
            o["spec"]["color"] = json!("blue");
            o["status"] = json!({"phase": "Changed"});
        }),
    )
    .await
    .unwrap();
    assert_eq!(changed["metadata"]["generation"], 2);
    assert_eq!(
        changed["status"]["phase"], "Ready",
        "main update keeps status"
    );
    // A status the main resource ignores cannot fail it, even one of the wrong shape (kube
    // validates a custom resource after its strategy put the stored status back).
    let ignored = update(&store, "a", edit(|o| o["status"] = json!({"phase": 5})))
        .await
        .unwrap();
    assert_eq!(ignored, changed);
}

#[tokio::test]
async fn status_update_changes_only_status() {
    let (store, _) = setup();
    let created = create(&store, &ns(), widget("a", json!({"l": "v"}), "red")).await;
    let status = store.status_rest_storage().updater.unwrap();
    let (updated, _) = status
        .update(
            &ns(),
            "a",
            edit(|o| {
                o["spec"]["color"] = json!("blue");
                o["metadata"]["labels"] = json!({"l": "changed"});
                o["status"] = json!({"phase": "Ready"});
            }),
            &WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(updated["status"]["phase"], "Ready");
    assert_eq!(updated["spec"], created["spec"]);
    assert_eq!(updated["metadata"]["labels"], created["metadata"]["labels"]);
    assert_eq!(updated["metadata"]["generation"], 1);
    assert!(rv(&updated) > rv(&created));
    // A stale resourceVersion on the status subresource conflicts too.
    let stale = status
        .update(&ns(), "a", replace(created), &WriteOptions::default())
        .await;
    assert_error(stale, 409, "Conflict");
}

#[tokio::test]
async fn no_op_update_keeps_resource_version() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    let same = update(&store, "a", replace(created.clone())).await.unwrap();
    assert_eq!(same, created);
    // The client leaves out a defaulted field: after defaulting nothing changed, so neither
    // the generation nor the resourceVersion may move (kube defaults before comparing).
    let undefaulted = update(
        &store,
        "a",
        edit(|o| {
            o["spec"].as_object_mut().unwrap().remove("size");
        }),
    )
    .await
    .unwrap();
    assert_eq!(undefaulted, created);
    assert_eq!(revision(&backend).await, before);
}

#[tokio::test]
async fn update_errors_and_dry_run() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let renamed = update(&store, "a", replace(widget("b", json!({}), "red"))).await;
    assert_error(renamed, 400, "BadRequest");
    let missing = update(&store, "nope", replace(widget("nope", json!({}), "red"))).await;
    assert_error(missing, 404, "NotFound");
    let invalid = update(&store, "a", edit(|o| o["spec"]["size"] = json!(-3))).await;
    assert_error(invalid, 422, "Invalid");

    let before = revision(&backend).await;
    let dry = WriteOptions {
        dry_run: true,
        ..WriteOptions::default()
    };
    let change = edit(|o| o["spec"]["color"] = json!("blue"));
    let (answer, _) = Updater::update(&store, &ns(), "a", change, &dry)
        .await
        .unwrap();
    assert_eq!(answer["spec"]["color"], "blue");
    assert_eq!(answer["metadata"]["generation"], 2);
    assert_eq!(revision(&backend).await, before);
    assert_eq!(get(&store, "a").await.unwrap(), created);
}

#[tokio::test]
async fn update_creates_a_missing_object_when_the_kind_allows_it() {
    let (_, backend) = setup();
    let gadgets = Store::<Gadget>::new(backend.clone(), "/registry");
    let gadget = |name: &str| {
        let mut gadget = widget(name, json!({}), "red");
        gadget["kind"] = json!("Gadget");
        gadget
    };
    let put = |store: &Store<Gadget>, name: &str, object: Value, options: WriteOptions| {
        let (store, name) = (store.clone(), name.to_string());
        async move { Updater::update(&store, &ns(), &name, replace(object), &options).await }
    };
    // A dry run answers what would be created and stores nothing.
    let before = revision(&backend).await;
    let dry = WriteOptions {
        dry_run: true,
        ..WriteOptions::default()
    };
    let (answer, created) = put(&gadgets, "g", gadget("g"), dry).await.unwrap();
    assert!(created);
    assert_eq!(answer["metadata"]["generation"], 1);
    assert_eq!(revision(&backend).await, before);

    // kube's Store.Update with AllowCreateOnUpdate: created as a create would, `true` (201).
    let (stored, created) = put(&gadgets, "g", gadget("g"), WriteOptions::default())
        .await
        .unwrap();
    assert!(created);
    assert_eq!(stored["metadata"]["generation"], 1);
    assert!(stored["metadata"]["uid"].is_string());
    assert!(stored["metadata"]["creationTimestamp"].is_string());
    let again = put(&gadgets, "g", gadget("g"), WriteOptions::default()).await;
    assert!(!again.unwrap().1, "the second PUT updates");

    // A body with a resourceVersion was meant for an object that is gone: 404.
    let mut stale = gadget("h");
    stale["metadata"]["resourceVersion"] = json!("7");
    assert_error(
        put(&gadgets, "h", stale, WriteOptions::default()).await.map(|(o, _)| o),
        404,
        "NotFound",
    );
    // The name is the URL's.
    assert_error(
        put(&gadgets, "h", gadget("i"), WriteOptions::default()).await.map(|(o, _)| o),
        400,
        "BadRequest",
    );
    // A patch (an update that needs the current object) never creates.
    let patch: UpdateFn = Arc::new(|current| {
        current
            .cloned()
            .ok_or_else(|| Error::not_found(&Gadget::INFO, "h"))
    });
    let patched = Updater::update(&gadgets, &ns(), "h", patch, &WriteOptions::default()).await;
    assert_error(patched.map(|(o, _)| o), 404, "NotFound");
}

#[tokio::test]
async fn update_cannot_change_server_managed_metadata() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    // Another incarnation's uid: refused, never silently replaced (kube: BeforeUpdate keeps a
    // given uid and ValidateObjectMetaUpdate finds it immutable).
    let other_uid = update(
        &store,
        "a",
        edit(|o| o["metadata"]["uid"] = json!("6a7d4a62-0000-0000-0000-000000000000")),
    )
    .await;
    let e = assert_error(other_uid, 422, "Invalid");
    let causes = &e.status().details.as_ref().unwrap().causes;
    assert_eq!(causes[0].field, "metadata.uid");
    let deleting = update(
        &store,
        "a",
        edit(|o| o["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z")),
    )
    .await;
    assert_error(deleting, 422, "Invalid");
    assert_eq!(revision(&backend).await, before);
    // Generation and creationTimestamp are put back silently; a missing uid is filled in.
    let rewritten = update(
        &store,
        "a",
        edit(|o| {
            let meta = o["metadata"].as_object_mut().unwrap();
            meta.remove("uid");
            meta.insert("generation".into(), json!(40));
            meta.insert("creationTimestamp".into(), json!("2000-01-01T00:00:00Z"));
        }),
    )
    .await
    .unwrap();
    assert_eq!(rewritten, created);
}

// ---------------------------------------------------------------- delete

#[tokio::test]
async fn delete_preconditions() {
    let (store, _) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let wrong_uid = DeleteOptions {
        precondition_uid: Some("not-the-uid".into()),
        ..DeleteOptions::default()
    };
    // kube's BeforeDelete: a Conflict that names the kind, not the resource.
    let e = assert_error(store.delete(&ns(), "a", &wrong_uid).await, 409, "Conflict");
    assert_eq!(
        e.message(),
        format!("Operation cannot be fulfilled on Widget.test.example.com \"a\": the UID in the precondition (not-the-uid) does not match the UID in record ({uid}). The object might have been deleted and then recreated")
    );
    let details = e.status().details.clone().unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str(), details.name.as_str()),
        ("test.example.com", "Widget", "a")
    );
    let wrong_rv = DeleteOptions {
        precondition_resource_version: Some("1234".into()),
        ..DeleteOptions::default()
    };
    let e = assert_error(store.delete(&ns(), "a", &wrong_rv).await, 409, "Conflict");
    assert_eq!(
        e.message(),
        format!("Operation cannot be fulfilled on Widget.test.example.com \"a\": the ResourceVersion in the precondition (1234) does not match the ResourceVersion in record ({rv}). The object might have been modified")
    );
    assert_eq!(get(&store, "a").await.unwrap(), created);

    let right = DeleteOptions {
        precondition_uid: Some(uid),
        precondition_resource_version: Some(rv),
        ..DeleteOptions::default()
    };
    let outcome = store.delete(&ns(), "a", &right).await.unwrap();
    assert!(matches!(outcome, DeleteOutcome::Deleted(_)));
    assert_error(get(&store, "a").await, 404, "NotFound");
    let again = store.delete(&ns(), "a", &DeleteOptions::default()).await;
    assert_error(again, 404, "NotFound");
}

#[tokio::test]
async fn delete_with_finalizers_waits_for_them() {
    let (store, backend) = setup();
    let mut object = widget("a", json!({}), "red");
    object["metadata"]["finalizers"] = json!(["test.example.com/hold"]);
    create(&store, &ns(), object).await;
    let pending = match store.delete(&ns(), "a", &DeleteOptions::default()).await {
        Ok(DeleteOutcome::Pending(o)) => o,
        other => panic!("expected Pending, got {other:?}"),
    };
    assert!(pending["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(pending["metadata"]["deletionGracePeriodSeconds"], 0);
    // markAsDeleting bumps the generation of kinds without graceful deletion.
    assert_eq!(pending["metadata"]["generation"], 2);
    assert_eq!(get(&store, "a").await.unwrap(), pending);
    // A second delete changes nothing and is still pending.
    let again = store.delete(&ns(), "a", &DeleteOptions::default()).await;
    assert!(matches!(again, Ok(DeleteOutcome::Pending(o)) if o == pending));

    let watch_from = ListOptions {
        resource_version: Some(revision(&backend).await.to_string()),
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &watch_from).await.unwrap();
    let last = update(
        &store,
        "a",
        edit(|o| o["metadata"]["finalizers"] = json!([])),
    )
    .await
    .unwrap();
    // kube answers the write that removes the last finalizer with the object as that write
    // made it: no finalizers left.
    assert_eq!(last["metadata"]["finalizers"], json!([]));
    assert_eq!(last["metadata"]["deletionTimestamp"], pending["metadata"]["deletionTimestamp"]);
    assert_error(get(&store, "a").await, 404, "NotFound");
    let deleted = next(&mut events).await;
    assert_eq!(deleted.type_, WatchEventType::Deleted);
    assert_eq!(event_name(&deleted), "a");
    assert_eq!(rv(&deleted.object), revision(&backend).await);
}

fn propagation(policy: &str) -> DeleteOptions {
    DeleteOptions {
        propagation_policy: Some(policy.into()),
        ..DeleteOptions::default()
    }
}

async fn pending(store: &Store<Widget>, name: &str, options: &DeleteOptions) -> Value {
    match store.delete(&ns(), name, options).await {
        Ok(DeleteOutcome::Pending(o)) => o,
        other => panic!("expected Pending, got {other:?}"),
    }
}

#[tokio::test]
async fn delete_sets_the_garbage_collectors_finalizers() {
    let (store, backend) = setup();
    // Foreground: kept with foregroundDeletion after the object's own finalizers.
    let mut held = widget("fg", json!({}), "red");
    held["metadata"]["finalizers"] = json!(["test.example.com/hold"]);
    create(&store, &ns(), held).await;
    let fg = pending(&store, "fg", &propagation("Foreground")).await;
    assert_eq!(
        fg["metadata"]["finalizers"],
        json!(["test.example.com/hold", "foregroundDeletion"])
    );
    assert!(fg["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(get(&store, "fg").await.unwrap(), fg);
    // Asked again with Orphan while being deleted: the finalizers follow the new request, the
    // deletionTimestamp and generation stay.
    let orphaned = pending(&store, "fg", &propagation("Orphan")).await;
    assert_eq!(
        orphaned["metadata"]["finalizers"],
        json!(["test.example.com/hold", "orphan"])
    );
    assert_eq!(orphaned["metadata"]["deletionTimestamp"], fg["metadata"]["deletionTimestamp"]);
    assert_eq!(orphaned["metadata"]["generation"], fg["metadata"]["generation"]);

    // Orphan on an object without finalizers: it stays, with `orphan`.
    create(&store, &ns(), widget("o", json!({}), "red")).await;
    let o = pending(&store, "o", &propagation("Orphan")).await;
    assert_eq!(o["metadata"]["finalizers"], json!(["orphan"]));
    // The deprecated orphanDependents=true is the same.
    create(&store, &ns(), widget("od", json!({}), "red")).await;
    let legacy = DeleteOptions {
        orphan_dependents: Some(true),
        ..DeleteOptions::default()
    };
    let od = pending(&store, "od", &legacy).await;
    assert_eq!(od["metadata"]["finalizers"], json!(["orphan"]));
    // Background removes the garbage collector's finalizers, so the object goes at once.
    let gone = store.delete(&ns(), "o", &propagation("Background")).await;
    assert!(matches!(gone, Ok(DeleteOutcome::Deleted(_))), "{gone:?}");
    assert_error(get(&store, "o").await, 404, "NotFound");
    // No policy: deleted at once (the kind's default is DeleteDependents, in the background).
    create(&store, &ns(), widget("plain", json!({}), "red")).await;
    let plain = store.delete(&ns(), "plain", &DeleteOptions::default()).await;
    assert!(matches!(plain, Ok(DeleteOutcome::Deleted(_))));

    // A policy kube does not know: 422 on DeleteOptions, before the object is even read.
    let before = revision(&backend).await;
    for name in ["fg", "missing"] {
        let e = assert_error(store.delete(&ns(), name, &propagation("Sideways")).await, 422, "Invalid");
        assert_eq!(
            e.message(),
            r#"DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", "nil""#
        );
    }
    assert_eq!(revision(&backend).await, before);

    // A kind whose default is OrphanDependents gets `orphan` without being asked.
    let gadgets = Store::<Gadget>::new(backend.clone(), "/registry");
    let mut gadget = widget("g", json!({}), "red");
    gadget["kind"] = json!("Gadget");
    gadgets
        .create(&ns(), gadget, &WriteOptions::default())
        .await
        .unwrap();
    match gadgets.delete(&ns(), "g", &DeleteOptions::default()).await {
        Ok(DeleteOutcome::Pending(g)) => assert_eq!(g["metadata"]["finalizers"], json!(["orphan"])),
        other => panic!("expected Pending, got {other:?}"),
    }
}

#[tokio::test]
async fn delete_dry_run_with_finalizers_answers_the_marked_object() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    let dry = DeleteOptions {
        dry_run: true,
        ..propagation("Foreground")
    };
    let answer = pending(&store, "a", &dry).await;
    assert_eq!(answer["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    assert!(answer["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(revision(&backend).await, before);
    assert_eq!(get(&store, "a").await.unwrap(), created);
}

#[tokio::test]
async fn delete_dry_run_keeps_the_object() {
    let (store, backend) = setup();
    let created = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let before = revision(&backend).await;
    let dry = DeleteOptions {
        dry_run: true,
        ..DeleteOptions::default()
    };
    let outcome = store.delete(&ns(), "a", &dry).await.unwrap();
    assert!(matches!(outcome, DeleteOutcome::Deleted(o) if o == created));
    assert_eq!(revision(&backend).await, before);
    assert_eq!(get(&store, "a").await.unwrap(), created);
    assert_error(store.delete(&ns(), "b", &dry).await, 404, "NotFound");
}

#[tokio::test]
async fn delete_collection_deletes_only_the_selected() {
    let (store, _) = setup();
    for (name, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
        create(&store, &ns(), widget(name, json!({"app": app}), "red")).await;
    }
    let other = RequestContext::namespaced("other");
    create(&store, &other, widget("d", json!({"app": "web"}), "red")).await;
    let deleted = store
        .delete_collection(&ns(), &DeleteOptions::default(), &labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(&deleted), ["a", "c"]);
    // kube answers the list as it was read, before the deletes.
    assert!(items(&deleted)
        .iter()
        .all(|o| o["metadata"].get("deletionTimestamp").is_none()));
    assert_eq!(
        names(&list(&store, &ns(), ListOptions::default()).await),
        ["b"]
    );
    assert_eq!(
        names(&list(&store, &other, ListOptions::default()).await),
        ["d"]
    );
}

// ---------------------------------------------------------------- list

async fn labelled_set(store: &Store<Widget>) {
    create(
        store,
        &ns(),
        widget("a", json!({"app": "web", "tier": "fe"}), "red"),
    )
    .await;
    create(store, &ns(), widget("b", json!({"app": "db"}), "blue")).await;
    create(store, &ns(), widget("c", json!({}), "red")).await;
    let other = RequestContext::namespaced("other");
    create(store, &other, widget("d", json!({"app": "web"}), "green")).await;
}

#[tokio::test]
async fn list_label_selectors() {
    let (store, _) = setup();
    labelled_set(&store).await;
    let cases: [(&str, &[&str]); 7] = [
        ("app=web", &["a"]),
        ("app!=web", &["b", "c"]),
        ("app in (web,db)", &["a", "b"]),
        ("app notin (web)", &["b", "c"]),
        ("app", &["a", "b"]),
        ("!app", &["c"]),
        ("app=web,tier=fe", &["a"]),
    ];
    for (selector, expected) in cases {
        let got = names(&list(&store, &ns(), labels(selector)).await);
        assert_eq!(got, expected, "{selector}");
    }
}

#[tokio::test]
async fn list_field_selectors_and_namespaces() {
    let (store, _) = setup();
    labelled_set(&store).await;
    let all = RequestContext::cluster();
    assert_eq!(
        names(&list(&store, &all, ListOptions::default()).await),
        ["a", "b", "c", "d"]
    );
    assert_eq!(
        names(&list(&store, &ns(), ListOptions::default()).await),
        ["a", "b", "c"]
    );
    let cases: [(&str, &[&str]); 5] = [
        ("metadata.name=b", &["b"]),
        ("metadata.namespace=other", &["d"]),
        ("metadata.namespace!=other", &["a", "b", "c"]),
        ("spec.color=red", &["a", "c"]),
        ("spec.color!=red,metadata.name!=b", &["d"]),
    ];
    for (selector, expected) in cases {
        let got = names(&list(&store, &all, fields(selector)).await);
        assert_eq!(got, expected, "{selector}");
    }
    let unknown = store.list(&all, &fields("spec.size=1")).await;
    assert_error(unknown, 400, "BadRequest");
    let watch_unknown = store.watch(&all, &fields("status.phase=x")).await;
    assert_error(watch_unknown.map(|_| ()), 400, "BadRequest");
}

#[tokio::test]
async fn paginated_list_is_consistent_while_objects_change() {
    let (store, backend) = setup();
    for i in 0..10 {
        create(&store, &ns(), widget(&format!("w{i:02}"), json!({}), "red")).await;
    }
    let snapshot = revision(&backend).await;
    let mut options = ListOptions {
        limit: 3,
        ..ListOptions::default()
    };
    let mut seen = Vec::new();
    let mut remaining = Vec::new();
    let mut page = 0;
    loop {
        let result = list(&store, &ns(), options.clone()).await;
        assert_eq!(result.resource_version, snapshot.to_string());
        seen.extend(names(&result));
        remaining.push(result.remaining_item_count);
        // Change the collection between pages: none of it may show up.
        store
            .delete(
                &ns(),
                &format!("w{:02}", 9 - page),
                &DeleteOptions::default(),
            )
            .await
            .unwrap();
        create(
            &store,
            &ns(),
            widget(&format!("w{page:02}x"), json!({}), "red"),
        )
        .await;
        page += 1;
        match result.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => break,
        }
    }
    let expected: Vec<String> = (0..10).map(|i| format!("w{i:02}")).collect();
    assert_eq!(seen, expected);
    assert_eq!(remaining, [Some(7), Some(4), Some(1), None]);
}

#[tokio::test]
async fn paginated_list_with_selector_has_no_remaining_count() {
    let (store, _) = setup();
    for i in 0..6 {
        let app = if i % 2 == 0 { "web" } else { "db" };
        create(
            &store,
            &ns(),
            widget(&format!("w{i}"), json!({"app": app}), "red"),
        )
        .await;
    }
    let mut options = labels("app=web");
    options.limit = 2;
    let first = list(&store, &ns(), options.clone()).await;
    assert_eq!(names(&first), ["w0", "w2"]);
    assert_eq!(first.remaining_item_count, None);
    options.continue_token = first.continue_token;
    let second = list(&store, &ns(), options).await;
    assert_eq!(names(&second), ["w4"]);
    assert_eq!(second.continue_token, None);
}

#[tokio::test]
async fn continue_after_compaction_is_expired() {
    let (store, backend) = setup();
    for i in 0..4 {
        create(&store, &ns(), widget(&format!("w{i}"), json!({}), "red")).await;
    }
    let first = list(
        &store,
        &ns(),
        ListOptions {
            limit: 2,
            ..ListOptions::default()
        },
    )
    .await;
    create(&store, &ns(), widget("late", json!({}), "red")).await;
    backend.compact(revision(&backend).await).await.unwrap();
    let options = ListOptions {
        limit: 2,
        continue_token: first.continue_token,
        ..ListOptions::default()
    };
    assert_error(store.list(&ns(), &options).await, 410, "Expired");

    let bad = ListOptions {
        continue_token: Some("not a token".into()),
        ..ListOptions::default()
    };
    assert_error(store.list(&ns(), &bad).await, 400, "BadRequest");
}

#[tokio::test]
async fn list_at_exact_old_revision_shows_old_state() {
    let (store, backend) = setup();
    let a = create(&store, &ns(), widget("a", json!({}), "red")).await;
    update(&store, "a", edit(|o| o["spec"]["color"] = json!("blue")))
        .await
        .unwrap();
    create(&store, &ns(), widget("b", json!({}), "red")).await;
    let old = ListOptions {
        resource_version: Some(rv(&a).to_string()),
        resource_version_match: ResourceVersionMatch::Exact,
        ..ListOptions::default()
    };
    let result = list(&store, &ns(), old.clone()).await;
    assert_eq!(result.resource_version, rv(&a).to_string());
    assert_eq!(names(&result), ["a"]);
    assert_eq!(items(&result)[0]["spec"]["color"], "red");
    backend.compact(revision(&backend).await).await.unwrap();
    let e = assert_error(store.list(&ns(), &old).await, 410, "Expired");
    assert_eq!(
        e.message(),
        "The resourceVersion for the provided list is too old."
    );
}

#[tokio::test]
async fn list_at_future_revision_times_out() {
    let (store, backend) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    let future = ListOptions {
        resource_version: Some((revision(&backend).await + 100).to_string()),
        ..ListOptions::default()
    };
    let result = tokio::time::timeout(Duration::from_secs(10), store.list(&ns(), &future))
        .await
        .expect("the list gives up by itself");
    let e = assert_error(result, 504, "Timeout");
    assert!(e.message().starts_with("Too large resource version"));
    assert_eq!(e.status().details.as_ref().unwrap().retry_after_seconds, 1);
}

// ---------------------------------------------------------------- watch

#[tokio::test]
async fn watch_from_resource_version_sends_only_later_events() {
    let (store, _) = setup();
    let a = create(&store, &ns(), widget("a", json!({}), "red")).await;
    create(&store, &ns(), widget("b", json!({}), "red")).await;
    let options = ListOptions {
        resource_version: Some(rv(&a).to_string()),
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    let added = next(&mut events).await;
    assert_eq!(
        (added.type_, event_name(&added)),
        (WatchEventType::Added, "b")
    );
    let updated = update(&store, "a", edit(|o| o["spec"]["color"] = json!("blue")))
        .await
        .unwrap();
    let modified = next(&mut events).await;
    assert_eq!(modified.type_, WatchEventType::Modified);
    assert_eq!(modified.object, updated);
    quiet(&mut events).await;
}

#[tokio::test]
async fn watch_without_resource_version_starts_with_existing_objects() {
    let (store, _) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    create(&store, &ns(), widget("b", json!({}), "red")).await;
    create(
        &store,
        &RequestContext::namespaced("other"),
        widget("z", json!({}), "red"),
    )
    .await;
    let mut events = store.watch(&ns(), &ListOptions::default()).await.unwrap();
    for name in ["a", "b"] {
        let e = next(&mut events).await;
        assert_eq!((e.type_, event_name(&e)), (WatchEventType::Added, name));
    }
    create(&store, &ns(), widget("c", json!({}), "red")).await;
    let e = next(&mut events).await;
    assert_eq!((e.type_, event_name(&e)), (WatchEventType::Added, "c"));
}

#[tokio::test]
async fn watch_selector_transitions() {
    let (store, backend) = setup();
    let options = ListOptions {
        resource_version: Some(revision(&backend).await.to_string()),
        ..labels("app=web")
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    create(&store, &ns(), widget("x", json!({"app": "db"}), "red")).await;
    let web = update(
        &store,
        "x",
        edit(|o| o["metadata"]["labels"]["app"] = json!("web")),
    )
    .await
    .unwrap();
    let e = next(&mut events).await;
    assert_eq!(e.type_, WatchEventType::Added, "moved into the selection");
    assert_eq!(e.object, web);
    let db = update(
        &store,
        "x",
        edit(|o| o["metadata"]["labels"]["app"] = json!("db")),
    )
    .await
    .unwrap();
    let e = next(&mut events).await;
    assert_eq!(
        e.type_,
        WatchEventType::Deleted,
        "moved out of the selection"
    );
    // The cacher sends the last state that matched, at the event's resourceVersion.
    assert_eq!(e.object["metadata"]["labels"]["app"], "web");
    assert_eq!(rv(&e.object), rv(&db));
    store
        .delete(&ns(), "x", &DeleteOptions::default())
        .await
        .unwrap();
    quiet(&mut events).await;
}

#[tokio::test]
async fn watch_deleted_carries_last_state_at_delete_revision() {
    let (store, backend) = setup();
    create(&store, &ns(), widget("a", json!({"l": "v"}), "red")).await;
    let options = ListOptions {
        resource_version: Some(revision(&backend).await.to_string()),
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    let outcome = store
        .delete(&ns(), "a", &DeleteOptions::default())
        .await
        .unwrap();
    let DeleteOutcome::Deleted(deleted) = outcome else {
        panic!("expected Deleted");
    };
    assert_eq!(rv(&deleted), revision(&backend).await);
    let e = next(&mut events).await;
    assert_eq!(e.type_, WatchEventType::Deleted);
    assert_eq!(e.object, deleted);
    assert_eq!(e.object["metadata"]["labels"]["l"], "v");
}

#[tokio::test]
async fn watch_timeout_ends_the_stream() {
    let (store, _) = setup();
    let options = ListOptions {
        timeout_seconds: Some(1),
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    let end = tokio::time::timeout(WAIT, events.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn watch_bookmarks_only_when_allowed() {
    let (store, backend) = setup();
    let store = store.with_bookmark_interval(Duration::from_millis(100));
    let a = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let from = ListOptions {
        resource_version: Some(rv(&a).to_string()),
        ..ListOptions::default()
    };
    let mut plain = store.watch(&ns(), &from).await.unwrap();
    let with = ListOptions {
        allow_watch_bookmarks: true,
        ..from
    };
    let mut bookmarked = store.watch(&ns(), &with).await.unwrap();
    let e = next(&mut bookmarked).await;
    assert_eq!(e.type_, WatchEventType::Bookmark);
    assert_eq!(rv(&e.object), revision(&backend).await);
    assert_eq!(e.object["kind"], "Widget");
    assert_eq!(e.object["apiVersion"], "test.example.com/v1");
    quiet(&mut plain).await;
}

#[tokio::test]
async fn watch_gets_a_bookmark_right_before_its_timeout() {
    let (store, backend) = setup();
    let a = create(&store, &ns(), widget("a", json!({}), "red")).await;
    let options = ListOptions {
        resource_version: Some(rv(&a).to_string()),
        allow_watch_bookmarks: true,
        timeout_seconds: Some(3),
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    // The cacher's nextBookmarkTime: 2 s before the deadline (long before the 60 s interval),
    // then the end of the stream.
    let e = next(&mut events).await;
    assert_eq!(e.type_, WatchEventType::Bookmark);
    assert_eq!(rv(&e.object), revision(&backend).await);
    let end = tokio::time::timeout(WAIT, events.next()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn send_initial_events_ends_with_annotated_bookmark() {
    let (store, backend) = setup();
    create(&store, &ns(), widget("a", json!({}), "red")).await;
    create(&store, &ns(), widget("b", json!({}), "red")).await;
    let options = ListOptions {
        send_initial_events: Some(true),
        allow_watch_bookmarks: true,
        resource_version_match: ResourceVersionMatch::NotOlderThan,
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    for name in ["a", "b"] {
        let e = next(&mut events).await;
        assert_eq!((e.type_, event_name(&e)), (WatchEventType::Added, name));
    }
    let end = next(&mut events).await;
    assert_eq!(end.type_, WatchEventType::Bookmark);
    assert_eq!(
        end.object["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(rv(&end.object), revision(&backend).await);
    create(&store, &ns(), widget("c", json!({}), "red")).await;
    let e = next(&mut events).await;
    assert_eq!((e.type_, event_name(&e)), (WatchEventType::Added, "c"));
}

#[tokio::test]
async fn watch_from_compacted_revision_is_expired() {
    let (store, backend) = setup();
    let a = create(&store, &ns(), widget("a", json!({}), "red")).await;
    for color in ["blue", "green", "white"] {
        update(
            &store,
            "a",
            edit(move |o| o["spec"]["color"] = json!(color)),
        )
        .await
        .unwrap();
    }
    backend.compact(revision(&backend).await).await.unwrap();
    let options = ListOptions {
        resource_version: Some(rv(&a).to_string()),
        ..ListOptions::default()
    };
    let mut events = store.watch(&ns(), &options).await.unwrap();
    let e = next(&mut events).await;
    assert_eq!(e.type_, WatchEventType::Error);
    assert_eq!(e.object["kind"], "Status");
    assert_eq!(e.object["code"], 410);
    assert_eq!(e.object["reason"], "Expired");
    let end = tokio::time::timeout(WAIT, events.next()).await;
    assert!(matches!(end, Ok(None)), "the stream ends after the error");
}

/// `get_object` (what a JSON get sends: the stored or cached bytes as they are) agrees with
/// `get` at every step, and is consistent: a write is visible to the next read.
#[tokio::test]
async fn get_object_agrees_with_get() {
    let (store, _backend) = setup();
    let object = |store: Store<Widget>| async move {
        store
            .get_object(&ns(), "a", &GetOptions::default())
            .await
            .and_then(|o| o.into_value())
    };
    assert_error(object(store.clone()).await, 404, "NotFound");
    let created = create(&store, &ns(), widget("a", json!({"x": "1"}), "red")).await;
    assert_eq!(object(store.clone()).await.unwrap(), created);
    for color in ["blue", "green", "cyan"] {
        let updated = update(&store, "a", edit(move |o| o["spec"]["color"] = json!(color)))
            .await
            .unwrap();
        let read = object(store.clone()).await.unwrap();
        assert_eq!(read, updated);
        assert_eq!(read, get(&store, "a").await.unwrap());
    }
    store
        .delete(&ns(), "a", &DeleteOptions::default())
        .await
        .unwrap();
    assert_error(object(store.clone()).await, 404, "NotFound");
}

/// Writes elsewhere (another namespace) between pages: every page is still at the first
/// page's revision (with the watch cache, later pages come from it: nothing changed in the
/// listed namespace).
#[tokio::test]
async fn paginated_list_with_writes_in_another_namespace() {
    let (store, backend) = setup();
    for i in 0..7 {
        create(&store, &ns(), widget(&format!("w{i}"), json!({}), "red")).await;
    }
    let snapshot = revision(&backend).await;
    let other = RequestContext::namespaced("other");
    let mut options = ListOptions {
        limit: 3,
        ..ListOptions::default()
    };
    let (mut seen, mut remaining) = (Vec::new(), Vec::new());
    for page in 0..4 {
        let result = list(&store, &ns(), options.clone()).await;
        assert_eq!(result.resource_version, snapshot.to_string());
        seen.extend(names(&result));
        remaining.push(result.remaining_item_count);
        create(&store, &other, widget(&format!("o{page}"), json!({}), "red")).await;
        match result.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => break,
        }
    }
    assert_eq!(seen, ["w0", "w1", "w2", "w3", "w4", "w5", "w6"]);
    assert_eq!(remaining, [Some(4), Some(1), None]);
}
