//! End to end over HTTP: what kubectl, client-go and kube-rs rely on beyond plain CRUD —
//! content negotiation (Table, PartialObjectMetadata, YAML, 406), the status subresource,
//! kubectl's less common verbs, health and version, authentication of anonymous callers,
//! discovery and OpenAPI, and `Warning` headers — checked against kube-apiserver's behaviour,
//! on each storage backend.

use crate::common::*;

backend_tests! {
    all: [
        tables_metadata_yaml_and_not_acceptable,
        watch_as_table,
        status_subresource,
        kubectl_verbs,
        delete_collection,
        health_version_and_anonymous,
        discovery_and_openapi,
        unknown_fields_warn,
        deletes_and_updates_answer_as_kube,
        applies_through_two_versions_answer_as_kube,
        bodies_that_do_not_fit_are_invalid,
    ],
}

use std::time::Duration;

use extension_apiserver_testing::{TestServer, kubectl};
use futures::{AsyncBufReadExt, StreamExt};
use http::{HeaderMap, StatusCode};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::AuthInfo;
use serde_json::{Value, json};
use wardle::{Flunder, FlunderStatus};

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const POM: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
const POM_LIST: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";
const DISCOVERY_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// A client that trusts the server but presents no credentials of its own.
async fn anonymous_client(server: &TestServer) -> Client {
    let mut config = config(server).await;
    config.auth_info = AuthInfo::default();
    Client::try_from(config).unwrap()
}

/// What the server answered to one raw request.
struct Reply {
    code: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// Sends one request with these headers and returns the raw answer, whatever its code.
async fn send(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let mut request = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request.body(kube::client::Body::from(body)).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), client.send(request))
        .await
        .expect("answered in time")
        .expect("request sent");
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(30), body.collect_bytes())
        .await
        .expect("body read in time")
        .expect("body read");
    Reply {
        code: parts.status,
        headers: parts.headers,
        body: body.to_vec(),
    }
}

async fn get(client: &Client, path: &str, accept: &str) -> Reply {
    send(client, "GET", path, &[("accept", accept)], Vec::new()).await
}

/// Asserts a `Status` with this code and reason.
#[track_caller]
fn assert_status(reply: &Reply, code: u16, reason: &str) {
    let body = reply.json();
    assert_eq!(reply.code.as_u16(), code, "{body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
}

fn names(out: &str) -> Vec<String> {
    let mut names: Vec<String> = out.split_whitespace().map(str::to_string).collect();
    names.sort();
    names
}

#[track_caller]
fn assert_columns(table: &Value) {
    assert_eq!(table["kind"], "Table", "{table}");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1", "{table}");
    let columns = table["columnDefinitions"].as_array().unwrap();
    let named: Vec<(&str, i64)> = columns
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        named,
        [("Name", 0), ("Reference", 0), ("Type", 1), ("Age", 0)],
        "{table}"
    );
    for c in columns {
        assert!(c["type"].is_string() && c["description"].is_string(), "{c}");
    }
}

#[track_caller]
fn assert_partial_metadata(object: &Value, name: &str) {
    assert_eq!(object["kind"], "PartialObjectMetadata", "{object}");
    assert_eq!(object["apiVersion"], "meta.k8s.io/v1", "{object}");
    assert_eq!(object["metadata"]["name"], name, "{object}");
    assert!(object["metadata"]["uid"].is_string(), "{object}");
    assert!(object.get("spec").is_none(), "{object}");
}

async fn tables_metadata_yaml_and_not_acceptable(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    for (name, reference) in [("a", "one"), ("b", "two")] {
        api.create(&PostParams::default(), &flunder(name, reference))
            .await
            .unwrap();
    }
    let one = format!("{FLUNDERS}/a");

    // A Table of one object: one row, cells in column order, the object as metadata only.
    let reply = get(&client, &one, TABLE).await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    // kube-apiserver names only the encoding, not the `as=Table` asked for.
    assert_eq!(reply.header("content-type"), "application/json");
    let table = reply.json();
    assert_columns(&table);
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{table}");
    let cells = rows[0]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "{table}");
    assert_eq!(&cells[..3], &[json!("a"), json!("one"), json!("Flunder")]);
    assert!(cells[3].is_string(), "{table}");
    assert_partial_metadata(&rows[0]["object"], "a");
    assert!(table["metadata"]["resourceVersion"].is_string(), "{table}");

    // A Table of a list, with the whole object or none.
    let table = get(&client, FLUNDERS, TABLE).await.json();
    assert_columns(&table);
    let rows = table["rows"].as_array().unwrap();
    let first: Vec<&Value> = rows.iter().map(|r| &r["cells"][0]).collect();
    assert_eq!(first, [&json!("a"), &json!("b")], "{table}");
    assert!(table["metadata"]["resourceVersion"].is_string(), "{table}");
    let table = get(&client, &format!("{FLUNDERS}?includeObject=Object"), TABLE)
        .await
        .json();
    let object = &table["rows"][0]["object"];
    assert_eq!(object["kind"], "Flunder", "{table}");
    assert_eq!(object["apiVersion"], "wardle.example.com/v1alpha1");
    assert_eq!(object["spec"]["reference"], "one", "{table}");
    let table = get(&client, &format!("{FLUNDERS}?includeObject=None"), TABLE)
        .await
        .json();
    for row in table["rows"].as_array().unwrap() {
        // Go encodes the row's empty RawExtension as null.
        assert_eq!(row.get("object"), Some(&Value::Null), "{row}");
    }
    let bad = get(&client, &format!("{FLUNDERS}?includeObject=All"), TABLE).await;
    assert_status(&bad, 400, "BadRequest");

    // Metadata only.
    let reply = get(&client, &one, POM).await;
    assert_eq!(reply.header("content-type"), "application/json");
    assert_partial_metadata(&reply.json(), "a");
    let list = get(&client, FLUNDERS, POM_LIST).await.json();
    assert_eq!(list["kind"], "PartialObjectMetadataList", "{list}");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1", "{list}");
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    assert_partial_metadata(&items[0], "a");
    assert_partial_metadata(&items[1], "b");

    // What kube-apiserver refuses with 406 rather than falling back.
    for (path, accept) in [
        (one.as_str(), "application/vnd.kubernetes.protobuf"),
        (one.as_str(), "text/html"),
        (one.as_str(), POM_LIST),
        (FLUNDERS, POM),
        (
            one.as_str(),
            "application/json;as=Table;v=v1beta9;g=meta.k8s.io",
        ),
        (FLUNDERS, "application/json;as=Flunder;v=v1;g=meta.k8s.io"),
    ] {
        let reply = get(&client, path, accept).await;
        assert_status(&reply, 406, "NotAcceptable");
    }
    // The first acceptable range wins; a fallback listed by the client is honoured.
    let reply = get(&client, &one, "text/html, application/json;q=0.5").await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.json()["kind"], "Flunder");

    // YAML: the content type says so and kubectl's own YAML parser reads it back.
    let reply = get(&client, &one, "application/yaml").await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.header("content-type"), "application/yaml");
    let yaml = reply.text();
    assert!(yaml.contains("kind: Flunder"), "{yaml}");
    let file = write(dir.path(), "a.yaml", &yaml);
    let parsed: Value = serde_json::from_str(&ok(server.kubectl(&[
        "create",
        "--dry-run=client",
        "-o",
        "json",
        "-f",
        &file,
    ])))
    .unwrap();
    assert_eq!(parsed["metadata"]["name"], "a");
    assert_eq!(parsed["spec"]["reference"], "one");
    let reply = get(&client, FLUNDERS, "application/yaml").await;
    assert_eq!(reply.header("content-type"), "application/yaml");
    assert!(
        reply.text().contains("kind: FlunderList"),
        "{}",
        reply.text()
    );
    let reply = get(&client, &format!("{FLUNDERS}/nope"), "application/yaml").await;
    assert_eq!(reply.code, StatusCode::NOT_FOUND);

    server.stop().await;
}

