//! A small stand-in for the *core* kube-apiserver, for tests of delegated mode: the calls an
//! extension server makes to its cluster, over real TLS on 127.0.0.1, with the real API's JSON
//! shapes.
//!
//! - `POST /apis/authentication.k8s.io/v1/tokenreviews`: tokens added with
//!   [`FakeCore::add_token`] are authenticated, others get `authenticated` unset and an `error`.
//! - `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: answered by the [`Rule`]s
//!   added with [`FakeCore::allow`] (RBAC-like: additive, `system:masters` may do anything; a
//!   request no rule allows gets `allowed: false` and no opinion, as RBAC answers).
//! - namespaces (`/api/v1/namespaces`), ConfigMaps (`/api/v1/namespaces/{ns}/configmaps`),
//!   Nodes (`/api/v1/nodes`), Pods (`/api/v1/namespaces/{ns}/pods`, and `/api/v1/pods` across
//!   namespaces),
//!   APIServices (`/apis/apiregistration.k8s.io/v1/apiservices`, with `/status`) and
//!   Mutating/ValidatingWebhookConfigurations and ValidatingAdmissionPolicies and their
//!   bindings (`/apis/admissionregistration.k8s.io/v1/…`, defaulted as kube-apiserver
//!   defaults them), FlowSchemas and PriorityLevelConfigurations
//!   (`/apis/flowcontrol.apiserver.k8s.io/v1/…`, kube-apiserver's mandatory and suggested
//!   objects from the start, as a real cluster has them): get, list
//!   (`fieldSelector=metadata.name=…`, `labelSelector=…`), watch (`watch=true`, from a
//!   `resourceVersion`), create,
//!   update (409 on a stale `resourceVersion`), merge/JSON patch and delete, with one global
//!   resourceVersion counter.
//! - watches as kube-apiserver's watch cache serves them: a watch from a resourceVersion older
//!   than the kept history gets HTTP 200 and one `ERROR` event holding a 410 `Expired` Status
//!   (`too old resource version: X (Y)`); `allowWatchBookmarks=true` brings a `BOOKMARK` every
//!   [`FakeCore::set_bookmark_interval`] (a minute, as kube-apiserver); `sendInitialEvents` and
//!   `resourceVersionMatch` are refused as kube-apiserver 1.33 refuses them with its `WatchList`
//!   feature gate off (its default). [`FakeCore::compact`], [`FakeCore::set_history_window`] and
//!   [`FakeCore::close_watches`] let a test make a client's resourceVersion expire.
//!
//! - discovery (`/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`) of those resources and
//!   of the kinds a deployment uses (Deployment, Service, RBAC, ...), so kubectl can map kinds,
//!   e.g. for `kubectl apply --dry-run=client`.
//! - groups served by an extension server, as the aggregator serves them
//!   ([`FakeCore::aggregate`]): listed in `/apis`, and every request under `/apis/{group}`
//!   proxied to the extension server. kubectl then finds the core API and the extension's
//!   groups behind one URL, as in a cluster (`kubectl top node` reads `/api/v1/nodes` and
//!   `metrics.k8s.io` together).
//!
//! Callers authenticate with the bearer token of a kubeconfig from [`FakeCore::kubeconfig`];
//! [`FakeCore::forbid`] makes a caller's requests on a resource fail with 403 as a missing
//! RBAC binding would. Every request is recorded ([`FakeCore::calls`]), and the spec of every
//! SubjectAccessReview ([`FakeCore::access_reviews`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures::StreamExt as _;
use http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch as signal};

use extension_apiserver::registry::selector::LabelSelector;
use extension_apiserver::tls::certs::SelfSignedCerts;

use crate::TlsEndpoint;

/// One request the fake core served.
#[derive(Debug, Clone)]
pub struct Call {
    /// HTTP method.
    pub method: Method,
    /// Path without the query.
    pub path: String,
    /// The query string, if any.
    pub query: String,
    /// The caller (from its bearer token), `None` if it presented no known token.
    pub caller: Option<String>,
}

/// A permission of the fake's authorizer, as one RBAC rule bound to some subjects.
#[derive(Debug, Clone, Default)]
pub struct Rule {
    /// User names it applies to.
    pub users: Vec<String>,
    /// Groups it applies to.
    pub groups: Vec<String>,
    /// Verbs (`*` for all).
    pub verbs: Vec<String>,
    /// API groups (`""` core, `*` all).
    pub api_groups: Vec<String>,
    /// Resources, `resource/subresource` for subresources (`*` for all).
    pub resources: Vec<String>,
    /// Namespaces it is limited to (empty: every namespace and cluster scope).
    pub namespaces: Vec<String>,
    /// Non-resource URLs (`/healthz`, `/apis/*`).
    pub non_resource_urls: Vec<String>,
}

impl Rule {
    /// A rule for `user` allowing `verbs` on `resources` of `api_group` everywhere.
    pub fn user(user: &str, verbs: &[&str], api_group: &str, resources: &[&str]) -> Self {
        Self {
            users: vec![user.into()],
            verbs: strings(verbs),
            api_groups: vec![api_group.into()],
            resources: strings(resources),
            ..Self::default()
        }
    }

    /// The same rule limited to one namespace.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespaces.push(namespace.into());
        self
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A user a token stands for.
#[derive(Debug, Clone, Default)]
pub struct TokenUser {
    /// `user.username`.
    pub username: String,
    /// `user.uid`.
    pub uid: String,
    /// `user.groups` (kube-apiserver adds `system:authenticated`; add it here if wanted).
    pub groups: Vec<String>,
    /// `user.extra`.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What the extension-apiserver-authentication ConfigMap says (kube-apiserver writes it from
/// its own flags).
#[derive(Debug, Clone, Default)]
pub struct AuthenticationConfig {
    /// `client-ca-file`: the CA of user client certificates.
    pub client_ca: Option<String>,
    /// `requestheader-client-ca-file`: the front-proxy CA.
    pub requestheader_client_ca: Option<String>,
    /// `requestheader-allowed-names`.
    pub requestheader_allowed_names: Vec<String>,
    /// `requestheader-username-headers`.
    pub requestheader_username_headers: Vec<String>,
    /// `requestheader-group-headers`.
    pub requestheader_group_headers: Vec<String>,
    /// `requestheader-extra-headers-prefix`.
    pub requestheader_extra_headers_prefix: Vec<String>,
}

impl AuthenticationConfig {
    /// kube-apiserver's usual request-header settings (`X-Remote-User`, `X-Remote-Group`,
    /// `X-Remote-Extra-`, allowed name `front-proxy-client`) with these CAs.
    pub fn with_front_proxy(client_ca: &str, front_proxy_ca: &str) -> Self {
        Self {
            client_ca: Some(client_ca.into()),
            requestheader_client_ca: Some(front_proxy_ca.into()),
            requestheader_allowed_names: vec!["front-proxy-client".into()],
            requestheader_username_headers: vec!["X-Remote-User".into()],
            requestheader_group_headers: vec!["X-Remote-Group".into()],
            requestheader_extra_headers_prefix: vec!["X-Remote-Extra-".into()],
        }
    }

