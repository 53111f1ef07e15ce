//! In-process admission plugins on every write verb of a whole server over TLS: create,
//! update, patch, delete, deletecollection, status and scale writes, dry run, generated
//! names, a retry after a lost compare-and-swap, and the admission flags.

use std::sync::{Arc, Mutex};

use extension_apiserver::admission::{
    AdmissionPlugin, Attributes, MutatingAdmissionPlugin, Operation, Plugin,
};
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::{APIGroup, APIServer, ServerOptions};
use extension_apiserver::{Resource, async_trait};
use extension_apiserver_testing::TestServer;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "admission.example.com",
    version = "v1",
    kind = "Gizmo",
    namespaced,
    status = "GizmoStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    )
)]
pub struct Gizmo {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: GizmoSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GizmoStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct GizmoSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub color: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct GizmoStatus {
    #[serde(default)]
    pub replicas: i32,
}

/// What a plugin saw of one call.
#[derive(Clone, Debug)]
struct Seen {
    step: &'static str,
    operation: Operation,
    subresource: String,
    kind: String,
    name: String,
    user: String,
    dry_run: bool,
    options_kind: String,
    object: Option<Value>,
    old_object: Option<Value>,
}

/// Records every call; mutates (a label on gizmos, replicas capped at 5 through the scale
/// subresource); refuses names starting with `deny-` and deletes of `protected` gizmos.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    /// A client of the server itself, to write the object under admission once (a race).
    racer: Arc<Mutex<Option<kube::Client>>>,
}

impl Recorder {
    fn record(&self, step: &'static str, a: &Attributes) {
        self.seen.lock().unwrap().push(Seen {
            step,
            operation: a.operation,
            subresource: a.subresource.clone(),
            kind: a.kind.kind.clone(),
            name: a.name.clone(),
            user: a.user.name.clone(),
            dry_run: a.dry_run,
            options_kind: a.options["kind"].as_str().unwrap_or_default().into(),
            object: a.object.clone(),
            old_object: a.old_object.clone(),
        });
    }

    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

#[async_trait]
impl AdmissionPlugin for Recorder {
    fn name(&self) -> &str {
        "Recorder"
    }

    async fn validate(&self, a: &Attributes) -> extension_apiserver::Result<()> {
        self.record("validate", a);
        let name = a
            .object
            .as_ref()
            .and_then(|o| o["metadata"]["name"].as_str())
            .unwrap_or(&a.name)
            .to_string();
        if name.starts_with("deny-") {
            return Err(a.forbidden("names starting with deny- are refused"));
        }
        let protected = a
            .old_object
            .as_ref()
            .is_some_and(|o| o["metadata"]["labels"]["protected"] == "true");
        if a.operation == Operation::Delete && protected {
            return Err(a.forbidden("protected"));
        }
        let racer = self.racer.lock().unwrap().take();
        if let (Some(client), "raced", Operation::Update) = (racer, name.as_str(), a.operation) {
            // Another write lands between this attempt's read and its compare-and-swap.
            let api: Api<Gizmo> = Api::namespaced(client, "default");
            let patch = Patch::Merge(json!({"spec": {"color": "from-the-race"}}));
            api.patch("raced", &PatchParams::default(), &patch)
                .await
                .map_err(extension_apiserver::Error::internal)?;
        }
        Ok(())
    }
}

#[async_trait]
impl MutatingAdmissionPlugin for Recorder {
    async fn admit(&self, a: &mut Attributes) -> extension_apiserver::Result<()> {
        self.record("admit", a);
        if a.subresource == "scale" {
            let object = a.object.as_mut().expect("a scale write has a Scale");
            if object["spec"]["replicas"].as_i64().unwrap_or(0) > 5 {
                object["spec"]["replicas"] = json!(5);
            }
        } else if a.is::<Gizmo>() {
            if let Some(mut gizmo) = a.object_as::<Gizmo>()? {
                let labels = gizmo.metadata.labels.get_or_insert_with(Default::default);
                labels.insert("admitted".into(), "yes".into());
                a.set_object(&gizmo)?;
            }
        }
        Ok(())
    }
}

fn group() -> APIGroup {
    APIGroup::new("admission.example.com").version("v1", |v| v.resource::<Gizmo>())
}

async fn start(
    recorder: &Recorder,
    configure: impl FnOnce(&mut ServerOptions),
) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut options = TestServer::options(dir.path());
    options.storage_backend = extension_apiserver::server::StorageBackendKind::Memory;
    configure(&mut options);
    let plugin = recorder.clone();
    let server = TestServer::start_configured(options, move |server: APIServer| {
        server
            .group(group())
            .admission_plugin(move |_| Plugin::mutating(plugin.clone()))
    })
    .await;
    (server, dir)
}