type Lines = futures::io::Lines<std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>>>;

/// The lines of a watch of flunders in `default` after `rv`, asking for `accept`.
async fn watch_lines(client: &Client, rv: &str, accept: &str) -> Lines {
    let request = http::Request::builder()
        .uri(format!(
            "{FLUNDERS}?watch=1&resourceVersion={rv}&timeoutSeconds=10"
        ))
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let stream = tokio::time::timeout(Duration::from_secs(10), client.request_stream(request))
        .await
        .unwrap()
        .unwrap();
    let stream: std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>> = Box::pin(stream);
    stream.lines()
}

/// The next watch event, within 10 s.
async fn next_event(lines: &mut Lines) -> Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .expect("an event in time")
        .expect("an event")
        .unwrap();
    serde_json::from_str(&line).unwrap()
}

async fn watch_as_table(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut table_events = watch_lines(&client, &rv, TABLE).await;
    api.create(&PostParams::default(), &flunder("w", "one"))
        .await
        .unwrap();
    let event = next_event(&mut table_events).await;
    assert_eq!(event["type"], "ADDED", "{event}");
    let table = &event["object"];
    assert_eq!(table["kind"], "Table", "{event}");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1", "{event}");
    assert_eq!(table["rows"][0]["cells"][0], "w", "{event}");
    assert_partial_metadata(&table["rows"][0]["object"], "w");

    // Metadata-only events.
    let event = next_event(&mut watch_lines(&client, &rv, POM).await).await;
    assert_eq!(event["type"], "ADDED", "{event}");
    assert_partial_metadata(&event["object"], "w");

    // A watch cannot be metadata-list shaped, nor YAML (kube-apiserver has no YAML stream
    // encoder).
    let path = format!("{FLUNDERS}?watch=1&timeoutSeconds=1");
    assert_status(&get(&client, &path, POM_LIST).await, 406, "NotAcceptable");
    // kube-apiserver negotiates the error as any object: YAML asked for, a YAML Status.
    let reply = get(&client, &path, "application/yaml").await;
    assert_eq!(reply.code, StatusCode::NOT_ACCEPTABLE, "{}", reply.text());
    assert_eq!(reply.header("content-type"), "application/yaml");
    let status: Value = serde_norway::from_slice(&reply.body).unwrap();
    assert_eq!(status["reason"], "NotAcceptable", "{status}");
    server.stop().await;
}