    /// The ConfigMap's `data`, keys and JSON-array encodings as kube-apiserver writes them.
    pub fn data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        if let Some(ca) = &self.client_ca {
            data.insert("client-ca-file".into(), ca.clone());
        }
        if let Some(ca) = &self.requestheader_client_ca {
            data.insert("requestheader-client-ca-file".into(), ca.clone());
            let list = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_default();
            data.insert(
                "requestheader-allowed-names".into(),
                list(&self.requestheader_allowed_names),
            );
            data.insert(
                "requestheader-username-headers".into(),
                list(&self.requestheader_username_headers),
            );
            data.insert(
                "requestheader-group-headers".into(),
                list(&self.requestheader_group_headers),
            );
            data.insert(
                "requestheader-extra-headers-prefix".into(),
                list(&self.requestheader_extra_headers_prefix),
            );
        }
        data
    }
}

/// Where an object lives: `(api prefix, resource, namespace)`, e.g.
/// `("/api/v1", "configmaps", "kube-system")`.
type Collection = (String, String, String);

struct Event {
    revision: u64,
    collection: Collection,
    kind: &'static str,
    object: Value,
}

#[derive(Default)]
struct Objects {
    revision: u64,
    items: BTreeMap<Collection, BTreeMap<String, Value>>,
    /// Recent changes, oldest first, for watches from a resourceVersion.
    history: VecDeque<Arc<Event>>,
    /// The oldest resourceVersion a watch may start from: the newest change forgotten
    /// (kube-apiserver's `oldest - 1`).
    floor: u64,
    /// How many changes `history` keeps (`None`: all).
    window: Option<usize>,
}

impl Objects {
    fn record(&mut self, event: Arc<Event>) {
        self.history.push_back(event);
        self.trim();
    }

    /// Forgets the changes beyond the window.
    fn trim(&mut self) {
        let keep = self.window.unwrap_or(usize::MAX);
        while self.history.len() > keep {
            if let Some(gone) = self.history.pop_front() {
                self.floor = gone.revision;
            }
        }
    }
}

struct Inner {
    objects: Mutex<Objects>,
    events: broadcast::Sender<Arc<Event>>,
    /// Bumped to end every open watch.
    closer: signal::Sender<u64>,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    bookmark_interval: Mutex<Duration>,
    callers: Mutex<HashMap<String, String>>,
    tokens: Mutex<HashMap<String, TokenUser>>,
    rules: Mutex<Vec<Rule>>,
    forbidden: Mutex<HashSet<(String, String)>>,
    calls: Mutex<Vec<Call>>,
    access_reviews: Mutex<Vec<Value>>,
    aggregated: Mutex<Vec<Aggregated>>,
    /// Whether `admissionregistration.k8s.io/v1beta1` (MutatingAdmissionPolicy) is served.
    serves_v1beta1: AtomicBool,
}

/// A group [`FakeCore::aggregate`] proxies to an extension server.
struct Aggregated {
    group: String,
    versions: Vec<String>,
    client: kube::Client,
}

/// The fake core kube-apiserver: started on 127.0.0.1 with a self-signed serving certificate,
/// stopped when dropped.
pub struct FakeCore {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The serving CA in PEM (what a kubeconfig trusts).
    pub ca_pem: String,
    dir: PathBuf,
    inner: Arc<Inner>,
    /// Stops serving when the fake is dropped.
    _endpoint: TlsEndpoint,
}

impl FakeCore {
    /// Starts the fake with its certificates in `dir`, with namespaces `default` and
    /// `kube-system` (Active).
    pub async fn start(dir: &Path) -> FakeCore {
        extension_apiserver::tls::install_crypto_provider();
        let certs = SelfSignedCerts::load_or_create(&dir.join("fake-core-certs"), &[])
            .expect("fake core certificates");
        let (events, _) = broadcast::channel(1024);
        let inner = Arc::new(Inner {
            objects: Mutex::new(Objects::default()),
            events,
            closer: signal::channel(0).0,
            bookmark_interval: Mutex::new(BOOKMARK_INTERVAL),
            callers: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            rules: Mutex::new(Vec::new()),
            forbidden: Mutex::new(HashSet::new()),
            calls: Mutex::new(Vec::new()),
            access_reviews: Mutex::new(Vec::new()),
            aggregated: Mutex::new(Vec::new()),
            serves_v1beta1: AtomicBool::new(true),
        });
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let endpoint = TlsEndpoint::start(router, &certs.serving).await;
        let core = FakeCore {
            addr: endpoint.addr,
            ca_pem: certs.serving_ca_pem.clone(),
            dir: dir.to_path_buf(),
            inner,
            _endpoint: endpoint,
        };
        core.set_namespace("default", "Active");
        core.set_namespace("kube-system", "Active");
        use extension_apiserver::flowcontrol::bootstrap;
        let levels = bootstrap::mandatory_priority_levels()
            .into_iter()
            .chain(bootstrap::suggested_priority_levels());
        for level in levels {
            core.set_priority_level_configuration(json!(level));
        }
        let schemas = bootstrap::mandatory_flow_schemas()
            .into_iter()
            .chain(bootstrap::suggested_flow_schemas());
        for schema in schemas {
            core.set_flow_schema(json!(schema));
        }
        core
    }

    /// Creates or replaces a FlowSchema (`flowcontrol.apiserver.k8s.io/v1`).
    pub fn set_flow_schema(&self, object: Value) {
        self.put_named(flowcontrol("flowschemas"), object);
    }

    /// Creates or replaces a PriorityLevelConfiguration.
    pub fn set_priority_level_configuration(&self, object: Value) {
        self.put_named(flowcontrol("prioritylevelconfigurations"), object);
    }

    /// Deletes a FlowSchema.
    pub fn delete_flow_schema(&self, name: &str) {
        self.inner.remove(&flowcontrol("flowschemas"), name).ok();
    }

    /// The FlowSchema named `name`, if any.
    pub fn flow_schema(&self, name: &str) -> Option<Value> {
        self.object(flowcontrol("flowschemas"), name)
    }

    /// The PriorityLevelConfiguration named `name`, if any.
    pub fn priority_level_configuration(&self, name: &str) -> Option<Value> {
        self.object(flowcontrol("prioritylevelconfigurations"), name)
    }

    fn object(&self, collection: Collection, name: &str) -> Option<Value> {
        let (kind, _) = kind_of(&collection.0, &collection.1)?;
        lock(&self.inner.objects)
            .items
            .get(&collection)
            .and_then(|c| c.get(name).cloned())
            .map(|o| with_type(o, kind))
    }

