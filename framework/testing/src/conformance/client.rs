//! What every check uses: the server under test, raw requests through its kube-rs client
//! (status codes and `Status` bodies as a client sees them), and the user's sample objects.

use std::time::Duration;

use futures::{Stream, StreamExt};
use http::{Method, Request};
use http_body_util::BodyExt;
use kube::core::WatchEvent;
use serde_json::{Value, json};

use crate::TestServer;
use extension_apiserver::runtime::{Resource, ResourceInfo};

use super::Outcome;

/// The namespace namespaced checks work in, and a second one they must not leak into.
pub(super) const NAMESPACE: &str = "conformance-a";
pub(super) const OTHER_NAMESPACE: &str = "conformance-b";

/// Returns `Err(format!(...))` from the check unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}
pub(super) use ensure;

/// An answer: the HTTP status and the JSON body (`Null` when it is not JSON).
#[derive(Debug, Clone)]
pub(super) struct Reply {
    pub code: u16,
    pub body: Value,
}

impl Reply {
    /// The body, when the status is `code`.
    pub fn expect(self, code: u16, what: &str) -> Result<Value, String> {
        ensure!(
            self.code == code,
            "{what}: expected HTTP {code}, got {} {}",
            self.code,
            self.body
        );
        Ok(self.body)
    }
}

/// One check's view of the server: the resource's paths and the user's sample.
pub(super) struct Ctx<'a, K> {
    pub server: &'a TestServer,
    pub client: kube::Client,
    pub sample: &'a (dyn Fn(&str) -> K + Send + Sync),
}

impl<K: Resource> Ctx<'_, K> {
    pub fn info(&self) -> ResourceInfo {
        K::INFO
    }

    pub fn namespaced(&self) -> bool {
        K::INFO.namespaced()
    }

    /// The namespace objects go to (`None` for a cluster-scoped resource).
    pub fn ns(&self) -> Option<&'static str> {
        self.namespaced().then_some(NAMESPACE)
    }

    /// `/apis/{group}/{version}` (`/api/v1` for the core group).
    fn version_path(&self) -> String {
        let info = K::INFO;
        match info.group {
            "" => format!("/api/{}", info.version),
            group => format!("/apis/{group}/{}", info.version),
        }
    }

    /// The collection in `ns`, or across all namespaces (and cluster-scoped) for `None`.
    pub fn collection(&self, ns: Option<&str>) -> String {
        match ns.filter(|_| self.namespaced()) {
            Some(ns) => format!("{}/namespaces/{ns}/{}", self.version_path(), K::INFO.plural),
            None => format!("{}/{}", self.version_path(), K::INFO.plural),
        }
    }

    /// The object `name` in the default namespace.
    pub fn item(&self, name: &str) -> String {
        format!("{}/{name}", self.collection(self.ns()))
    }

    /// The user's sample named `name`, as JSON with `apiVersion`, `kind` and the namespace.
    pub fn object(&self, name: &str, ns: Option<&str>) -> Value {
        let mut object = self.json_of(&(self.sample)(name));
        object["metadata"]["name"] = json!(name);
        if let Some(ns) = ns.filter(|_| self.namespaced()) {
            object["metadata"]["namespace"] = json!(ns);
        }
        object
    }

    /// `object` as JSON with `apiVersion` and `kind`.
    pub fn json_of(&self, object: &K) -> Value {
        let mut value = serde_json::to_value(object).expect("the sample serializes");
        if !value["metadata"].is_object() {
            value["metadata"] = json!({});
        }
        value["apiVersion"] = json!(K::INFO.api_version());
        value["kind"] = json!(K::INFO.kind);
        value
    }

    /// Sends a request; `accept` defaults to JSON.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Option<&Value>,
        content_type: &str,
        accept: Option<&str>,
    ) -> Result<Reply, String> {
        let request = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header("Accept", accept.unwrap_or("application/json"))
            .header("Content-Type", content_type);
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = request
            .body(kube::client::Body::from(bytes))
            .map_err(|e| format!("{method} {uri}: {e}"))?;
        let response = self
            .client
            .send(request)
            .await
            .map_err(|e| format!("{method} {uri}: {e}"))?;
        let code = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {uri}: reading the body: {e}"))?
            .to_bytes();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Reply { code, body })
    }

    pub async fn get(&self, uri: &str) -> Result<Reply, String> {
        self.call(Method::GET, uri, None, "application/json", None)
            .await
    }

    pub async fn post(&self, uri: &str, body: &Value) -> Result<Reply, String> {
        self.call(Method::POST, uri, Some(body), "application/json", None)
            .await
    }

    pub async fn put(&self, uri: &str, body: &Value) -> Result<Reply, String> {
        self.call(Method::PUT, uri, Some(body), "application/json", None)
            .await
    }

    pub async fn merge_patch(&self, uri: &str, body: &Value) -> Result<Reply, String> {
        let content_type = "application/merge-patch+json";
        self.call(Method::PATCH, uri, Some(body), content_type, None)
            .await
    }

    pub async fn delete(&self, uri: &str, body: Option<&Value>) -> Result<Reply, String> {
        self.call(Method::DELETE, uri, body, "application/json", None)
            .await
    }

    /// Creates `object` in its namespace; the stored object.
    pub async fn create(&self, object: &Value) -> Result<Value, String> {
        let ns = object["metadata"]["namespace"].as_str();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        self.post(&self.collection(ns), object)
            .await?
            .expect(201, &format!("creating {name:?}"))
    }

    /// Creates the sample `name` in the default namespace with extra `labels`.
    pub async fn create_sample(
        &self,
        name: &str,
        labels: &[(&str, &str)],
    ) -> Result<Value, String> {
        let mut object = self.object(name, self.ns());
        for (k, v) in labels {
            object["metadata"]["labels"][*k] = json!(v);
        }
        self.create(&object).await
    }

    /// Replaces the stored `object` (its `resourceVersion` is the precondition).
    pub async fn update(&self, object: &Value) -> Result<Value, String> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let ns = object["metadata"]["namespace"].as_str();
        let uri = format!("{}/{name}", self.collection(ns));
        self.put(&uri, object)
            .await?
            .expect(200, &format!("updating {name:?}"))
    }

    /// Lists the default namespace (or the cluster) with `query` (`a=b&c=d`); the list.
    pub async fn list(&self, query: &str) -> Result<Value, String> {
        self.list_in(self.ns(), query).await
    }

    pub async fn list_in(&self, ns: Option<&str>, query: &str) -> Result<Value, String> {
        let uri = format!("{}?{query}", self.collection(ns));
        self.get(&uri)
            .await?
            .expect(200, &format!("listing with {query:?}"))
    }

    /// Starts a watch of the default namespace (or the cluster) with `query`, decoded by
    /// kube-rs as its watchers decode it.
    pub async fn watch(&self, query: &str) -> Result<Events, String> {
        self.watch_in(self.ns(), query).await
    }

    pub async fn watch_in(&self, ns: Option<&str>, query: &str) -> Result<Events, String> {
        let uri = format!("{}?watch=true&{query}", self.collection(ns));
        let request = Request::get(&uri)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let stream = self
            .client
            .request_events::<Value>(request)
            .await
            .map_err(|e| format!("watching {uri}: {e}"))?;
        Ok(Events(Box::pin(stream.map(
            |event: Result<WatchEvent<Value>, kube::Error>| event.map_err(|e| e.to_string()),
        ))))
    }
}