async fn status_subresource(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");

    // Status sent on create is dropped.
    let mut f = flunder("s", "one");
    f.status = Some(FlunderStatus {});
    let created = api.create(&PostParams::default(), &f).await.unwrap();
    assert_eq!(created.status, None);

    // A status update keeps the spec, and does not bump the generation.
    let mut changed = created.clone();
    changed.spec.reference = Some("changed".into());
    changed.status = Some(FlunderStatus {});
    let stored = api
        .replace_status("s", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(stored.spec.reference.as_deref(), Some("one"));
    assert_eq!(stored.status, Some(FlunderStatus {}));
    assert_eq!(stored.metadata.generation, Some(1));
    assert_ne!(
        stored.metadata.resource_version,
        created.metadata.resource_version
    );
    let patch =
        json!({"spec": {"reference": "patched"}, "metadata": {"labels": {"via": "status"}}});
    let patched = api
        .patch_status("s", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.spec.reference.as_deref(), Some("one"));
    assert_eq!(patched.status, Some(FlunderStatus {}));
    assert_eq!(api.get_status("s").await.unwrap(), patched);

    // A main-resource update ignores the status it is sent and keeps the stored one.
    let mut main = patched.clone();
    main.spec.reference = Some("two".into());
    main.status = None;
    let updated = api
        .replace("s", &PostParams::default(), &main)
        .await
        .unwrap();
    assert_eq!(updated.spec.reference.as_deref(), Some("two"));
    assert_eq!(updated.status, Some(FlunderStatus {}));
    assert_eq!(updated.metadata.generation, Some(2));

    // kubectl reads the subresource.
    let raw = ok(server.kubectl(&["get", "--raw", &format!("{FLUNDERS}/s/status")]));
    let raw: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(raw["kind"], "Flunder", "{raw}");
    assert_eq!(raw["metadata"]["name"], "s", "{raw}");

    // There is no create, list or delete of a status: kube-apiserver routes only get, update
    // and patch there.
    let body = serde_json::to_vec(&flunder("t", "x")).unwrap();
    let json_body = [("content-type", "application/json")];
    let reply = send(
        &client,
        "POST",
        &format!("{FLUNDERS}/t/status"),
        &json_body,
        body,
    )
    .await;
    assert_status(&reply, 405, "MethodNotAllowed");
    let reply = send(
        &client,
        "DELETE",
        &format!("{FLUNDERS}/s/status"),
        &[],
        Vec::new(),
    )
    .await;
    assert_status(&reply, 405, "MethodNotAllowed");
    assert!(api.get_opt("t").await.unwrap().is_none());
    assert!(api.get_opt("s").await.unwrap().is_some());
    server.stop().await;
}

async fn kubectl_verbs(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let mut all = String::new();
    for (i, name) in ["a", "b", "c", "d"].iter().enumerate() {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        all.push_str(&flunder_yaml(name, name, &format!("tier: {tier}")));
        all.push_str("---\n");
    }
    let file = write(dir.path(), "all.yaml", &all);
    ok(server.kubectl(&["create", "-f", &file]));

    // Field selector on the name, jsonpath over a list.
    let out = ok(server.kubectl(&[
        "get",
        "fl",
        "--field-selector",
        "metadata.name=b",
        "-o",
        "name",
    ]));
    assert_eq!(out.trim(), "flunder.wardle.example.com/b");
    let out = ok(server.kubectl(&["get", "fl", "-o", "jsonpath={.items[*].metadata.name}"]));
    assert_eq!(names(&out), ["a", "b", "c", "d"]);
    let out = ok(server.kubectl(&[
        "get",
        "fl",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.spec.referenceType}{\"\\n\"}{end}",
    ]));
    assert!(
        out.contains("a=Flunder\n") && out.contains("d=Flunder\n"),
        "{out}"
    );

    // generateName.
    let generated = write(
        dir.path(),
        "gen.yaml",
        "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  generateName: gen-\n  namespace: default\nspec:\n  reference: x\n",
    );
    let out = ok(server.kubectl(&["create", "-f", &generated, "-o", "name"]));
    let name = out
        .trim()
        .strip_prefix("flunder.wardle.example.com/")
        .unwrap();
    assert!(name.starts_with("gen-") && name.len() > 4, "{out}");
    let out = ok(server.kubectl(&["create", "-f", &generated, "-o", "name"]));
    assert_ne!(out.trim(), format!("flunder.wardle.example.com/{name}"));

    // Server-side dry run stores nothing, on create and on change.
    let dry = write(dir.path(), "dry.yaml", &flunder_yaml("dry", "x", "a: b"));
    let out = ok(server.kubectl(&["apply", "--dry-run=server", "-f", &dry]));
    assert!(out.contains("created (server dry run)"), "{out}");
    let missing = server.kubectl(&["get", "fl", "dry"]);
    assert!(
        !missing.success && missing.stderr.contains("NotFound"),
        "{missing:?}"
    );
    let changed = write(
        dir.path(),
        "a.yaml",
        &flunder_yaml("a", "zzz", "tier: even"),
    );
    ok(server.kubectl(&["apply", "--dry-run=server", "-f", &changed]));
    let out = ok(server.kubectl(&["get", "fl", "a", "-o", "jsonpath={.spec.reference}"]));
    assert_eq!(out, "a");

    // Strategic merge patch on labels keeps the others; label and annotate.
    ok(server.kubectl(&[
        "patch",
        "fl",
        "a",
        "--type=strategic",
        "-p",
        r#"{"metadata":{"labels":{"extra":"yes"}}}"#,
    ]));
    ok(server.kubectl(&["label", "fl", "a", "color=blue"]));
    ok(server.kubectl(&["annotate", "fl", "a", "note=hello"]));
    let labelled = ok(server.kubectl(&["get", "fl", "a", "-o", "json"]));
    let labelled: Value = serde_json::from_str(&labelled).unwrap();
    assert_eq!(
        labelled["metadata"]["labels"],
        json!({"tier": "even", "extra": "yes", "color": "blue"})
    );
    assert_eq!(labelled["metadata"]["annotations"]["note"], "hello");
    let clash = server.kubectl(&["label", "fl", "a", "color=red"]);
    assert!(!clash.success, "{clash:?}");
    ok(server.kubectl(&["label", "fl", "a", "color=red", "--overwrite"]));
    ok(server.kubectl(&["label", "fl", "a", "color-"]));
    ok(server.kubectl(&["annotate", "fl", "a", "note-"]));
    let out = ok(server.kubectl(&["get", "fl", "-l", "color", "-o", "name"]));
    assert_eq!(out.trim(), "");

    // Delete by label, then all.
    let out = ok(server.kubectl(&["delete", "fl", "-l", "tier=odd"]));
    assert!(
        out.contains("\"b\" deleted") && out.contains("\"d\" deleted"),
        "{out}"
    );
    let out = ok(server.kubectl(&["get", "fl", "-o", "name"]));
    assert_eq!(out.lines().count(), 4, "{out}");
    ok(server.kubectl(&["delete", "fl", "--all"]));
    let out = ok(server.kubectl(&["get", "fl", "-o", "name"]));
    assert_eq!(out.trim(), "", "{out}");

    // Cluster-scoped fischers: listed without a namespace, not found under one.
    let fischer = write(
        dir.path(),
        "fischer.yaml",
        "apiVersion: wardle.example.com/v1alpha1\nkind: Fischer\nmetadata:\n  name: fish\ndisallowedFlunders: [bad]\n",
    );
    ok(server.kubectl(&["create", "-f", &fischer]));
    let out = ok(server.kubectl(&["get", "fischers", "--no-headers"]));
    assert!(out.starts_with("fish ") && out.contains("bad"), "{out}");
    let out = ok(server.kubectl(&["get", "fischers", "-n", "default", "-o", "name"]));
    assert_eq!(out.trim(), "fischer.wardle.example.com/fish");
    let under_ns = server.kubectl(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/fischers/fish",
    ]);
    assert!(!under_ns.success, "{under_ns:?}");
    assert!(under_ns.stderr.contains("NotFound"), "{under_ns:?}");
    server.stop().await;
}

async fn delete_collection(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    for (name, tier) in [("a", "x"), ("b", "y"), ("c", "x")] {
        let mut f = flunder(name, "r");
        f.metadata.labels = Some([("tier".to_string(), tier.to_string())].into());
        api.create(&PostParams::default(), &f).await.unwrap();
    }
    let other: Api<Flunder> = Api::namespaced(client.clone(), "other");
    other
        .create(&PostParams::default(), &flunder("a", "r"))
        .await
        .unwrap();

    let dry = api
        .delete_collection(
            &DeleteParams::default().dry_run(),
            &ListParams::default().labels("tier=x"),
        )
        .await
        .unwrap();
    let dry = dry.left().expect("a list of what would be deleted");
    assert_eq!(dry.items.len(), 2);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );

    let deleted = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("tier=x"),
        )
        .await
        .unwrap()
        .left()
        .unwrap();
    let mut gone: Vec<String> = deleted
        .items
        .iter()
        .map(|f| f.metadata.name.clone().unwrap())
        .collect();
    gone.sort();
    assert_eq!(gone, ["a", "c"]);
    let left = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(left.items.len(), 1);
    assert_eq!(
        other
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    server.stop().await;
}