    /// `https://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Writes a kubeconfig in the fake's directory for a caller named `user` (a bearer token
    /// the fake maps to that name) and returns its path. This is what an extension server's
    /// `--kubeconfig` / `--authentication-kubeconfig` / `--authorization-kubeconfig` gets.
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        let token = format!("caller-{:016x}", rand::random::<u64>());
        lock(&self.inner.callers).insert(token.clone(), user.to_string());
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "core", "cluster": {
                "server": self.url(),
                "certificate-authority-data": b64,
            }}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "core", "context": {"cluster": "core", "user": user}}],
            "current-context": "core",
        });
        let path = self
            .dir
            .join(format!("core-{}.kubeconfig", user.replace([':', '/'], "_")));
        std::fs::write(
            &path,
            serde_norway::to_string(&config).expect("kubeconfig YAML"),
        )
        .expect("write kubeconfig");
        path
    }

    /// Makes `token` stand for `user` in TokenReviews.
    pub fn add_token(&self, token: &str, user: TokenUser) {
        lock(&self.inner.tokens).insert(token.into(), user);
    }

    /// Forgets a token: later TokenReviews of it fail.
    pub fn remove_token(&self, token: &str) {
        lock(&self.inner.tokens).remove(token);
    }

    /// Adds a permission to the SubjectAccessReview authorizer.
    pub fn allow(&self, rule: Rule) {
        lock(&self.inner.rules).push(rule);
    }

    /// Removes every permission added with [`FakeCore::allow`].
    pub fn clear_rules(&self) {
        lock(&self.inner.rules).clear();
    }

    /// Makes every request of `caller` on `resource` (`tokenreviews`, `configmaps`, ...)
    /// answer 403, as when its RBAC binding is missing.
    pub fn forbid(&self, caller: &str, resource: &str) {
        lock(&self.inner.forbidden).insert((caller.into(), resource.into()));
    }

    /// Lifts a [`FakeCore::forbid`].
    pub fn permit(&self, caller: &str, resource: &str) {
        lock(&self.inner.forbidden).remove(&(caller.into(), resource.into()));
    }

    /// Every request served so far.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.inner.calls).clone()
    }

    /// How many lists and how many watches of the collection at `path` (e.g.
    /// `/api/v1/namespaces`) were received so far: `(lists, watches)`.
    pub fn lists_and_watches(&self, path: &str) -> (usize, usize) {
        let calls = lock(&self.inner.calls);
        let of_path = calls.iter().filter(|c| c.path == path);
        let watches = of_path
            .clone()
            .filter(|c| c.query.contains("watch=true"))
            .count();
        (of_path.count() - watches, watches)
    }

    /// The `spec` of every well-formed SubjectAccessReview received, in order.
    pub fn access_reviews(&self) -> Vec<Value> {
        lock(&self.inner.access_reviews).clone()
    }

    /// How many requests went to paths ending with `suffix` (e.g. `"/tokenreviews"`).
    pub fn count(&self, suffix: &str) -> usize {
        lock(&self.inner.calls)
            .iter()
            .filter(|c| c.path.ends_with(suffix))
            .count()
    }

    /// Forgets the history of changes, as etcd's compaction and the sliding window of
    /// kube-apiserver's watch cache do: a later watch from a resourceVersion older than the
    /// current one gets 410 `Expired`. Open watches go on (see [`FakeCore::close_watches`]).
    pub fn compact(&self) {
        let mut objects = lock(&self.inner.objects);
        objects.floor = objects.revision;
        objects.history.clear();
    }

    /// Keeps only the last `events` changes for watches from a resourceVersion (kube-apiserver
    /// keeps a window of recent events per resource; older resourceVersions get 410).
    pub fn set_history_window(&self, events: usize) {
        let mut objects = lock(&self.inner.objects);
        objects.window = Some(events);
        objects.trim();
    }

    /// Ends every open watch, as kube-apiserver does when it restarts or re-initializes its
    /// watch cache: clients watch again from the last resourceVersion they saw.
    pub fn close_watches(&self) {
        self.inner.closer.send_modify(|generation| *generation += 1);
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (default: a minute,
    /// kube-apiserver's `bookmarkFrequency`). Applies to watches started afterwards.
    pub fn set_bookmark_interval(&self, every: Duration) {
        *lock(&self.inner.bookmark_interval) = every;
    }

    /// Creates or replaces a namespace with this `status.phase` (`Active`, `Terminating`).
    pub fn set_namespace(&self, name: &str, phase: &str) {
        let object = json!({
            "metadata": {"name": name},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": phase},
        });
        self.put(core_collection("namespaces", ""), name, object);
    }

    /// Deletes a namespace.
    pub fn delete_namespace(&self, name: &str) {
        self.inner
            .remove(&core_collection("namespaces", ""), name)
            .ok();
    }

    /// Creates or replaces `kube-system/extension-apiserver-authentication`.
    pub fn set_authentication_config(&self, config: &AuthenticationConfig) {
        self.set_configmap(
            "kube-system",
            "extension-apiserver-authentication",
            config.data(),
        );
    }

    /// Creates or replaces a ConfigMap.
    pub fn set_configmap(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        let object = json!({"metadata": {"name": name, "namespace": namespace}, "data": data});
        self.put(core_collection("configmaps", namespace), name, object);
    }

    /// The APIService named `name`, if any.
    pub fn apiservice(&self, name: &str) -> Option<Value> {
        lock(&self.inner.objects)
            .items
            .get(&apiservices())
            .and_then(|c| c.get(name).cloned())
            .map(|o| with_type(o, "APIService"))
    }

    /// Creates or replaces an APIService (e.g. one that points at another service).
    pub fn set_apiservice(&self, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("APIService has metadata.name")
            .to_string();
        self.put(apiservices(), &name, object);
    }

    /// Creates or replaces a namespace with these labels (phase `Active`), for
    /// `namespaceSelector`s.
    pub fn set_namespace_labels(&self, name: &str, labels: BTreeMap<String, String>) {
        let object = json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        self.put(core_collection("namespaces", ""), name, object);
    }

    /// Creates or replaces a Node: `object` in the shape of `/api/v1/nodes` (e.g. a
    /// `k8s_openapi` `Node` through `serde_json::to_value`), with `metadata.name`.
    pub fn set_node(&self, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("Node has metadata.name")
            .to_string();
        self.put(core_collection("nodes", ""), &name, object);
    }

    /// Deletes a Node.
    pub fn delete_node(&self, name: &str) {
        self.inner.remove(&core_collection("nodes", ""), name).ok();
    }

    /// Creates or replaces a Pod: `object` in the shape of `/api/v1/namespaces/{ns}/pods`,
    /// with `metadata.name` and `metadata.namespace`.
    pub fn set_pod(&self, object: Value) {
        let meta = &object["metadata"];
        let name = meta["name"].as_str().expect("Pod has metadata.name");
        let namespace = meta["namespace"]
            .as_str()
            .expect("Pod has metadata.namespace");
        let collection = core_collection("pods", namespace);
        let name = name.to_string();
        self.put(collection, &name, object);
    }

    /// Deletes a Pod.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.inner
            .remove(&core_collection("pods", namespace), name)
            .ok();
    }

    /// Serves `group` (its `versions`, preferred first) as kube-apiserver's aggregator serves
    /// an available APIService: listed in `/apis`, and every request under `/apis/{group}`
    /// passed to `client`'s server (method, path, query, `Accept`, `Content-Type` and body)
    /// with `client`'s credentials, the answer passed back as it comes (watches stream).
    pub fn aggregate(&self, group: &str, versions: &[&str], client: kube::Client) {
        lock(&self.inner.aggregated).push(Aggregated {
            group: group.into(),
            versions: strings(versions),
            client,
        });
    }

    /// Creates or replaces a `MutatingWebhookConfiguration`, defaulted as kube-apiserver
    /// defaults one.
    pub fn set_mutating_webhook_configuration(&self, object: Value) {
        self.set_webhook_configuration("mutatingwebhookconfigurations", object, true);
    }

    /// Creates or replaces a `ValidatingWebhookConfiguration`, defaulted as kube-apiserver
    /// defaults one.
    pub fn set_validating_webhook_configuration(&self, object: Value) {
        self.set_webhook_configuration("validatingwebhookconfigurations", object, false);
    }

    fn set_webhook_configuration(&self, resource: &str, object: Value, mutating: bool) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("webhook configuration has metadata.name")
            .to_string();
        let object = default_webhooks(object, mutating);
        self.put(webhook_configurations(resource), &name, object);
    }

    /// Deletes a `MutatingWebhookConfiguration`.
    pub fn delete_mutating_webhook_configuration(&self, name: &str) {
        let collection = webhook_configurations("mutatingwebhookconfigurations");
        self.inner.remove(&collection, name).ok();
    }

    /// Deletes a `ValidatingWebhookConfiguration`.
    pub fn delete_validating_webhook_configuration(&self, name: &str) {
        let collection = webhook_configurations("validatingwebhookconfigurations");
        self.inner.remove(&collection, name).ok();
    }

    /// Creates or replaces a `ValidatingAdmissionPolicy`, defaulted as kube-apiserver
    /// defaults one (`failurePolicy: Fail`, `matchPolicy: Equivalent`, empty selectors).
    pub fn set_validating_admission_policy(&self, object: Value) {
        let collection = admission_policies("validatingadmissionpolicies");
        self.set_policy(collection, object, &[]);
    }

    /// A policy of either kind, defaulted (`failurePolicy: Fail`, `matchPolicy:
    /// Equivalent`, empty selectors, and `defaults`), its generation bumped.
    fn set_policy(&self, collection: Collection, mut object: Value, defaults: &[(&str, Value)]) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("policy has metadata.name")
            .to_string();
        let spec = &mut object["spec"];
        let defaults = [("failurePolicy", json!("Fail"))]
            .into_iter()
            .chain(defaults.iter().cloned());
        for (key, value) in defaults {
            if spec.get(key).is_none() {
                spec[key] = value;
            }
        }
        if let Some(constraints) = spec["matchConstraints"].as_object_mut() {
            constraints
                .entry("matchPolicy")
                .or_insert(json!("Equivalent"));
            constraints.entry("namespaceSelector").or_insert(json!({}));
            constraints.entry("objectSelector").or_insert(json!({}));
        }
        let generation = lock(&self.inner.objects)
            .items
            .get(&collection)
            .and_then(|c| c.get(&name))
            .map_or(0, |o| o["metadata"]["generation"].as_i64().unwrap_or(0));
        object["metadata"]["generation"] = json!(generation + 1);
        self.put(collection, &name, object);
    }

    /// Creates or replaces a `ValidatingAdmissionPolicyBinding`.
    pub fn set_validating_admission_policy_binding(&self, object: Value) {
        self.put_named(
            admission_policies("validatingadmissionpolicybindings"),
            object,
        );
    }

    /// Deletes a `ValidatingAdmissionPolicy`.
    pub fn delete_validating_admission_policy(&self, name: &str) {
        let collection = admission_policies("validatingadmissionpolicies");
        self.inner.remove(&collection, name).ok();
    }

    /// Deletes a `ValidatingAdmissionPolicyBinding`.
    pub fn delete_validating_admission_policy_binding(&self, name: &str) {
        let collection = admission_policies("validatingadmissionpolicybindings");
        self.inner.remove(&collection, name).ok();
    }

    /// Whether the fake serves `admissionregistration.k8s.io/v1beta1`
    /// (`MutatingAdmissionPolicy` and its bindings; on by default, as in a kube-apiserver
    /// 1.34 with the beta API turned on). Off, discovery does not list it and its paths are
    /// 404, as in a kube-apiserver that does not serve it; set it before the extension
    /// server starts, which asks once.
    pub fn serve_mutating_admission_policies(&self, served: bool) {
        self.inner.serves_v1beta1.store(served, Ordering::Release);
    }

    /// Creates or replaces a `MutatingAdmissionPolicy` (`admissionregistration.k8s.io/v1beta1`),
    /// defaulted as kube-apiserver defaults one (`failurePolicy: Fail`, `reinvocationPolicy:
    /// Never`, `matchPolicy: Equivalent`, empty selectors), its generation bumped.
    pub fn set_mutating_admission_policy(&self, object: Value) {
        let collection = mutating_policies("mutatingadmissionpolicies");
        self.set_policy(
            collection,
            object,
            &[("reinvocationPolicy", json!("Never"))],
        );
    }

    /// Creates or replaces a `MutatingAdmissionPolicyBinding`.
    pub fn set_mutating_admission_policy_binding(&self, object: Value) {
        self.put_named(mutating_policies("mutatingadmissionpolicybindings"), object);
    }

    /// Deletes a `MutatingAdmissionPolicy`.
    pub fn delete_mutating_admission_policy(&self, name: &str) {
        let collection = mutating_policies("mutatingadmissionpolicies");
        self.inner.remove(&collection, name).ok();
    }

    /// Deletes a `MutatingAdmissionPolicyBinding`.
    pub fn delete_mutating_admission_policy_binding(&self, name: &str) {
        let collection = mutating_policies("mutatingadmissionpolicybindings");
        self.inner.remove(&collection, name).ok();
    }

    /// Creates or replaces `object` under its `metadata.name`.
    fn put_named(&self, collection: Collection, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("object has metadata.name")
            .to_string();
        self.put(collection, &name, object);
    }

    fn put(&self, collection: Collection, name: &str, object: Value) {
        self.inner
            .put(collection, name, object, PutMode::Replace)
            .ok();
    }
}

