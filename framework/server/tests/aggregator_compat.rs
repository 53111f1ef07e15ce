//! What kube-aggregator does with an extension server, checked on a real server over TLS:
//!
//! - the availability check: `GET /apis/{group}/{version}` without an `Accept` header (as
//!   Go's client sends it), answered 2xx with the resource list;
//! - discovery merging: the aggregated v2 document and the legacy per-version documents say
//!   the same (resources, kinds, verbs, short names, categories, subresources, scope), with
//!   `freshness: Current`, and both answer `If-None-Match` with 304;
//! - the OpenAPI download: `/openapi/v2` with an ETag (304 on a match), and `/openapi/v3`
//!   whose `?hash=` URLs are served immutable, as kube-apiserver serves them;
//! - proxying: the aggregator talks HTTP/2 to the server; a watch streams events on one
//!   stream while other requests share the connection.
//!
//! Only loopback addresses; every wait is bounded.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::tls::certs::{CertKey, SelfSignedCerts};
use extension_apiserver::tls::{crypto_provider, root_store};
use extension_apiserver::{APIGroup, Resource};
use extension_apiserver_testing::TestServer;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const GROUP: &str = "things.example.com";

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(group = "things.example.com", version = "v1", kind = "Thing", namespaced,
           status = "ThingStatus", shortnames = ["th"], categories = ["all", "stuff"])]
struct Thing {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Option<ThingStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
struct ThingStatus {
    ready: Option<bool>,
}

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[resource(group = "things.example.com", version = "v1beta1", kind = "Gadget")]
struct Gadget {
    #[serde(default)]
    metadata: ObjectMeta,
}

fn groups() -> Vec<APIGroup> {
    vec![
        APIGroup::new(GROUP)
            .version("v1", |v| v.resource::<Thing>())
            .version("v1beta1", |v| v.resource::<Gadget>()),
    ]
}

/// An HTTP/2 connection to `server` with the admin client certificate.
pub(crate) async fn h2(server: &TestServer, dir: &Path) -> SendRequest<Full<Bytes>> {
    let certs = SelfSignedCerts::load_or_create(&dir.join("certs"), &[]).unwrap();
    let admin = CertKey::from_pem(
        certs.admin_cert_pem.as_bytes(),
        certs.admin_key_pem.as_bytes(),
    )
    .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(root_store(&certs.serving_ca()).unwrap())
        .with_client_auth_cert(admin.cert_chain, admin.key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Reply {
    let mut request = http::Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = request.body(Full::new(Bytes::from(body))).unwrap();
    let response = tokio::time::timeout(WAIT, sender.send_request(request))
        .await
        .expect("an answer")
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

#[tokio::test]
async fn the_availability_check_gets_the_resource_list_without_an_accept_header() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), groups()).await;
    let mut h2 = h2(&server, dir.path()).await;
    for version in ["v1", "v1beta1"] {
        for path in [
            format!("/apis/{GROUP}/{version}"),
            format!("/apis/{GROUP}/{version}/"),
        ] {
            let reply = send(&mut h2, "GET", &path, &[], None).await;
            assert_eq!(reply.status, 200, "{path}");
            let list = reply.json();
            assert_eq!(list["kind"], "APIResourceList");
            assert_eq!(list["groupVersion"], format!("{GROUP}/{version}"));
        }
    }
    server.stop().await;
}

/// One resource as both documents can say it: the fields they share.
fn legacy_entry(resource: &Value) -> Value {
    json!({
        "kind": resource["kind"],
        "namespaced": resource["namespaced"],
        "verbs": sorted(&resource["verbs"]),
        "shortNames": sorted(&resource["shortNames"]),
        "categories": sorted(&resource["categories"]),
        "singularName": resource["singularName"],
    })
}

fn sorted(list: &Value) -> Value {
    let mut items: Vec<String> = list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    items.sort();
    json!(items)
}

#[tokio::test]
async fn aggregated_and_legacy_discovery_agree_and_both_revalidate_with_304() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), groups()).await;
    let mut h2 = h2(&server, dir.path()).await;

    let aggregated = send(&mut h2, "GET", "/apis", &[("accept", V2)], None).await;
    assert_eq!(aggregated.status, 200);
    assert_eq!(aggregated.header("content-type"), V2);
    let aggregated_doc = aggregated.json();
    let group = aggregated_doc["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == GROUP)
        .expect("our group")
        .clone();
    let legacy_groups = send(&mut h2, "GET", "/apis", &[], None).await.json();
    let legacy_group = legacy_groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == GROUP)
        .unwrap()
        .clone();
    // The same versions, the preferred one first.
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    let legacy_versions: Vec<&str> = legacy_group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, legacy_versions);
    assert_eq!(legacy_group["preferredVersion"]["version"], versions[0]);

    for version in group["versions"].as_array().unwrap() {
        let name = version["version"].as_str().unwrap();
        assert_eq!(version["freshness"], "Current", "{name}");
        let legacy = send(&mut h2, "GET", &format!("/apis/{GROUP}/{name}"), &[], None).await;
        let legacy = legacy.json();
        let mut from_legacy = BTreeMap::new();
        for r in legacy["resources"].as_array().unwrap() {
            from_legacy.insert(r["name"].as_str().unwrap().to_string(), legacy_entry(r));
        }
        let mut from_aggregated = BTreeMap::new();
        for r in version["resources"].as_array().unwrap() {
            let plural = r["resource"].as_str().unwrap();
            let entry = json!({
                "kind": r["responseKind"]["kind"],
                "namespaced": r["scope"] == "Namespaced",
                "verbs": sorted(&r["verbs"]),
                "shortNames": sorted(&r["shortNames"]),
                "categories": sorted(&r["categories"]),
                "singularName": r["singularResource"],
            });
            from_aggregated.insert(plural.to_string(), entry);
            for sub in r["subresources"].as_array().into_iter().flatten() {
                let path = format!("{plural}/{}", sub["subresource"].as_str().unwrap());
                let legacy_sub = &from_legacy[&path];
                assert_eq!(legacy_sub["kind"], sub["responseKind"]["kind"], "{path}");
                assert_eq!(legacy_sub["verbs"], sorted(&sub["verbs"]), "{path}");
                from_aggregated.insert(path.clone(), legacy_sub.clone());
            }
        }
        assert_eq!(from_aggregated, from_legacy, "{name}");
    }
    let things = &from_version(&group, "v1")["resources"][0];
    assert_eq!(sorted(&things["shortNames"]), json!(["th"]));
    assert_eq!(sorted(&things["categories"]), json!(["all", "stuff"]));

    // The aggregator's periodic fetches are cheap: 304 while nothing changed.
    for (path, accept) in [
        ("/apis", V2),
        ("/apis", "application/json"),
        ("/apis/things.example.com/v1", "application/json"),
        ("/apis/things.example.com", "application/json"),
    ] {
        let first = send(&mut h2, "GET", path, &[("accept", accept)], None).await;
        let etag = first.header("etag").to_string();
        assert!(!etag.is_empty(), "{path} {accept}");
        let again = send(
            &mut h2,
            "GET",
            path,
            &[("accept", accept), ("if-none-match", &etag)],
            None,
        )
        .await;
        assert_eq!(again.status, 304, "{path} {accept}");
        assert!(again.body.is_empty());
    }
    server.stop().await;
}