async fn health_version_and_anonymous(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let anonymous = anonymous_client(&server).await;

    for c in [&client, &anonymous] {
        for path in ["/healthz", "/livez", "/readyz"] {
            let reply = get(c, path, "*/*").await;
            assert_eq!(reply.code, StatusCode::OK, "{path}: {}", reply.text());
            assert_eq!(reply.text(), "ok", "{path}");
            assert!(
                reply.header("content-type").starts_with("text/plain"),
                "{path}"
            );
        }
        let reply = get(c, "/readyz?verbose", "*/*").await;
        assert_eq!(reply.code, StatusCode::OK);
        let text = reply.text();
        assert!(text.contains("[+]ping ok"), "{text}");
        assert!(text.ends_with("readyz check passed\n"), "{text}");
        let reply = get(c, "/livez?verbose=1", "*/*").await;
        assert!(reply.text().contains("[+]ping ok"), "{}", reply.text());

        let reply = get(c, "/version", "application/json").await;
        assert_eq!(reply.code, StatusCode::OK);
        assert!(reply.header("content-type").starts_with("application/json"));
        let version = reply.json();
        for key in ["major", "minor", "gitVersion", "platform"] {
            assert!(version[key].is_string(), "{version}");
        }
    }
    // Each check on its own path (for authenticated callers: kube-apiserver always allows only
    // the roots), `exclude`, and 404 for a check that does not exist.
    let reply = get(&client, "/healthz/ping", "*/*").await;
    assert_eq!((reply.code, reply.text().as_str()), (StatusCode::OK, "ok"));
    // The storage check is named for the backend: `etcd` as kube-apiserver's, `postgres`, else
    // `storage`.
    #[allow(unreachable_patterns)]
    let check = match backend {
        #[cfg(feature = "etcd")]
        Backend::Etcd3 => "etcd",
        #[cfg(feature = "postgres")]
        Backend::Postgres => "postgres",
        _ => "storage",
    };
    let reply = get(&client, &format!("/readyz/{check}"), "*/*").await;
    assert_eq!((reply.code, reply.text().as_str()), (StatusCode::OK, "ok"));
    let reply = get(&client, "/readyz/nonesuch", "*/*").await;
    assert_eq!(reply.code, StatusCode::NOT_FOUND, "{}", reply.text());
    let text = get(
        &client,
        &format!("/readyz?verbose&exclude={check}&exclude=nope"),
        "*/*",
    )
    .await
    .text();
    assert!(
        text.contains(&format!("[+]{check} excluded: ok\n")),
        "{text}"
    );
    assert!(
        text.contains("warn: some health checks cannot be excluded: no matches for \"nope\"\n"),
        "{text}"
    );
    assert_eq!(
        get(&client, "/livez?exclude=ping", "*/*").await.text(),
        "ok"
    );

    let info = client.apiserver_version().await.unwrap();
    assert!(info.git_version.starts_with('v'), "{info:?}");

    // Anything else needs credentials.
    for path in [
        "/apis",
        "/apis/wardle.example.com/v1alpha1",
        FLUNDERS,
        "/openapi/v2",
    ] {
        let reply = get(&anonymous, path, "application/json").await;
        assert_status(&reply, 401, "Unauthorized");
    }

    // kubectl without credentials: health yes, resources no.
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig).unwrap();
    let stripped = strip_user_credentials(&kubeconfig);
    let path = write(dir.path(), "anonymous.kubeconfig", &stripped);
    let run = |args: &[&str]| kubectl(path.as_ref(), args, &[]);
    assert_eq!(ok(run(&["get", "--raw", "/readyz"])), "ok");
    let denied = run(&["get", "--raw", FLUNDERS]);
    assert!(!denied.success, "{denied:?}");
    assert!(denied.stderr.contains("Unauthorized"), "{denied:?}");
    server.stop().await;
}