/// kube-apiserver's watch cache sends a watcher a bookmark about once a minute.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn core_collection(resource: &str, namespace: &str) -> Collection {
    ("/api/v1".into(), resource.into(), namespace.into())
}

/// The admissionregistration group's path.
const ADMISSION_V1: &str = "/apis/admissionregistration.k8s.io/v1";

fn admission_policies(resource: &str) -> Collection {
    (ADMISSION_V1.into(), resource.into(), String::new())
}

/// The admissionregistration group's beta path (MutatingAdmissionPolicy).
const ADMISSION_V1BETA1: &str = "/apis/admissionregistration.k8s.io/v1beta1";

fn mutating_policies(resource: &str) -> Collection {
    (ADMISSION_V1BETA1.into(), resource.into(), String::new())
}

/// The flowcontrol group's path.
const FLOWCONTROL_V1: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";

fn flowcontrol(resource: &str) -> Collection {
    (FLOWCONTROL_V1.into(), resource.into(), String::new())
}

fn webhook_configurations(resource: &str) -> Collection {
    (ADMISSION_V1.into(), resource.into(), String::new())
}

/// What kube-apiserver's defaulting fills in a webhook configuration of
/// `admissionregistration.k8s.io/v1`: `failurePolicy: Fail`, `matchPolicy: Equivalent`,
/// empty selectors, `timeoutSeconds: 10`, rules of scope `*`, and for mutating webhooks
/// `reinvocationPolicy: Never`.
fn default_webhooks(mut object: Value, mutating: bool) -> Value {
    let Some(webhooks) = object["webhooks"].as_array_mut() else {
        return object;
    };
    for hook in webhooks.iter_mut().filter_map(Value::as_object_mut) {
        let mut default = |key: &str, value: Value| {
            hook.entry(key.to_string()).or_insert(value);
        };
        default("failurePolicy", json!("Fail"));
        default("matchPolicy", json!("Equivalent"));
        default("namespaceSelector", json!({}));
        default("objectSelector", json!({}));
        default("timeoutSeconds", json!(10));
        if mutating {
            default("reinvocationPolicy", json!("Never"));
        }
        let rules = hook.get_mut("rules").and_then(Value::as_array_mut);
        for rule in rules.into_iter().flatten().filter_map(Value::as_object_mut) {
            rule.entry("scope").or_insert(json!("*"));
        }
    }
    object
}

fn apiservices() -> Collection {
    (
        "/apis/apiregistration.k8s.io/v1".into(),
        "apiservices".into(),
        String::new(),
    )
}