fn gizmo(name: &str, labels: Value) -> Gizmo {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"replicas": 1, "color": "red"},
    }))
    .unwrap()
}

fn labels(g: &Gizmo) -> Value {
    json!(g.metadata.labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_on_every_write_verb() {
    let recorder = Recorder::default();
    let (server, _dir) = start(&recorder, |_| {}).await;
    let api: Api<Gizmo> = Api::namespaced(server.client(), "default");

    // create: mutated before the strategy, validated as stored (uid set).
    let created = api
        .create(&PostParams::default(), &gizmo("a", json!({})))
        .await
        .unwrap();
    assert_eq!(labels(&created), json!({"admitted": "yes"}));
    let seen = recorder.take();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].step, seen[0].operation),
        ("admit", Operation::Create)
    );
    assert_eq!(
        (seen[1].step, seen[1].operation),
        ("validate", Operation::Create)
    );
    assert!(seen[0].object.as_ref().unwrap()["metadata"]["uid"].is_null());
    assert!(seen[1].object.as_ref().unwrap()["metadata"]["uid"].is_string());
    assert!(
        seen.iter()
            .all(|s| s.old_object.is_none() && s.kind == "Gizmo")
    );
    assert!(
        seen.iter()
            .all(|s| s.options_kind == "CreateOptions" && !s.dry_run)
    );
    assert!(
        seen.iter().all(|s| !s.user.is_empty()),
        "the user reaches plugins"
    );

    // update (PUT) without the label: the mutating plugin puts it back; old object given.
    let mut replaced = created.clone();
    replaced.metadata.labels = None;
    replaced.spec.color = "blue".into();
    let updated = api
        .replace("a", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(labels(&updated), json!({"admitted": "yes"}));
    let seen = recorder.take();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|s| s.operation == Operation::Update && s.options_kind == "UpdateOptions")
    );
    assert_eq!(seen[0].object.as_ref().unwrap()["spec"]["color"], "blue");
    assert_eq!(seen[0].old_object.as_ref().unwrap()["spec"]["color"], "red");

    // patch: the plugins see the patched object.
    let patch = Patch::Merge(json!({"spec": {"color": "green"}}));
    api.patch("a", &PatchParams::default(), &patch)
        .await
        .unwrap();
    let seen = recorder.take();
    assert_eq!(seen[0].options_kind, "PatchOptions");
    assert_eq!(seen[0].object.as_ref().unwrap()["spec"]["color"], "green");
    assert_eq!(seen[1].object.as_ref().unwrap()["spec"]["color"], "green");

    // status: the subresource is named.
    let status = Patch::Merge(json!({"status": {"replicas": 3}}));
    api.patch_status("a", &PatchParams::default(), &status)
        .await
        .unwrap();
    let seen = recorder.take();
    assert!(
        seen.iter()
            .all(|s| s.subresource == "status" && s.kind == "Gizmo")
    );

    // scale: plugins see Scales; the mutating plugin's cap reaches the object.
    let scale = Patch::Merge(json!({"spec": {"replicas": 9}}));
    api.patch_scale("a", &PatchParams::default(), &scale)
        .await
        .unwrap();
    let seen = recorder.take();
    assert!(
        seen.iter()
            .all(|s| s.subresource == "scale" && s.kind == "Scale"),
        "{seen:?}"
    );
    assert_eq!(seen[0].object.as_ref().unwrap()["spec"]["replicas"], 9);
    assert_eq!(seen[0].old_object.as_ref().unwrap()["spec"]["replicas"], 1);
    assert_eq!(seen[1].object.as_ref().unwrap()["spec"]["replicas"], 5);
    assert_eq!(api.get("a").await.unwrap().spec.replicas, Some(5));

    // delete: mutating once without objects, validating with the stored object.
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let seen = recorder.take();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].step, seen[0].operation),
        ("admit", Operation::Delete)
    );
    assert!(seen[0].object.is_none() && seen[0].old_object.is_none());
    assert_eq!(
        seen[1].old_object.as_ref().unwrap()["metadata"]["name"],
        "a"
    );
    assert_eq!(seen[1].options_kind, "DeleteOptions");

    // deletecollection: mutating once (no name), validating per object.
    for name in ["c1", "c2", "c3"] {
        api.create(&PostParams::default(), &gizmo(name, json!({"set": "c"})))
            .await
            .unwrap();
    }
    recorder.take();
    let selected = ListParams::default().labels("set=c");
    api.delete_collection(&DeleteParams::default(), &selected)
        .await
        .unwrap();
    let seen = recorder.take();
    let admits: Vec<_> = seen.iter().filter(|s| s.step == "admit").collect();
    assert_eq!(admits.len(), 1);
    assert_eq!(admits[0].name, "");
    let validated: Vec<_> = seen
        .iter()
        .filter(|s| s.step == "validate")
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(validated, ["c1", "c2", "c3"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_kube_statuses_and_change_nothing() {
    let recorder = Recorder::default();
    let (server, _dir) = start(&recorder, |_| {}).await;
    let api: Api<Gizmo> = Api::namespaced(server.client(), "default");

    let refused = api
        .create(&PostParams::default(), &gizmo("deny-me", json!({})))
        .await;
    let kube::Error::Api(status) = refused.unwrap_err() else {
        panic!()
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        r#"gizmos.admission.example.com "deny-me" is forbidden: names starting with deny- are refused"#
    );
    assert!(api.get_opt("deny-me").await.unwrap().is_none());

    // A generated name is judged as it will be stored.
    let mut generated = gizmo("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("deny-".into());
    let refused = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("\"deny-"), "{refused}");

    // Dry run: plugins are told; nothing is stored.
    recorder.take();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answered = api.create(&dry, &gizmo("dry", json!({}))).await.unwrap();
    assert_eq!(labels(&answered), json!({"admitted": "yes"}));
    assert!(recorder.take().iter().all(|s| s.dry_run));
    assert!(api.get_opt("dry").await.unwrap().is_none());

    // A refused delete leaves the object.
    api.create(
        &PostParams::default(),
        &gizmo("keep", json!({"protected": "true"})),
    )
    .await
    .unwrap();
    let refused = api
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("protected"), "{refused}");
    assert!(api.get_opt("keep").await.unwrap().is_some());
    server.stop().await;
}

/// A write that loses its compare-and-swap to another is admitted again, against the object
/// the other write left: plugins judge what is actually stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_update_is_admitted_again() {
    let recorder = Recorder::default();
    let (server, _dir) = start(&recorder, |_| {}).await;
    let api: Api<Gizmo> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &gizmo("raced", json!({})))
        .await
        .unwrap();
    recorder.take();
    *recorder.racer.lock().unwrap() = Some(server.client());
    let patch = Patch::Merge(json!({"spec": {"replicas": 2}}));
    let stored = api
        .patch("raced", &PatchParams::default(), &patch)
        .await
        .unwrap();
    assert_eq!(
        (stored.spec.replicas, stored.spec.color.as_str()),
        (Some(2), "from-the-race")
    );
    let seen = recorder.take();
    let olds: Vec<Value> = seen
        .iter()
        .filter(|s| s.step == "admit" && s.old_object.is_some())
        .map(|s| s.old_object.as_ref().unwrap()["spec"]["color"].clone())
        .collect();
    // The first attempt, the racing patch, the retry (which saw the racer's color).
    assert_eq!(
        olds,
        [json!("red"), json!("red"), json!("from-the-race")],
        "{seen:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_are_named_by_the_admission_flags() {
    let recorder = Recorder::default();
    let (server, _dir) = start(&recorder, |o| {
        o.admission.disable_admission_plugins = vec!["Recorder".into()];
    })
    .await;
    let api: Api<Gizmo> = Api::namespaced(server.client(), "default");
    let created = api
        .create(&PostParams::default(), &gizmo("deny-ok", json!({})))
        .await
        .unwrap();
    assert_eq!(labels(&created), json!({}));
    assert!(recorder.take().is_empty());
    server.stop().await;

    // An unknown name, and two plugins of one name, stop the server from starting.
    let dir = tempfile::tempdir().unwrap();
    let mut options = TestServer::options(dir.path());
    options.admission.disable_admission_plugins = vec!["Nope".into()];
    let started = APIServer::new(options).group(group()).start().await;
    let message = started.err().expect("refused").to_string();
    assert!(
        message.contains("\"Nope\"") && !message.contains("Recorder"),
        "{message}"
    );
    let mut options = TestServer::options(dir.path());
    options.storage_backend = extension_apiserver::server::StorageBackendKind::Memory;
    let twice = recorder.clone();
    let started = APIServer::new(options)
        .group(group())
        .admission_plugin(move |_| Plugin::mutating(twice.clone()))
        .admission_plugin(move |_| Plugin::mutating(Recorder::default()))
        .start()
        .await;
    let message = started.err().expect("refused").to_string();
    assert!(
        message.contains("two admission plugins are named \"Recorder\""),
        "{message}"
    );
}