/// The kubeconfig without the user's certificate and key, so kubectl sends no credentials
/// kube-apiserver verifies. A bare user name keeps kubectl from prompting for one; the basic
/// auth header it then sends is ignored, as kube-apiserver ignores it. (Not a made-up bearer
/// token: kube-apiserver answers a token it cannot verify with 401 on every path, health
/// included.)
fn strip_user_credentials(kubeconfig: &str) -> String {
    let mut out = String::new();
    let mut replaced = false;
    for line in kubeconfig.lines() {
        let key = line.trim_start();
        if key.starts_with("client-certificate") || key.starts_with("client-key") {
            if !replaced {
                let indent = &line[..line.len() - key.len()];
                out.push_str(&format!("{indent}username: nobody\n"));
                replaced = true;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(replaced, "no client certificate in {kubeconfig}");
    out
}

async fn discovery_and_openapi(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;

    let groups: Value =
        serde_json::from_str(&ok(server.kubectl(&["get", "--raw", "/apis"]))).unwrap();
    assert_eq!(groups["kind"], "APIGroupList", "{groups}");
    let wardle = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "wardle.example.com")
        .unwrap_or_else(|| panic!("{groups}"));
    assert_eq!(
        wardle["preferredVersion"]["groupVersion"],
        "wardle.example.com/v1alpha1"
    );

    let reply = get(&client, "/apis", DISCOVERY_V2).await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    assert!(
        reply
            .header("content-type")
            .contains("as=APIGroupDiscoveryList"),
        "{:?}",
        reply.headers
    );
    let aggregated = reply.json();
    assert_eq!(aggregated["kind"], "APIGroupDiscoveryList", "{aggregated}");
    assert_eq!(aggregated["apiVersion"], "apidiscovery.k8s.io/v2");
    let group = &aggregated["items"][0];
    assert_eq!(
        group["metadata"]["name"], "wardle.example.com",
        "{aggregated}"
    );
    let resources = group["versions"][0]["resources"].as_array().unwrap();
    let flunders = resources
        .iter()
        .find(|r| r["resource"] == "flunders")
        .unwrap();
    assert_eq!(flunders["scope"], "Namespaced");
    assert_eq!(
        flunders["subresources"][0]["subresource"], "status",
        "{flunders}"
    );
    let discovered = client.list_api_groups_aggregated().await.unwrap();
    assert!(
        discovered
            .items
            .iter()
            .any(|g| g.metadata.as_ref().and_then(|m| m.name.as_deref())
                == Some("wardle.example.com"))
    );

    // Conditional discovery: an ETag, and 304 when it still matches.
    let gv = "/apis/wardle.example.com/v1alpha1";
    let reply = get(&client, gv, "application/json").await;
    assert_eq!(reply.json()["kind"], "APIResourceList");
    let etag = reply.header("etag").to_string();
    assert!(!etag.is_empty(), "{:?}", reply.headers);
    let reply = send(
        &client,
        "GET",
        gv,
        &[("accept", "application/json"), ("if-none-match", &etag)],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.code, StatusCode::NOT_MODIFIED, "{}", reply.text());
    assert!(reply.body.is_empty());
    let reply = send(
        &client,
        "GET",
        gv,
        &[("if-none-match", "\"other\"")],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.code, StatusCode::OK);

    // OpenAPI v2 with the GVK extension kubectl uses to find a type's schema.
    let v2 = get(&client, "/openapi/v2", "application/json").await.json();
    let definitions = v2["definitions"].as_object().unwrap();
    let flunder = definitions
        .values()
        .find(|d| {
            d["x-kubernetes-group-version-kind"]
                .as_array()
                .is_some_and(|g| {
                    g.iter()
                        .any(|k| k["kind"] == "Flunder" && k["group"] == "wardle.example.com")
                })
        })
        .unwrap_or_else(|| panic!("no Flunder in {:?}", definitions.keys().collect::<Vec<_>>()));
    assert!(flunder["properties"]["spec"].is_object(), "{flunder}");

    // OpenAPI v3: the index points at the group version, and that document has the type.
    let index = get(&client, "/openapi/v3", "application/json").await.json();
    let entry = &index["paths"]["apis/wardle.example.com/v1alpha1"];
    let url = entry["serverRelativeURL"]
        .as_str()
        .unwrap_or_else(|| panic!("{index}"));
    let doc = get(&client, url, "application/json").await;
    assert_eq!(doc.code, StatusCode::OK, "{}", doc.text());
    let doc = doc.json();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );
    assert!(doc["components"]["schemas"].as_object().unwrap().len() > 2);
    server.stop().await;
}

async fn unknown_fields_warn(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;

    let body = br#"{"apiVersion":"wardle.example.com/v1alpha1","kind":"Flunder","metadata":{"name":"w"},"spec":{"reference":"r","nope":1}}"#;
    let reply = send(
        &client,
        "POST",
        FLUNDERS,
        &[("content-type", "application/json")],
        body.to_vec(),
    )
    .await;
    assert_eq!(reply.code, StatusCode::CREATED, "{}", reply.text());
    let warnings: Vec<&str> = reply
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.nope\"""#]);
    assert!(reply.json()["spec"].get("nope").is_none());

    // Ignore: no warning.
    let body = br#"{"metadata":{"name":"i"},"spec":{"nope":1}}"#;
    let reply = send(
        &client,
        "POST",
        &format!("{FLUNDERS}?fieldValidation=Ignore"),
        &[("content-type", "application/json")],
        body.to_vec(),
    )
    .await;
    assert_eq!(reply.code, StatusCode::CREATED, "{}", reply.text());
    assert!(
        reply.headers.get("warning").is_none(),
        "{:?}",
        reply.headers
    );

    // kubectl prints the server's warnings on stderr.
    let file = write(
        dir.path(),
        "k.yaml",
        "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: k\n  namespace: default\nspec:\n  reference: r\n  bogus: true\n",
    );
    let out = server.kubectl(&["create", "--validate=warn", "-f", &file]);
    assert!(out.success, "{out:?}");
    assert!(
        out.stderr.contains("Warning: unknown field \"spec.bogus\""),
        "{out:?}"
    );

    // A strict patch that leaves an unknown field is kube's 422 at `patch` (not the 400 of a
    // create body), in each served version: `kubectl apply --validate=strict` patches, and
    // prints what kube-apiserver answers.
    let manifests = [
        ("v1alpha1", "reference: r"),
        ("v1beta1", "flunderReference: r\n  referenceType: Flunder"),
    ];
    for (version, spec) in manifests {
        let manifest = format!(
            "apiVersion: wardle.example.com/{version}\nkind: Flunder\nmetadata:\n  name: k\n  namespace: default\nspec:\n  {spec}\n  nope: 1\n"
        );
        let file = write(dir.path(), &format!("{version}.yaml"), &manifest);
        let out = server.kubectl(&["apply", "--validate=strict", "-f", &file]);
        assert!(!out.success, "{out:?}");
        assert!(
            out.stderr
                .contains("The request is invalid: patch: Invalid value: \"map[metadata:"),
            "{out:?}"
        );
        assert!(
            out.stderr
                .contains("strict decoding error: unknown field \"spec.nope\""),
            "{out:?}"
        );
    }
    let patch = r#"{"spec":{"nope":1}}"#;
    let reply = send(
        &client,
        "PATCH",
        &format!("{FLUNDERS}/k?fieldValidation=Strict"),
        &[("content-type", "application/merge-patch+json")],
        patch.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(
        reply.code,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text()
    );
    let status = reply.json();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["causes"][0]["field"], "patch");
    server.stop().await;
}

/// The answers kube-apiserver gives a custom resource of the same shape (and sample-apiserver
/// its Flunder) for deletes with finalizers and propagation policies, preconditions, and
/// updates without a resourceVersion or with another uid.
/// Server-side applies by two managers through the two served versions, where v1beta1's
/// `fischerReference` is v1alpha1's `reference`: the answers and managedFields the Go
/// sample-apiserver gives for the same requests (checked side by side in a real cluster).
async fn applies_through_two_versions_answer_as_kube(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let beta = "/apis/wardle.example.com/v1beta1/namespaces/default/flunders/m";
    let alpha = format!("{FLUNDERS}/m");
    let apply = [("content-type", "application/apply-patch+yaml")];
    let config = |version: &str, spec: Value, label: &str| {
        let body = json!({"apiVersion": format!("wardle.example.com/{version}"), "kind": "Flunder",
            "metadata": {"name": "m", "namespace": "default", "labels": {label: "1"}},
            "spec": spec});
        serde_json::to_vec(&body).unwrap()
    };
    let fields = |object: &Value, manager: &str| {
        let entries = object["metadata"]["managedFields"].as_array().unwrap();
        let entry = entries.iter().find(|e| e["manager"] == manager).unwrap();
        entry["fieldsV1"].clone()
    };
    let beta_spec = json!({"referenceType": "Fischer", "fischerReference": "f"});
    let reply = send(
        &client,
        "PATCH",
        &format!("{beta}?fieldManager=beta"),
        &apply,
        config("v1beta1", beta_spec, "x"),
    )
    .await;
    assert_eq!(reply.code, 201, "{}", reply.text());

    // An empty map applied is owned as a field of its own.
    let reply = send(
        &client,
        "PATCH",
        &format!("{alpha}?fieldManager=alpha"),
        &apply,
        config("v1alpha1", json!({}), "y"),
    )
    .await;
    assert_eq!(reply.code, 200, "{}", reply.text());
    let object = reply.json();
    assert_eq!(
        fields(&object, "alpha"),
        json!({"f:metadata": {"f:labels": {"f:y": {}}}, "f:spec": {}})
    );
    assert_eq!(
        object["spec"],
        json!({"reference": "f", "referenceType": "Fischer"})
    );

    // v1alpha1's `reference` is v1beta1's `fischerReference`, which `beta` owns: a conflict
    // named in beta's version, then forced.
    let with_reference = || config("v1alpha1", json!({"reference": "r"}), "y");
    let reply = send(
        &client,
        "PATCH",
        &format!("{alpha}?fieldManager=alpha"),
        &apply,
        with_reference(),
    )
    .await;
    assert_status(&reply, 409, "Conflict");
    let body = reply.json();
    assert_eq!(
        body["message"],
        "Apply failed with 1 conflict: conflict with \"beta\": .spec.fischerReference"
    );
    let reply = send(
        &client,
        "PATCH",
        &format!("{alpha}?fieldManager=alpha&force=true"),
        &apply,
        with_reference(),
    )
    .await;
    assert_eq!(reply.code, 200, "{}", reply.text());
    let object = reply.json();
    assert_eq!(object["apiVersion"], "wardle.example.com/v1alpha1");
    assert_eq!(
        object["spec"],
        json!({"reference": "r", "referenceType": "Fischer"})
    );
    assert_eq!(
        fields(&object, "alpha"),
        json!({"f:metadata": {"f:labels": {"f:y": {}}}, "f:spec": {"f:reference": {}}})
    );
    assert_eq!(
        fields(&object, "beta"),
        json!({"f:metadata": {"f:labels": {"f:x": {}}}, "f:spec": {"f:referenceType": {}}})
    );
}

async fn deletes_and_updates_answer_as_kube(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    let json_body = [("content-type", "application/json")];
    let mut held = flunder("held", "r");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let held = api.create(&PostParams::default(), &held).await.unwrap();
    let one = format!("{FLUNDERS}/held");

    // A precondition that fails names the kind (kube's BeforeDelete).
    let wrong = br#"{"preconditions":{"uid":"not-it"}}"#.to_vec();
    let reply = send(&client, "DELETE", &one, &json_body, wrong).await;
    assert_status(&reply, 409, "Conflict");
    let body = reply.json();
    assert_eq!(body["details"]["kind"], "Flunder", "{body}");
    assert_eq!(body["details"]["group"], "wardle.example.com", "{body}");
    let uid = held.metadata.uid.clone().unwrap();
    assert_eq!(
        body["message"],
        format!(
            "Operation cannot be fulfilled on Flunder.wardle.example.com \"held\": the UID in the precondition (not-it) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );

    // A dryRun value kube does not know: 422 on DeleteOptions, the list as Go prints it.
    let bogus = br#"{"dryRun":["Bogus"]}"#.to_vec();
    let reply = send(&client, "DELETE", &one, &json_body, bogus).await;
    assert_status(&reply, 422, "Invalid");
    assert_eq!(
        reply.json()["message"],
        r#"DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Bogus"}: supported values: "All""#
    );

    // A policy kube does not know: 422 on DeleteOptions.
    let reply = send(
        &client,
        "DELETE",
        &format!("{one}?propagationPolicy=Sideways"),
        &[],
        Vec::new(),
    )
    .await;
    assert_status(&reply, 422, "Invalid");
    assert_eq!(
        reply.json()["details"]["causes"][0]["field"],
        "propagationPolicy"
    );

    // Finalizers keep it: 200 with the object, now carrying deletionTimestamp.
    let reply = send(&client, "DELETE", &one, &[], Vec::new()).await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["kind"], "Flunder", "{body}");
    assert!(body["metadata"]["deletionTimestamp"].is_string(), "{body}");
    // 202 only with the deprecated orphanDependents=false.
    let legacy = br#"{"orphanDependents":false}"#.to_vec();
    let reply = send(&client, "DELETE", &one, &json_body, legacy).await;
    assert_eq!(reply.code, StatusCode::ACCEPTED, "{}", reply.text());

    // Foreground keeps an object without finalizers, with foregroundDeletion.
    api.create(&PostParams::default(), &flunder("fg", "r"))
        .await
        .unwrap();
    let reply = send(
        &client,
        "DELETE",
        &format!("{FLUNDERS}/fg?propagationPolicy=Foreground"),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    assert_eq!(
        reply.json()["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(
        api.get("fg")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    // A PUT without resourceVersion: 422, as custom resources and sample-apiserver answer.
    let mut blind = serde_json::to_value(api.get("fg").await.unwrap()).unwrap();
    blind["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    let body = serde_json::to_vec(&blind).unwrap();
    let reply = send(&client, "PUT", &format!("{FLUNDERS}/fg"), &json_body, body).await;
    assert_status(&reply, 422, "Invalid");
    assert_eq!(
        reply.json()["message"],
        "flunders.wardle.example.com \"fg\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    // Another uid: 409, a failed storage precondition.
    let mut other = serde_json::to_value(api.get("fg").await.unwrap()).unwrap();
    other["metadata"]["uid"] = json!("6a7d4a62-0000-0000-0000-000000000000");
    let body = serde_json::to_vec(&other).unwrap();
    let reply = send(&client, "PUT", &format!("{FLUNDERS}/fg"), &json_body, body).await;
    assert_status(&reply, 409, "Conflict");
    assert_eq!(reply.json()["details"]["kind"], "flunders");

    // The write that removes the last finalizer answers the object without it; it is gone.
    let patch = json!({"metadata": {"finalizers": null}});
    let last = api
        .patch("fg", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(last.metadata.finalizers, None);
    assert!(last.metadata.deletion_timestamp.is_some());
    assert!(api.get_opt("fg").await.unwrap().is_none());
    server.stop().await;
}

/// JSON that does not fit Flunder: 422 with one cause per field, as kube-apiserver's schema
/// validation answers for a custom resource of the same shape; nothing is stored.
async fn bodies_that_do_not_fit_are_invalid(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let client = client(&server).await;
    let body = br#"{"metadata":{"name":"t"},"spec":{"reference":5,"referenceType":["Flunder"]}}"#;
    let json_body = [("content-type", "application/json")];
    let reply = send(&client, "POST", FLUNDERS, &json_body, body.to_vec()).await;
    assert_status(&reply, 422, "Invalid");
    let status = reply.json();
    // Flunder has CEL rules: as for a CRD with rules, they do not run on a body of the
    // wrong types, and the answer says so.
    assert_eq!(
        status["message"],
        r#"Flunder.wardle.example.com "t" is invalid: [spec.reference: Invalid value: "integer": spec.reference in body must be of type string: "integer", spec.referenceType: Invalid value: "array": spec.referenceType in body must be of type string: "array", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"#
    );
    assert_eq!(status["details"]["name"], "t");
    assert_eq!(status["details"]["kind"], "Flunder");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.reference");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueTypeInvalid"
    );
    // kubectl shows kube's message.
    let file = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: k\n  namespace: default\nspec:\n  reference: [a]\n",
    );
    let out = server.kubectl(&["create", "-f", &file]);
    assert!(!out.success, "{out:?}");
    assert!(
        out.stderr
            .contains("spec.reference in body must be of type string"),
        "{out:?}"
    );
    let api: Api<Flunder> = Api::namespaced(client, "default");
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    server.stop().await;
}

// What kube-apiserver answers at the HTTP edge, beyond the verbs: body limit on both
// protocols, bodies without Content-Type, version and help, the headers of every response,
// errors in YAML, storageVersionHash, and how query parameters and bodies are judged. One
// server (in memory): none of this depends on the backend.

const BIG_BODY: usize = 4 * 1024 * 1024;

/// TLS to `server` as its admin (client certificate), offering `alpn`.
async fn admin_tls(
    server: &TestServer,
    dir: &std::path::Path,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let certs = dir.join("certs");
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(certs.join("serving-ca.crt")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs.join("admin.crt"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let key = PrivateKeyDer::from_pem_file(certs.join("admin.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, tcp).await.unwrap()
}

use std::sync::Arc;

/// POSTs a 4 MiB flunder over a new connection (HTTP/2 or HTTP/1.1, by hyper) and returns
/// the code and the body of the answer.
async fn post_big(server: &TestServer, dir: &std::path::Path, http2: bool) -> (u16, Value) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let body = format!(
        r#"{{"metadata":{{"name":"big"}},"spec":{{"reference":"{}"}}}}"#,
        "x".repeat(BIG_BODY)
    );
    let request = http::Request::post(FLUNDERS)
        .header("content-type", "application/json")
        .header("host", "127.0.0.1")
        .body(Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let alpn: &[u8] = if http2 { b"h2" } else { b"http/1.1" };
    let io = TokioIo::new(admin_tls(server, dir, alpn).await);
    let response = if http2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        sender.send_request(request).await
    };
    let response = response.expect("an answer, not a reset");
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&bytes).unwrap())
}

/// curl's answer (code, body) to a 4 MiB POST over `protocol` (`--http2` or `--http1.1`).
fn curl_big(dir: &std::path::Path, server: &TestServer, protocol: &str) -> (String, String) {
    let certs = dir.join("certs");
    let out = std::process::Command::new("curl")
        .args(["-sS", protocol, "-o", "-", "-w", "\n%{http_code}"])
        .arg("--cacert")
        .arg(certs.join("serving-ca.crt"))
        .arg("--cert")
        .arg(certs.join("admin.crt"))
        .arg("--key")
        .arg(certs.join("admin.key"))
        .args(["-H", "content-type: application/json", "--data-binary"])
        .arg(format!("@{}", dir.join("big.json").display()))
        .arg(format!("https://{}{FLUNDERS}", server.addr))
        .output()
        .expect("curl runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "curl {protocol}: {stderr}");
    let (body, code) = stdout.rsplit_once('\n').unwrap();
    (code.to_string(), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_large_bodies_get_the_whole_413_on_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(Backend::Memory, dir.path()).await;
    let assert_413 = |code: u16, status: &Value| {
        assert_eq!(code, 413, "{status}");
        assert_eq!(status["reason"], "RequestEntityTooLarge", "{status}");
        assert_eq!(
            status["message"], "Request entity too large: limit is 3145728",
            "{status}"
        );
    };
    for http2 in [true, false] {
        for _ in 0..20 {
            let (code, status) = post_big(&server, dir.path(), http2).await;
            assert_413(code, &status);
        }
    }
    // curl, which lost the answer to a stream error over HTTP/2 before.
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"spec":{{"reference":"{}"}}}}"#,
        "x".repeat(BIG_BODY)
    );
    write(dir.path(), "big.json", &big);
    for protocol in ["--http2", "--http1.1"] {
        for _ in 0..20 {
            let (code, body) = curl_big(dir.path(), &server, protocol);
            let status: Value = serde_json::from_str(&body).unwrap();
            assert_413(code.parse().unwrap(), &status);
        }
    }
    let client = client(&server).await;
    let api: Api<Flunder> = Api::namespaced(client, "default");
    assert!(api.get_opt("big").await.unwrap().is_none());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_without_content_type_version_and_help() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(Backend::Memory, dir.path()).await;
    let client = client(&server).await;

    // kubectl create --raw sends no Content-Type: read as JSON.
    let file = write(
        dir.path(),
        "raw.json",
        r#"{"apiVersion":"wardle.example.com/v1alpha1","kind":"Flunder","metadata":{"name":"raw"},"spec":{"reference":"r"}}"#,
    );
    let created: Value = serde_json::from_str(&ok(
        server.kubectl(&["create", "--raw", FLUNDERS, "-f", &file])
    ))
    .unwrap();
    assert_eq!(created["metadata"]["name"], "raw", "{created}");
    let reply = send(
        &client,
        "POST",
        FLUNDERS,
        &[("content-type", "text/plain")],
        b"{}".to_vec(),
    )
    .await;
    assert_status(&reply, 415, "UnsupportedMediaType");
    assert_eq!(
        reply.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml"
    );

    // /version as Kubernetes': kubectl version sees no skew.
    let out = server.kubectl(&["version"]);
    assert!(out.success, "{out:?}");
    assert!(out.stdout.contains("Server Version: v1.33.0"), "{out:?}");
    assert!(!out.stderr.to_lowercase().contains("warning"), "{out:?}");

    // --help describes the server first.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_wardle"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let description =
        "The sample-apiserver's wardle.example.com API, built with extension-apiserver";
    assert!(help.starts_with(&format!("{description}\n")), "{help}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn headers_yaml_errors_and_discovery_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(Backend::Memory, dir.path()).await;
    let client = client(&server).await;
    let anonymous = anonymous_client(&server).await;

    // Audit-Id on every answer, a new one each time; Cache-Control on API answers.
    let mut ids = Vec::new();
    for (c, path, code) in [
        (&client, FLUNDERS, 200),
        (&client, "/healthz", 200),
        (&client, "/version", 200),
        (&client, &*format!("{FLUNDERS}/nope"), 404),
        (&anonymous, FLUNDERS, 401),
    ] {
        let reply = get(c, path, "application/json").await;
        assert_eq!(reply.code.as_u16(), code, "{path}: {}", reply.text());
        let id = reply.header("audit-id");
        assert_eq!(id.len(), 36, "{path}: {:?}", reply.headers);
        ids.push(id.to_string());
        assert_eq!(reply.header("cache-control"), "no-cache, private", "{path}");
        assert_eq!(reply.header("x-content-type-options"), "nosniff", "{path}");
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5);
    let reply = send(
        &client,
        "GET",
        "/healthz",
        &[("audit-id", "given")],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.header("audit-id"), "given");

    // Indented JSON for curl and browsers, or with ?pretty=true; compact for the rest.
    let by_curl = send(
        &client,
        "GET",
        FLUNDERS,
        &[("user-agent", "curl/8.0")],
        Vec::new(),
    )
    .await;
    assert!(
        by_curl.text().starts_with("{\n  \"apiVersion\": "),
        "{}",
        by_curl.text()
    );
    let asked = get(
        &client,
        &format!("{FLUNDERS}?pretty=true"),
        "application/json",
    )
    .await;
    assert_eq!(asked.text(), by_curl.text());
    assert!(
        !get(&client, FLUNDERS, "application/json")
            .await
            .text()
            .contains('\n')
    );
    assert_eq!(
        asked.json(),
        get(&client, FLUNDERS, "application/json").await.json()
    );

    // An error asked for as YAML is YAML.
    let reply = get(&client, &format!("{FLUNDERS}/nope"), "application/yaml").await;
    assert_eq!(reply.code, StatusCode::NOT_FOUND);
    assert_eq!(reply.header("content-type"), "application/yaml");
    let status: Value = serde_norway::from_slice(&reply.body).unwrap();
    assert_eq!(
        (&status["kind"], &status["reason"]),
        (&json!("Status"), &json!("NotFound"))
    );

    // storageVersionHash: base64 of sha256("wardle.example.com/v1alpha1/Flunder")[..8].
    let list = get(
        &client,
        "/apis/wardle.example.com/v1alpha1",
        "application/json",
    )
    .await
    .json();
    let hashes: Vec<(&str, Option<&str>)> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["storageVersionHash"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        hashes,
        [
            ("fischers", Some("YS5qRiSxzNM=")),
            ("flunders", Some("UHqNx5H3K7A=")),
            ("flunders/status", None),
        ]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parameters_and_bodies_are_judged_as_kube_apiserver() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(Backend::Memory, dir.path()).await;
    let client = client(&server).await;
    let json_body = [("content-type", "application/json")];

    // Unknown parameters are ignored.
    let reply = get(
        &client,
        &format!("{FLUNDERS}?bogus=1&limit=5"),
        "application/json",
    )
    .await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    let body = br#"{"metadata":{"name":"p"},"spec":{"reference":"r"}}"#.to_vec();
    let reply = send(
        &client,
        "POST",
        &format!("{FLUNDERS}?bogus=1"),
        &json_body,
        body,
    )
    .await;
    assert_eq!(reply.code, StatusCode::CREATED, "{}", reply.text());

    // Flags decode as kube's: anything but 0, f or false is true; includeObject is read only
    // for a Table.
    let reply = get(
        &client,
        &format!("{FLUNDERS}?watch=yes&timeoutSeconds=1"),
        "application/json",
    )
    .await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    let event: Value = serde_json::from_str(reply.text().lines().next().unwrap()).unwrap();
    assert_eq!(event["type"], "ADDED", "{event}");
    let reply = get(
        &client,
        &format!("{FLUNDERS}/p?includeObject=All"),
        "application/json",
    )
    .await;
    assert_eq!(reply.code, StatusCode::OK, "{}", reply.text());
    let reply = get(&client, &format!("{FLUNDERS}/p?includeObject=All"), TABLE).await;
    assert_status(&reply, 400, "BadRequest");
    assert_eq!(
        reply.json()["message"],
        r#"unrecognized includeObject value: "All""#
    );

    // Duplicate fields: 400 with Strict, a warning with Warn, nothing with Ignore.
    let dup = |name: &str| {
        format!(r#"{{"metadata":{{"name":"{name}"}},"spec":{{"reference":"a","reference":"b"}}}}"#)
            .into_bytes()
    };
    let path = format!("{FLUNDERS}?fieldValidation=Strict");
    let reply = send(&client, "POST", &path, &json_body, dup("s")).await;
    assert_status(&reply, 400, "BadRequest");
    assert_eq!(
        reply.json()["message"],
        r#"Flunder in version "v1alpha1" cannot be handled as a Flunder: strict decoding error: duplicate field "spec.reference""#
    );
    let reply = send(&client, "POST", FLUNDERS, &json_body, dup("w")).await;
    assert_eq!(reply.code, StatusCode::CREATED, "{}", reply.text());
    assert_eq!(
        reply.header("warning"),
        r#"299 - "duplicate field \"spec.reference\"""#
    );
    assert_eq!(reply.json()["spec"]["reference"], "b", "the last one wins");
    let path = format!("{FLUNDERS}?fieldValidation=Ignore");
    let reply = send(&client, "POST", &path, &json_body, dup("i")).await;
    assert_eq!(reply.code, StatusCode::CREATED, "{}", reply.text());
    assert!(
        reply.headers.get("warning").is_none(),
        "{:?}",
        reply.headers
    );

    // Bad options: 422 Invalid naming the options kind, with field causes.
    let reply = get(
        &client,
        &format!("{FLUNDERS}?resourceVersionMatch=Exact"),
        "application/json",
    )
    .await;
    assert_status(&reply, 422, "Invalid");
    let status = reply.json();
    assert_eq!(
        status["message"],
        r#"ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"#
    );
    assert_eq!(status["details"]["kind"], "ListOptions");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "resourceVersionMatch"
    );
    let path = format!("{FLUNDERS}?dryRun=Sometimes");
    let reply = send(&client, "POST", &path, &json_body, dup("d")).await;
    assert_status(&reply, 422, "Invalid");

    let merge = [("content-type", "application/merge-patch+json")];
    let reply = send(
        &client,
        "PATCH",
        &format!("{FLUNDERS}/p?force=true"),
        &merge,
        b"{}".to_vec(),
    )
    .await;
    assert_status(&reply, 422, "Invalid");
    assert_eq!(reply.json()["details"]["kind"], "PatchOptions");

    // PUT and PATCH on a collection: 405.
    for (method, content_type) in [
        ("PUT", "application/json"),
        ("PATCH", "application/merge-patch+json"),
    ] {
        let reply = send(
            &client,
            method,
            FLUNDERS,
            &[("content-type", content_type)],
            b"{}".to_vec(),
        )
        .await;
        assert_status(&reply, 405, "MethodNotAllowed");
    }
    server.stop().await;
}