/// Kind, list kind and apiVersion of the resources the fake serves.
fn kind_of(prefix: &str, resource: &str) -> Option<(&'static str, &'static str)> {
    match (prefix, resource) {
        ("/api/v1", "namespaces") => Some(("Namespace", "v1")),
        ("/api/v1", "configmaps") => Some(("ConfigMap", "v1")),
        ("/api/v1", "nodes") => Some(("Node", "v1")),
        ("/api/v1", "pods") => Some(("Pod", "v1")),
        ("/apis/apiregistration.k8s.io/v1", "apiservices") => {
            Some(("APIService", "apiregistration.k8s.io/v1"))
        }
        (ADMISSION_V1, "mutatingwebhookconfigurations") => Some((
            "MutatingWebhookConfiguration",
            "admissionregistration.k8s.io/v1",
        )),
        (ADMISSION_V1, "validatingwebhookconfigurations") => Some((
            "ValidatingWebhookConfiguration",
            "admissionregistration.k8s.io/v1",
        )),
        (ADMISSION_V1, "validatingadmissionpolicies") => Some((
            "ValidatingAdmissionPolicy",
            "admissionregistration.k8s.io/v1",
        )),
        (ADMISSION_V1, "validatingadmissionpolicybindings") => Some((
            "ValidatingAdmissionPolicyBinding",
            "admissionregistration.k8s.io/v1",
        )),
        (FLOWCONTROL_V1, "flowschemas") => Some(("FlowSchema", "flowcontrol.apiserver.k8s.io/v1")),
        (FLOWCONTROL_V1, "prioritylevelconfigurations") => Some((
            "PriorityLevelConfiguration",
            "flowcontrol.apiserver.k8s.io/v1",
        )),
        (ADMISSION_V1BETA1, "mutatingadmissionpolicies") => Some((
            "MutatingAdmissionPolicy",
            "admissionregistration.k8s.io/v1beta1",
        )),
        (ADMISSION_V1BETA1, "mutatingadmissionpolicybindings") => Some((
            "MutatingAdmissionPolicyBinding",
            "admissionregistration.k8s.io/v1beta1",
        )),
        _ => None,
    }
}

fn with_type(mut object: Value, kind: &str) -> Value {
    let api_version = match kind {
        "APIService" => "apiregistration.k8s.io/v1",
        "MutatingWebhookConfiguration"
        | "ValidatingWebhookConfiguration"
        | "ValidatingAdmissionPolicy"
        | "ValidatingAdmissionPolicyBinding" => "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicy" | "MutatingAdmissionPolicyBinding" => {
            "admissionregistration.k8s.io/v1beta1"
        }
        "FlowSchema" | "PriorityLevelConfiguration" => "flowcontrol.apiserver.k8s.io/v1",
        _ => "v1",
    };
    object["kind"] = json!(kind);
    object["apiVersion"] = json!(api_version);
    object
}

/// How [`Inner::put`] treats an object already stored under the name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PutMode {
    /// A client's create: an existing object is 409 AlreadyExists.
    Create,
    /// A client's update: a `resourceVersion` other than the stored one's is 409 Conflict.
    Update,
    /// The test's own write: replaces whatever is there.
    Replace,
}

// Errors are ready-made HTTP answers: a test fake favours directness over a small Err.
#[allow(clippy::result_large_err)]
impl Inner {
    /// Stores `object` under `name`, stamping metadata, as `mode` allows.
    fn put(
        &self,
        collection: Collection,
        name: &str,
        mut object: Value,
        mode: PutMode,
    ) -> Result<Value, Response> {
        let (kind, _) = kind_of(&collection.0, &collection.1).expect("known resource");
        let mut objects = lock(&self.objects);
        let existing = objects
            .items
            .get(&collection)
            .and_then(|c| c.get(name))
            .cloned();
        if mode == PutMode::Create && existing.is_some() {
            return Err(status_error(
                StatusCode::CONFLICT,
                "AlreadyExists",
                &format!("{} \"{name}\" already exists", collection.1),
            ));
        }
        if mode == PutMode::Update {
            if let Some(existing) = &existing {
                let sent = object["metadata"]["resourceVersion"].as_str().unwrap_or("");
                let current = existing["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("");
                if !sent.is_empty() && sent != current {
                    return Err(status_error(
                        StatusCode::CONFLICT,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                            collection.1
                        ),
                    ));
                }
            }
        }
        objects.revision += 1;
        let revision = objects.revision;
        let meta = &mut object["metadata"];
        meta["name"] = json!(name);
        if !collection.2.is_empty() {
            meta["namespace"] = json!(collection.2);
        }
        meta["resourceVersion"] = json!(revision.to_string());
        match &existing {
            Some(old) => {
                meta["uid"] = old["metadata"]["uid"].clone();
                meta["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
            }
            None => {
                meta["uid"] = json!(uuid::Uuid::new_v4().to_string());
                meta["creationTimestamp"] = json!(
                    jiff::Timestamp::now()
                        .round(jiff::Unit::Second)
                        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                        .to_string()
                );
            }
        }
        if let Some(obj) = object.as_object_mut() {
            obj.remove("kind");
            obj.remove("apiVersion");
        }
        objects
            .items
            .entry(collection.clone())
            .or_default()
            .insert(name.to_string(), object.clone());
        let event = Arc::new(Event {
            revision,
            collection,
            kind: if existing.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            },
            object: with_type(object.clone(), kind),
        });
        objects.record(event.clone());
        let _ = self.events.send(event);
        Ok(with_type(object, kind))
    }

    fn remove(&self, collection: &Collection, name: &str) -> Result<Value, Response> {
        let (kind, _) = kind_of(&collection.0, &collection.1).expect("known resource");
        let mut objects = lock(&self.objects);
        let Some(mut object) = objects
            .items
            .get_mut(collection)
            .and_then(|c| c.remove(name))
        else {
            return Err(not_found(&collection.1, name));
        };
        objects.revision += 1;
        object["metadata"]["resourceVersion"] = json!(objects.revision.to_string());
        let object = with_type(object, kind);
        let event = Arc::new(Event {
            revision: objects.revision,
            collection: collection.clone(),
            kind: "DELETED",
            object: object.clone(),
        });
        objects.record(event.clone());
        let _ = self.events.send(event);
        Ok(object)
    }
}

fn status_error(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

fn not_found(resource: &str, name: &str) -> Response {
    status_error(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{resource} \"{name}\" not found"),
    )
}

/// What a request path names.
struct Target {
    collection: Collection,
    group: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_target(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("/api/v1".to_string(), String::new(), rest),
        ["apis", g, v, rest @ ..] => (format!("/apis/{g}/{v}"), g.to_string(), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, resource, tail @ ..] if *resource != "status" => {
            (ns.to_string(), [&[*resource][..], tail].concat())
        }
        _ => (String::new(), rest.to_vec()),
    };
    let (resource, name, subresource) = match rest.as_slice() {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(name.to_string()), None),
        [resource, name, sub] => (*resource, Some(name.to_string()), Some(sub.to_string())),
        _ => return None,
    };
    kind_of(&prefix, resource)?;
    Some(Target {
        collection: (prefix, resource.to_string(), namespace),
        group,
        name,
        subresource,
    })
}

fn query_param(query: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
}