fn from_version<'a>(group: &'a Value, version: &str) -> &'a Value {
    group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["version"] == version)
        .unwrap()
}

#[tokio::test]
async fn openapi_downloads_revalidate_and_hashed_documents_are_immutable() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), groups()).await;
    let mut h2 = h2(&server, dir.path()).await;

    let v2 = send(
        &mut h2,
        "GET",
        "/openapi/v2",
        &[("accept", "application/json")],
        None,
    )
    .await;
    assert_eq!(v2.status, 200);
    assert!(
        v2.json()["definitions"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.ends_with(".Thing"))
    );
    let etag = v2.header("etag").to_string();
    assert!(!etag.is_empty());
    let again = send(
        &mut h2,
        "GET",
        "/openapi/v2",
        &[("accept", "application/json"), ("if-none-match", &etag)],
        None,
    )
    .await;
    assert_eq!(again.status, 304);

    let index = send(&mut h2, "GET", "/openapi/v3", &[], None).await.json();
    for version in ["v1", "v1beta1"] {
        let key = format!("apis/{GROUP}/{version}");
        let url = index["paths"][&key]["serverRelativeURL"]
            .as_str()
            .unwrap_or_else(|| panic!("{key} in {index}"))
            .to_string();
        assert!(
            url.starts_with(&format!("/openapi/v3/{key}?hash=")),
            "{url}"
        );
        let doc = send(&mut h2, "GET", &url, &[], None).await;
        assert_eq!(doc.status, 200);
        assert_eq!(
            doc.header("cache-control"),
            "public, immutable, max-age=31536000"
        );
        assert!(doc.json()["openapi"].as_str().unwrap().starts_with("3."));
        let etag = doc.header("etag").to_string();
        let cached = send(&mut h2, "GET", &url, &[("if-none-match", &etag)], None).await;
        assert_eq!(cached.status, 304);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_watch_streams_over_http2_beside_other_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path(), groups()).await;
    let mut h2 = h2(&server, dir.path()).await;
    let collection = format!("/apis/{GROUP}/v1/namespaces/default/things");

    let request = http::Request::builder()
        .uri(format!("https://127.0.0.1{collection}?watch=1"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = tokio::time::timeout(WAIT, h2.send_request(request))
        .await
        .expect("the watch starts")
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), http::Version::HTTP_2);
    let mut body = response.into_body();

    // Other streams of the same connection go on while the watch is open.
    for i in 0..3 {
        let thing = json!({"apiVersion": "things.example.com/v1", "kind": "Thing",
                           "metadata": {"name": format!("t{i}")}});
        let created = send(
            &mut h2,
            "POST",
            &collection,
            &[("content-type", "application/json")],
            Some(thing),
        )
        .await;
        assert_eq!(created.status, 201);
    }
    let mut seen = Vec::new();
    let mut buffer = Vec::new();
    while seen.len() < 3 {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("events arrive while the watch is open")
            .expect("the stream is open")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.extend_from_slice(&data);
        }
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let event: Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(event["type"], "ADDED");
            seen.push(
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
    }
    assert_eq!(seen, ["t0", "t1", "t2"]);
    drop(body);
    server.stop().await;
}