/// A cluster-wide limit that [`Part`]'s strategy reads in process.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "admission.example.com", version = "v1", kind = "Limit")]
pub struct Limit {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub max: i64,
}

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "admission.example.com",
    version = "v1",
    kind = "Part",
    namespaced,
    custom_strategy
)]
pub struct Part {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub count: i64,
}

impl extension_apiserver::Strategy for Part {
    /// At most the `max` of the Limit named `parts`, read from the watch cache.
    fn validate(
        &self,
        ctx: &extension_apiserver::StrategyContext<'_>,
    ) -> Vec<extension_apiserver::runtime::FieldError> {
        let limits = ctx.reader::<Limit>().expect("the server stores limits");
        let limit = limits.get_cached(None, "parts").expect("a watch cache");
        match limit.expect("decodes") {
            Some(limit) if self.count > limit.max => {
                vec![extension_apiserver::runtime::FieldError::invalid(
                    "count",
                    self.count.to_string(),
                    &format!("must be at most {}", limit.max),
                )]
            }
            _ => Vec::new(),
        }
    }
}

/// A strategy reads another resource of the server through its context's reader, from the
/// watch cache, without HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_reads_another_resource_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = TestServer::options(dir.path());
    options.storage_backend = extension_apiserver::server::StorageBackendKind::Memory;
    let server = TestServer::start_configured(options, |server| {
        server.group(
            APIGroup::new("admission.example.com")
                .version("v1", |v| v.resource::<Limit>().resource::<Part>()),
        )
    })
    .await;
    let parts: Api<Part> = Api::namespaced(server.client(), "default");
    let part = |name: &str| -> Part {
        serde_json::from_value(json!({"metadata": {"name": name}, "count": 3})).unwrap()
    };
    parts
        .create(&PostParams::default(), &part("free"))
        .await
        .unwrap();
    let limits: Api<Limit> = Api::all(server.client());
    let limit: Limit =
        serde_json::from_value(json!({"metadata": {"name": "parts"}, "max": 2})).unwrap();
    limits.create(&PostParams::default(), &limit).await.unwrap();
    // The cache is a moment behind the write, as an informer is.
    let mut refused = None;
    for attempt in 0..50 {
        match parts
            .create(&PostParams::default(), &part(&format!("p{attempt}")))
            .await
        {
            Err(kube::Error::Api(status)) => {
                refused = Some(status);
                break;
            }
            Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            Err(e) => panic!("{e}"),
        }
    }
    let status = refused.expect("the limit is enforced once cached");
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("count: Invalid value: \"3\": must be at most 2"),
        "{}",
        status.message
    );
    server.stop().await;
}