async fn handle(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let caller = parts
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|token| lock(&inner.callers).get(token.trim()).cloned());
    lock(&inner.calls).push(Call {
        method: parts.method.clone(),
        path: path.clone(),
        query: query.clone(),
        caller: caller.clone(),
    });
    let Some(caller) = caller else {
        return status_error(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized");
    };
    let body = match axum::body::to_bytes(body, 4 << 20).await {
        Ok(b) => b,
        Err(e) => return status_error(StatusCode::BAD_REQUEST, "BadRequest", &e.to_string()),
    };
    let serves_v1beta1 = inner.serves_v1beta1.load(Ordering::Acquire);
    match path.as_str() {
        "/apis/authentication.k8s.io/v1/tokenreviews" if parts.method == Method::POST => {
            if let Some(denied) = forbidden(
                &inner,
                &caller,
                "create",
                "authentication.k8s.io",
                "tokenreviews",
                "",
            ) {
                return denied;
            }
            token_review(&inner, &body)
        }
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" if parts.method == Method::POST => {
            if let Some(denied) = forbidden(
                &inner,
                &caller,
                "create",
                "authorization.k8s.io",
                "subjectaccessreviews",
                "",
            ) {
                return denied;
            }
            subject_access_review(&inner, &body)
        }
        _ if aggregated_client(&inner, &path).is_some() => {
            let client = aggregated_client(&inner, &path).expect("checked");
            proxy(client, parts, body).await
        }
        _ if path.starts_with(ADMISSION_V1BETA1)
            && !inner.serves_v1beta1.load(Ordering::Acquire) =>
        {
            status_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
        _ if parts.method == Method::GET && discovery(&path, serves_v1beta1).is_some() => {
            let mut document = discovery(&path, serves_v1beta1).unwrap_or_default();
            if path.trim_end_matches('/') == "/apis" {
                add_aggregated_groups(&inner, &mut document);
            }
            axum::Json(document).into_response()
        }
        _ => resource_request(&inner, &caller, &parts, &query, &body).await,
    }
}

/// The client of the extension server serving the aggregated group `path` is under.
fn aggregated_client(inner: &Inner, path: &str) -> Option<kube::Client> {
    let rest = path.strip_prefix("/apis/")?;
    let group = rest.split('/').next()?;
    lock(&inner.aggregated)
        .iter()
        .find(|a| a.group == group)
        .map(|a| a.client.clone())
}

/// Adds the aggregated groups to `/apis`' `APIGroupList`.
fn add_aggregated_groups(inner: &Inner, document: &mut Value) {
    let Some(groups) = document["groups"].as_array_mut() else {
        return;
    };
    for aggregated in lock(&inner.aggregated).iter() {
        let versions: Vec<Value> = aggregated
            .versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{}/{v}", aggregated.group), "version": v}))
            .collect();
        groups.push(json!({
            "name": aggregated.group,
            "versions": versions,
            "preferredVersion": versions.first().cloned().unwrap_or_default(),
        }));
    }
}

/// Passes a request to an extension server, as the aggregator's proxy does.
async fn proxy(client: kube::Client, parts: http::request::Parts, body: Bytes) -> Response {
    let uri = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut request = http::Request::builder().method(parts.method).uri(uri);
    for name in [http::header::ACCEPT, http::header::CONTENT_TYPE] {
        if let Some(value) = parts.headers.get(&name) {
            request = request.header(name, value);
        }
    }
    let Ok(request) = request.body(kube::client::Body::from(body.to_vec())) else {
        return status_error(StatusCode::BAD_REQUEST, "BadRequest", "unproxyable request");
    };
    match client.send(request).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => status_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("error trying to reach service: {e}"),
        ),
    }
}

/// `(plural, kind, namespaced)`.
type DiscoveredResource = (&'static str, &'static str, bool);

/// The group versions the fake's discovery names, with `(plural, kind, namespaced)` of each
/// resource: those it serves, and the kinds of a deployment (`manifests`) so that kubectl can
/// map them; objects of kinds it does not store are simply not found.
const DISCOVERY: &[(&str, &str, &[DiscoveredResource])] = &[
    (
        "",
        "v1",
        &[
            ("namespaces", "Namespace", false),
            ("configmaps", "ConfigMap", true),
            ("nodes", "Node", false),
            ("pods", "Pod", true),
            ("secrets", "Secret", true),
            ("serviceaccounts", "ServiceAccount", true),
            ("services", "Service", true),
        ],
    ),
    ("apps", "v1", &[("deployments", "Deployment", true)]),
    (
        "rbac.authorization.k8s.io",
        "v1",
        &[
            ("clusterroles", "ClusterRole", false),
            ("clusterrolebindings", "ClusterRoleBinding", false),
            ("roles", "Role", true),
            ("rolebindings", "RoleBinding", true),
        ],
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        &[("apiservices", "APIService", false)],
    ),
    (
        "authentication.k8s.io",
        "v1",
        &[("tokenreviews", "TokenReview", false)],
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        &[
            (
                "mutatingwebhookconfigurations",
                "MutatingWebhookConfiguration",
                false,
            ),
            (
                "validatingwebhookconfigurations",
                "ValidatingWebhookConfiguration",
                false,
            ),
            (
                "validatingadmissionpolicies",
                "ValidatingAdmissionPolicy",
                false,
            ),
            (
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
                false,
            ),
        ],
    ),
    (
        "admissionregistration.k8s.io",
        "v1beta1",
        &[
            (
                "mutatingadmissionpolicies",
                "MutatingAdmissionPolicy",
                false,
            ),
            (
                "mutatingadmissionpolicybindings",
                "MutatingAdmissionPolicyBinding",
                false,
            ),
        ],
    ),
    (
        "authorization.k8s.io",
        "v1",
        &[("subjectaccessreviews", "SubjectAccessReview", false)],
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        &[
            ("flowschemas", "FlowSchema", false),
            (
                "prioritylevelconfigurations",
                "PriorityLevelConfiguration",
                false,
            ),
        ],
    ),
];

/// The legacy discovery documents (`/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`).
fn discovery(path: &str, serves_v1beta1: bool) -> Option<Value> {
    let served = DISCOVERY.iter().filter(|(g, v, _)| {
        serves_v1beta1 || !(*g == "admissionregistration.k8s.io" && *v == "v1beta1")
    });
    let group_version = |g: &str, v: &str| {
        if g.is_empty() {
            v.to_string()
        } else {
            format!("{g}/{v}")
        }
    };
    match path.trim_end_matches('/') {
        "/api" => Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        })),
        "/apis" => {
            // One entry a group, its versions in order, the first preferred.
            let mut groups: Vec<Value> = Vec::new();
            for (g, v, _) in served.clone().filter(|(g, _, _)| !g.is_empty()) {
                let gv = json!({"groupVersion": group_version(g, v), "version": v});
                match groups.iter_mut().find(|group| group["name"] == *g) {
                    Some(group) => group["versions"].as_array_mut().expect("a list").push(gv),
                    None => groups
                        .push(json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})),
                }
            }
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
        }
        other => {
            let (g, v, resources) = served.clone().find(|(g, v, _)| {
                other == format!("/api/{v}") && g.is_empty()
                    || other == format!("/apis/{g}/{v}") && !g.is_empty()
            })?;
            let resources: Vec<Value> = resources
                .iter()
                .map(|(plural, kind, namespaced)| {
                    json!({
                        "name": plural,
                        "singularName": kind.to_lowercase(),
                        "namespaced": namespaced,
                        "kind": kind,
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    })
                })
                .collect();
            Some(json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version(g, v),
                "resources": resources,
            }))
        }
    }
}

fn forbidden(
    inner: &Inner,
    caller: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
) -> Option<Response> {
    if !lock(&inner.forbidden).contains(&(caller.to_string(), resource.to_string())) {
        return None;
    }
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{namespace}\"")
    };
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    Some(status_error(
        StatusCode::FORBIDDEN,
        "Forbidden",
        &format!(
            "{qualified} is forbidden: User \"{caller}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"
        ),
    ))
}