type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<WatchEvent<Value>, String>> + Send>>;

/// A watch's events.
pub(super) struct Events(EventStream);

impl Events {
    /// The next event, within `seconds`; `None` when the watch ended.
    pub async fn next(&mut self, seconds: u64) -> Result<Option<WatchEvent<Value>>, String> {
        match tokio::time::timeout(Duration::from_secs(seconds), self.0.next()).await {
            Err(_) => Err(format!("no watch event within {seconds} s")),
            Ok(None) => Ok(None),
            Ok(Some(event)) => event.map(Some),
        }
    }

    /// Every event until the watch ends (it must, within `seconds`).
    pub async fn until_end(&mut self, seconds: u64) -> Result<Vec<WatchEvent<Value>>, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        let mut events = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.0.next()).await {
                Err(_) => return Err(format!("the watch did not end within {seconds} s")),
                Ok(None) => return Ok(events),
                Ok(Some(event)) => events.push(event?),
            }
        }
    }
}

/// `(TYPE, name, resourceVersion)` of an event, for comparing sequences in messages.
pub(super) fn describe(event: &WatchEvent<Value>) -> (String, String, String) {
    let of = |o: &Value| {
        (
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            resource_version(o),
        )
    };
    let (kind, (name, rv)) = match event {
        WatchEvent::Added(o) => ("ADDED", of(o)),
        WatchEvent::Modified(o) => ("MODIFIED", of(o)),
        WatchEvent::Deleted(o) => ("DELETED", of(o)),
        WatchEvent::Bookmark(b) => (
            "BOOKMARK",
            (String::new(), b.metadata.resource_version.clone()),
        ),
        WatchEvent::Error(e) => ("ERROR", (e.message.clone(), e.code.to_string())),
    };
    (kind.to_string(), name, rv)
}

/// `metadata.resourceVersion`, compared only for equality: it is opaque to clients.
pub(super) fn resource_version(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The names of a list's items, in order.
pub(super) fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|o| {
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Checks `reply` is the `Status` kube-apiserver sends for this failure: HTTP `code`,
/// `kind: Status`, `apiVersion: v1`, `status: Failure`, `reason`, the same `code`, and, when
/// given, `details` naming the object (`name`, the resource's `group`, and `kind`: the
/// plural for NotFound / AlreadyExists / a write's Conflict, the Kind for Invalid and for a
/// delete's failed precondition).
pub(super) fn expect_status(
    reply: &Reply,
    code: u16,
    reason: &str,
    details: Option<(&str, &str, &str)>,
) -> Outcome {
    let body = &reply.body;
    ensure!(
        reply.code == code,
        "expected HTTP {code} {reason}, got {} {body}",
        reply.code
    );
    let shape = [
        ("kind", json!("Status")),
        ("apiVersion", json!("v1")),
        ("status", json!("Failure")),
        ("reason", json!(reason)),
        ("code", json!(code)),
    ];
    for (field, want) in shape {
        ensure!(
            body[field] == want,
            "HTTP {code}: the Status needs {field}: {want}, got {body}"
        );
    }
    ensure!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "HTTP {code}: the Status needs a message, got {body}"
    );
    if let Some((name, group, kind)) = details {
        let d = &body["details"];
        let want = [("name", name), ("group", group), ("kind", kind)];
        for (field, want) in want {
            ensure!(
                d[field].as_str().unwrap_or_default() == want,
                "HTTP {code} {reason}: details.{field} must be {want:?} (as kube-apiserver), got {body}"
            );
        }
    }
    Ok(())
}

/// Retries `check` for up to 10 s (every 100 ms): for what a server finishes a moment after
/// answering.
pub(super) async fn within_seconds<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..100 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