fn token_review(inner: &Inner, body: &Bytes) -> Response {
    let Ok(mut review) = serde_json::from_slice::<Value>(body) else {
        return status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "malformed TokenReview",
        );
    };
    if review["kind"] != "TokenReview" {
        return status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "expected a TokenReview",
        );
    }
    let token = review["spec"]["token"].as_str().unwrap_or("");
    let audiences = review["spec"]["audiences"].clone();
    let status = match lock(&inner.tokens).get(token) {
        Some(user) => {
            let mut status = json!({
                "authenticated": true,
                "user": {"username": user.username, "uid": user.uid, "groups": user.groups},
            });
            if !user.extra.is_empty() {
                status["user"]["extra"] = json!(user.extra);
            }
            if audiences.is_array() {
                status["audiences"] = audiences;
            }
            status
        }
        None => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
    };
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = status;
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

fn subject_access_review(inner: &Inner, body: &Bytes) -> Response {
    let Ok(mut review) = serde_json::from_slice::<Value>(body) else {
        return status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "malformed SubjectAccessReview",
        );
    };
    if review["kind"] != "SubjectAccessReview" {
        return status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "expected a SubjectAccessReview",
        );
    }
    let spec = &review["spec"];
    lock(&inner.access_reviews).push(spec.clone());
    let user = spec["user"].as_str().unwrap_or("");
    let groups: Vec<&str> = spec["groups"]
        .as_array()
        .map(|g| g.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        return status_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified",
        );
    }
    let allowed_by = if groups.contains(&"system:masters") {
        Some("allowed by ClusterRoleBinding \"cluster-admin\" of ClusterRole \"cluster-admin\" to Group \"system:masters\"".to_string())
    } else {
        lock(&inner.rules)
            .iter()
            .find(|rule| rule_allows(rule, user, &groups, spec))
            .map(|_| format!("allowed by a rule of the fake core for User \"{user}\""))
    };
    review["metadata"] = json!({"creationTimestamp": null});
    review["status"] = match allowed_by {
        Some(reason) => json!({"allowed": true, "reason": format!("RBAC: {reason}")}),
        None => json!({"allowed": false}),
    };
    (StatusCode::CREATED, axum::Json(review)).into_response()
}

fn matches(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

fn rule_allows(rule: &Rule, user: &str, groups: &[&str], spec: &Value) -> bool {
    let subject = rule.users.iter().any(|u| u == user)
        || rule.groups.iter().any(|g| groups.contains(&g.as_str()));
    if !subject {
        return false;
    }
    let resource = &spec["resourceAttributes"];
    if resource.is_object() {
        let s = |k: &str| resource[k].as_str().unwrap_or("").to_string();
        let (sub, ns) = (s("subresource"), s("namespace"));
        let full = if sub.is_empty() {
            s("resource")
        } else {
            format!("{}/{sub}", s("resource"))
        };
        return matches(&rule.verbs, &s("verb"))
            && matches(&rule.api_groups, &s("group"))
            && matches(&rule.resources, &full)
            && (rule.namespaces.is_empty() || rule.namespaces.contains(&ns));
    }
    let non_resource = &spec["nonResourceAttributes"];
    let path = non_resource["path"].as_str().unwrap_or("");
    let verb = non_resource["verb"].as_str().unwrap_or("");
    matches(&rule.verbs, verb)
        && rule
            .non_resource_urls
            .iter()
            .any(|u| u == path || u.strip_suffix('*').is_some_and(|p| path.starts_with(p)))
}

async fn resource_request(
    inner: &Arc<Inner>,
    caller: &str,
    parts: &http::request::Parts,
    query: &str,
    body: &Bytes,
) -> Response {
    let Some(target) = parse_target(parts.uri.path()) else {
        return status_error(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
        );
    };
    let watching = matches!(query_param(query, "watch").as_deref(), Some("true" | "1"));
    let verb = match (&parts.method, &target.name) {
        (&Method::GET, None) if watching => "watch",
        (&Method::GET, None) => "list",
        (&Method::GET, Some(_)) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, _) => "delete",
        _ => {
            return status_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            );
        }
    };
    let (_, resource, namespace) = &target.collection;
    if let Some(denied) = forbidden(inner, caller, verb, &target.group, resource, namespace) {
        return denied;
    }
    let (kind, api_version) = kind_of(&target.collection.0, resource).expect("parsed");
    let ok = |code: StatusCode, v: Value| (code, axum::Json(v)).into_response();
    match (verb, target.name.as_deref()) {
        ("watch", _) => watch(inner, &target, query),
        ("list", _) => {
            let name = query_param(query, "fieldSelector")
                .and_then(|s| s.strip_prefix("metadata.name=").map(str::to_string));
            let labels = query_param(query, "labelSelector").unwrap_or_default();
            let labels = match LabelSelector::parse(&labels) {
                Ok(selector) => selector,
                Err(e) => return status_error(StatusCode::BAD_REQUEST, "BadRequest", e.message()),
            };
            let objects = lock(&inner.objects);
            let items: Vec<Value> = objects
                .items
                .iter()
                .filter(|(c, _)| {
                    c.0 == target.collection.0
                        && c.1 == target.collection.1
                        && (target.collection.2.is_empty() || c.2 == target.collection.2)
                })
                .flat_map(|(_, objs)| objs.iter())
                .filter(|(n, _)| name.as_deref().is_none_or(|want| want == n.as_str()))
                .filter(|(_, o)| labels.matches_object(o))
                .map(|(_, o)| o.clone())
                .collect();
            ok(
                StatusCode::OK,
                json!({
                    "kind": format!("{kind}List"),
                    "apiVersion": api_version,
                    "metadata": {"resourceVersion": objects.revision.to_string()},
                    "items": items,
                }),
            )
        }
        ("get", Some(name)) => {
            let found = lock(&inner.objects)
                .items
                .get(&target.collection)
                .and_then(|c| c.get(name).cloned());
            match found {
                Some(o) => ok(StatusCode::OK, with_type(o, kind)),
                None => not_found(resource, name),
            }
        }
        ("create", None) => {
            let Ok(object) = serde_json::from_slice::<Value>(body) else {
                return status_error(StatusCode::BAD_REQUEST, "BadRequest", "malformed object");
            };
            let Some(name) = object["metadata"]["name"].as_str().map(str::to_string) else {
                return status_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    &format!(
                        "{kind} \"\" is invalid: metadata.name: Required value: name or generateName is required"
                    ),
                );
            };
            match inner.put(target.collection.clone(), &name, object, PutMode::Create) {
                Ok(o) => ok(StatusCode::CREATED, o),
                Err(e) => e,
            }
        }
        ("update" | "patch", Some(name)) => {
            let current = lock(&inner.objects)
                .items
                .get(&target.collection)
                .and_then(|c| c.get(name).cloned());
            let Some(current) = current else {
                return not_found(resource, name);
            };
            let Ok(sent) = serde_json::from_slice::<Value>(body) else {
                return status_error(StatusCode::BAD_REQUEST, "BadRequest", "malformed body");
            };
            let mut object = if verb == "update" {
                sent
            } else {
                let content_type = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let mut patched = current.clone();
                match content_type {
                    "application/merge-patch+json" => json_patch::merge(&mut patched, &sent),
                    "application/json-patch+json" => {
                        let Ok(ops) = serde_json::from_value::<json_patch::Patch>(sent) else {
                            return status_error(
                                StatusCode::BAD_REQUEST,
                                "BadRequest",
                                "malformed JSON patch",
                            );
                        };
                        if let Err(e) = json_patch::patch(&mut patched, &ops) {
                            return status_error(
                                StatusCode::UNPROCESSABLE_ENTITY,
                                "Invalid",
                                &e.to_string(),
                            );
                        }
                    }
                    other => {
                        return status_error(
                            StatusCode::UNSUPPORTED_MEDIA_TYPE,
                            "UnsupportedMediaType",
                            &format!("the fake core does not support patch type {other:?}"),
                        );
                    }
                }
                patched
            };
            // The status subresource changes only status; the main resource keeps it.
            match target.subresource.as_deref() {
                Some("status") => {
                    let status = object["status"].clone();
                    let rv = object["metadata"]["resourceVersion"].clone();
                    object = current.clone();
                    object["status"] = status;
                    object["metadata"]["resourceVersion"] = rv;
                }
                Some(other) => return not_found(&format!("{resource}/{other}"), name),
                None if kind == "APIService" => object["status"] = current["status"].clone(),
                None => {}
            }
            if object["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n != name)
            {
                return status_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    "the name of the object does not match the name on the URL",
                );
            }
            match inner.put(target.collection.clone(), name, object, PutMode::Update) {
                Ok(o) => ok(StatusCode::OK, o),
                Err(e) => e,
            }
        }
        ("delete", Some(name)) => match inner.remove(&target.collection, name) {
            Ok(o) => ok(StatusCode::OK, o),
            Err(e) => e,
        },
        _ => status_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        ),
    }
}

/// A watch: events after `resourceVersion` from the history (or the current objects as
/// ADDED when none or "0" is given), then live ones, with bookmarks if asked, until
/// `timeoutSeconds` (default 5 min) or [`FakeCore::close_watches`].
fn watch(inner: &Arc<Inner>, target: &Target, query: &str) -> Response {
    if let Some(invalid) = invalid_watch_options(query) {
        return invalid;
    }
    let name = query_param(query, "fieldSelector")
        .and_then(|s| s.strip_prefix("metadata.name=").map(str::to_string));
    let from: u64 = query_param(query, "resourceVersion")
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    let timeout = query_param(query, "timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .unwrap_or(300u64);
    let bookmarks = query_param(query, "allowWatchBookmarks").as_deref() == Some("true");
    let want = target.collection.clone();
    let selects = move |e: &Event| {
        e.collection.0 == want.0
            && e.collection.1 == want.1
            && (want.2.is_empty() || e.collection.2 == want.2)
            && name
                .as_deref()
                .is_none_or(|n| e.object["metadata"]["name"] == n)
    };
    let (kind, api_version) = kind_of(&target.collection.0, &target.collection.1).expect("parsed");
    let (initial, live, last) = {
        let objects = lock(&inner.objects);
        if from != 0 && from < objects.floor {
            return watch_expired(from, objects.floor);
        }
        let live = inner.events.subscribe();
        let initial: Vec<Arc<Event>> = if from == 0 {
            objects
                .items
                .iter()
                .flat_map(|(c, objs)| objs.values().map(move |o| (c, o)))
                .map(|(c, o)| {
                    Arc::new(Event {
                        revision: objects.revision,
                        collection: c.clone(),
                        kind: "ADDED",
                        object: with_type(o.clone(), kind),
                    })
                })
                .filter(|e| selects(e))
                .collect()
        } else {
            objects
                .history
                .iter()
                .filter(|e| e.revision > from && selects(e))
                .cloned()
                .collect()
        };
        (initial, live, objects.revision)
    };
    let initial = futures::stream::iter(initial.into_iter().map(|e| event_line(e.kind, &e.object)));
    let every = bookmarks.then(|| *lock(&inner.bookmark_interval));
    let live = live_lines(live, last, every, selects, (kind, api_version));
    let mut closer = inner.closer.subscribe();
    let stream = initial
        .chain(live)
        .take_until(tokio::time::sleep(Duration::from_secs(timeout)))
        .take_until(async move {
            let _ = closer.changed().await;
        })
        .map(Ok::<_, std::convert::Infallible>);
    watch_response(Body::from_stream(stream))
}

/// What a live watch sends after its start revision `last`: the changes `selects` keeps and,
/// every `bookmarks`, a BOOKMARK at the newest revision this watch has passed (never ahead of
/// a change it has yet to send). Ends if the watch falls too far behind.
fn live_lines(
    live: broadcast::Receiver<Arc<Event>>,
    last: u64,
    bookmarks: Option<Duration>,
    selects: impl Fn(&Event) -> bool + Send + 'static,
    (kind, api_version): (&'static str, &'static str),
) -> impl futures::Stream<Item = Bytes> + Send {
    enum Tick {
        Change(Arc<Event>),
        Bookmark,
        Lagged,
    }
    let changes = tokio_stream::wrappers::BroadcastStream::new(live)
        .map(|e| e.map_or(Tick::Lagged, Tick::Change));
    let ticks = match bookmarks {
        Some(every) => futures::stream::unfold(
            tokio::time::interval_at(tokio::time::Instant::now() + every, every),
            |mut interval| async move {
                interval.tick().await;
                Some((Tick::Bookmark, interval))
            },
        )
        .boxed(),
        None => futures::stream::pending().boxed(),
    };
    futures::stream::select(changes, ticks)
        .scan(last, move |seen, tick| {
            let line = match tick {
                Tick::Lagged => return std::future::ready(None),
                Tick::Change(e) if e.revision <= *seen => None,
                Tick::Change(e) => {
                    *seen = e.revision;
                    selects(&e).then(|| event_line(e.kind, &e.object))
                }
                Tick::Bookmark => {
                    let object = json!({"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": seen.to_string()}});
                    Some(event_line("BOOKMARK", &object))
                }
            };
            std::future::ready(Some(line))
        })
        .filter_map(std::future::ready)
}

/// One line of a watch: `{"type": ..., "object": ...}`.
fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

fn watch_response(body: Body) -> Response {
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// What kube-apiserver's watch cache answers a watch from a resourceVersion it no longer
/// holds: the watch starts (200), then one ERROR event with `errors.NewResourceExpired`'s
/// Status, and ends (`cacher.Watch` returns `newErrWatcher`; the uncached watch does the same).
fn watch_expired(from: u64, floor: u64) -> Response {
    let status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("too old resource version: {from} ({floor})"),
        "reason": "Expired",
        "code": 410,
    });
    watch_response(Body::from(event_line("ERROR", &status)))
}

/// kube-apiserver 1.33's `validateWatchOptions` with the `WatchList` feature gate off (its
/// default there): streaming lists are refused with 422 `Invalid` on `ListOptions`.
fn invalid_watch_options(query: &str) -> Option<Response> {
    let send_initial = query_param(query, "sendInitialEvents");
    let matching = query_param(query, "resourceVersionMatch").unwrap_or_default();
    let forbidden = |field: &str, detail: &str| {
        (
            field.to_string(),
            "FieldValueForbidden",
            format!("Forbidden: {detail}"),
        )
    };
    let mut errors = Vec::new();
    if send_initial.is_some() {
        if matching != "NotOlderThan" {
            errors.push(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        errors.push(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ));
    }
    if !matching.is_empty() {
        if send_initial.is_none() {
            errors.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if matching != "NotOlderThan" {
            errors.push((
                "resourceVersionMatch".into(),
                "FieldValueNotSupported",
                format!("Unsupported value: {matching:?}: supported values: \"NotOlderThan\""),
            ));
        }
    }
    if errors.is_empty() {
        return None;
    }
    let each: Vec<String> = errors.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
    let all = match each.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|(field, reason, message)| json!({"reason": reason, "message": message, "field": field}))
        .collect();
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("ListOptions.meta.k8s.io \"\" is invalid: {all}"),
        "reason": "Invalid",
        "details": {"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes},
        "code": 422,
    });
    Some((StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response())
}
