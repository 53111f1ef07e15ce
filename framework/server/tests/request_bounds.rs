//! What one request may cost, over TLS against a real server: numbers from the query are
//! bounds, never sizes (`limit`, `timeoutSeconds`); a deeply nested body is refused at once
//! with kube-apiserver's `Status` while the same HTTP/2 connection goes on being served;
//! unknown and duplicate fields are reported within kube's bounds (at most 100, warnings
//! within 4 KiB); and strict decoding errors of a patch are kube's 422. Each answer is the
//! one kube-apiserver gives; every wait is bounded and nothing asserts on time but "not
//! stalled".

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use extension_apiserver::Resource;
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::server::APIGroup;
use extension_apiserver::tls::certs::{CertKey, parse_certs_pem};
use extension_apiserver::tls::{crypto_provider, root_store};
use extension_apiserver_testing::TestServer;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use rustls::pki_types::ServerName;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(60);

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "bounds.example.com",
    version = "v1",
    kind = "Thing",
    namespaced
)]
pub struct Thing {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ThingSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ThingSpec {
    #[serde(default)]
    pub color: String,
}

const THINGS: &str = "/apis/bounds.example.com/v1/namespaces/default/things";

async fn start() -> TestServer {
    let group = APIGroup::new("bounds.example.com").version("v1", |v| v.resource::<Thing>());
    TestServer::builder().group(group).start().await
}

/// One answer: status, `Warning` headers, body.
#[derive(Debug)]
struct Answer {
    code: StatusCode,
    warnings: Vec<String>,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// The `Warning` headers of an answer.
fn warnings(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all("warning")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Answer {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    let response = timeout(WAIT, client.send(request.map(Into::into)))
        .await
        .expect("answered")
        .unwrap();
    let code = response.status();
    let warnings = warnings(response.headers());
    let body = timeout(WAIT, response.into_body().collect())
        .await
        .expect("whole body")
        .unwrap()
        .to_bytes();
    Answer {
        code,
        warnings,
        body,
    }
}

async fn get(client: &kube::Client, path: &str) -> Answer {
    send(client, "GET", path, "application/json", Vec::new()).await
}

async fn create(client: &kube::Client, name: &str) {
    let thing = json!({"metadata": {"name": name}, "spec": {"color": "red"}});
    let answer = send(
        client,
        "POST",
        THINGS,
        "application/json",
        thing.to_string().into(),
    )
    .await;
    assert_eq!(answer.code, StatusCode::CREATED, "{answer:?}");
}

async fn names(client: &kube::Client) -> Vec<String> {
    let list = get(client, THINGS).await;
    assert_eq!(list.code, StatusCode::OK, "{list:?}");
    list.json()["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// An HTTP/2 connection to `server` as its admin (the kubeconfig's CA and certificate).
async fn h2_connection(server: &TestServer) -> h2::client::SendRequest<Bytes> {
    let kubeconfig: Value =
        serde_norway::from_str(&std::fs::read_to_string(&server.kubeconfig).unwrap()).unwrap();
    let data = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    };
    let ca = parse_certs_pem(&data(
        &kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"],
    ))
    .unwrap();
    let user = &kubeconfig["users"][0]["user"];
    let admin = CertKey::from_pem(
        &data(&user["client-certificate-data"]),
        &data(&user["client-key-data"]),
    )
    .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(root_store(&ca).unwrap())
        .with_client_auth_cert(admin.cert_chain.clone(), admin.key.clone_key())
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    sender
}

/// Sends one request on the connection (an HTTP/2 client has no limit on the number of
/// headers, as Go's has none: kube-apiserver may send a hundred warnings).
async fn h2_send(
    sender: &h2::client::SendRequest<Bytes>,
    server: &TestServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Answer {
    let body: Bytes = body.into();
    let uri = format!("https://127.0.0.1:{}{path}", server.addr.port());
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(())
        .unwrap();
    let mut sender = sender.clone().ready().await.unwrap();
    let (response, mut stream) = sender.send_request(request, body.is_empty()).unwrap();
    let mut left = body;
    while !left.is_empty() {
        stream.reserve_capacity(left.len());
        let capacity = std::future::poll_fn(|cx| stream.poll_capacity(cx))
            .await
            .unwrap()
            .unwrap();
        let chunk = left.split_to(capacity.min(left.len()));
        stream.send_data(chunk, left.is_empty()).unwrap();
    }
    let response = response.await.unwrap();
    let code = response.status();
    let warnings = warnings(response.headers());
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    Answer {
        code,
        warnings,
        body: bytes.into(),
    }
}

/// kube's summary of a (long) body it could not decode: its first 30 bytes, in hex unless
/// the body starts with `{`.
fn summary(body: &[u8]) -> String {
    let head = &body[..30];
    if body[0] == b'{' {
        return format!("{} ...", String::from_utf8_lossy(head));
    }
    let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex} ...")
}

// ---------------------------------------------------------------------------------------
// 1. Numbers from the query
// ---------------------------------------------------------------------------------------

/// `limit=10^12` made the watch cache reserve 48 TB (the process aborted, the memory store
/// lost everything) and `limit=i64::MAX` panicked; `timeoutSeconds=i64::MAX` panicked the
/// watch task. kube-apiserver answers 200 to each: a limit is "no more than", a timeout
/// "no later than". Pages come from the watch cache and (an exact resourceVersion) from
/// the store, in memory and in SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_numbers_are_bounds_not_sizes() {
    huge_numbers(start().await).await;
    let group = APIGroup::new("bounds.example.com").version("v1", |v| v.resource::<Thing>());
    huge_numbers(TestServer::builder().group(group).sqlite().start().await).await;
}

async fn huge_numbers(server: TestServer) {
    let client = server.client();
    for name in ["a", "b", "c"] {
        create(&client, name).await;
    }
    let rv = get(&client, THINGS).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let exact = format!("&resourceVersion={rv}&resourceVersionMatch=Exact");
    for limit in ["1000000000000", "9223372036854775807"] {
        for rv in ["", "&resourceVersion=0", &exact] {
            let answer = get(&client, &format!("{THINGS}?limit={limit}{rv}")).await;
            assert_eq!(answer.code, StatusCode::OK, "limit={limit}{rv}: {answer:?}");
            let list = answer.json();
            assert_eq!(list["items"].as_array().unwrap().len(), 3, "{list}");
            assert!(list["metadata"].get("continue").is_none(), "{list}");
        }
    }

    // A watch that may run "forever": its first event comes, then the client leaves.
    let path = format!("{THINGS}?watch=1&timeoutSeconds=9223372036854775807");
    let request = Request::get(path).body(Vec::new()).unwrap();
    let response = timeout(WAIT, client.send(request.map(Into::into)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = timeout(WAIT, body.frame()).await.unwrap().unwrap().unwrap();
    let first = String::from_utf8_lossy(first.data_ref().unwrap()).into_owned();
    assert!(first.contains(r#""type":"ADDED""#), "{first}");
    drop(body);

    // A negative timeout is already past: the watch ends (kube's negative Go duration).
    let ended = get(&client, &format!("{THINGS}?watch=1&timeoutSeconds=-1")).await;
    assert_eq!(ended.code, StatusCode::OK, "{ended:?}");

    // Still serving, nothing lost.
    assert_eq!(names(&client).await, ["a", "b", "c"]);
    assert_eq!(get(&client, "/readyz").await.code, StatusCode::OK);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// 2. Deeply nested bodies
// ---------------------------------------------------------------------------------------

/// A 200 KB YAML body nested 50,000 flow levels cost tens of seconds of CPU on an async
/// worker before the decoder's depth limit refused it (libyaml's work per token grows with
/// the open flow levels), and `/readyz` on the same HTTP/2 connection waited behind it.
/// kube-apiserver refuses it at once: "exceeded max depth of 10000". Two such bodies (and
/// other deep ones) are sent while `/readyz` is asked on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_bodies_are_refused_while_the_connection_is_served() {
    refuse_deep_bodies(start().await).await;
}

/// The same with an audit policy: the audit filter reads the body of every create (to
/// complete its object reference) before the handler does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_bodies_are_refused_when_requests_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n",
    )
    .unwrap();
    let log = dir.path().join("audit.log").display().to_string();
    let group = APIGroup::new("bounds.example.com").version("v1", |v| v.resource::<Thing>());
    let server = TestServer::builder()
        .group(group)
        .options(move |o| {
            o.audit.policy_file = Some(policy);
            o.audit.log_path = Some(log);
        })
        .start()
        .await;
    refuse_deep_bodies(server).await;
}

async fn refuse_deep_bodies(server: TestServer) {
    let sender = h2_connection(&server).await;
    let yaml_flow = Bytes::from("{a: ".repeat(50_000) + &"}".repeat(50_000));
    let yaml_block = Bytes::from(format!(
        "metadata:\n  name: x\nspec:\n  {}",
        "- ".repeat(100_000)
    ));
    let json = Bytes::from(r#"{"a":"#.repeat(40_000));
    let yaml_seq = Bytes::from("[".repeat(100_000) + &"]".repeat(100_000));
    let bodies = [
        ("application/yaml", yaml_flow.clone()),
        ("application/yaml", yaml_block.clone()),
        ("application/json", json.clone()),
        ("application/yaml", yaml_flow.clone()),
        ("application/yaml", yaml_seq.clone()),
    ];
    let sends = bodies.map(|(content_type, body)| {
        let (sender, server) = (&sender, &server);
        async move { h2_send(sender, server, "POST", THINGS, content_type, body).await }
    });
    let refused = std::sync::atomic::AtomicBool::new(false);
    let refusals = async {
        let answers = futures::future::join_all(sends).await;
        refused.store(true, std::sync::atomic::Ordering::SeqCst);
        answers
    };
    // `/readyz`, asked again and again on the same connection until every body is refused:
    // how long the slowest answer took.
    let ready = async {
        let mut slowest = Duration::ZERO;
        loop {
            let asked = std::time::Instant::now();
            let answer = h2_send(&sender, &server, "GET", "/readyz", "text/plain", "").await;
            assert_eq!(answer.code, StatusCode::OK);
            slowest = slowest.max(asked.elapsed());
            if refused.load(std::sync::atomic::Ordering::SeqCst) {
                return slowest;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (refusals, slowest) = timeout(WAIT, futures::future::join(refusals, ready))
        .await
        .expect("every request answered");
    assert!(
        slowest < Duration::from_secs(2),
        "/readyz waited {slowest:?}"
    );

    // kube-apiserver's answers (transformDecodeError of the decoder's error).
    let messages: Vec<String> = refusals
        .iter()
        .map(|answer| {
            let status = answer.json();
            assert_eq!(answer.code, StatusCode::BAD_REQUEST, "{status}");
            assert_eq!(status["reason"], "BadRequest", "{status}");
            status["message"].as_str().unwrap().to_string()
        })
        .collect();
    let unrecognized = "the object provided is unrecognized (must be of type Thing)";
    assert_eq!(
        messages[0],
        format!(
            "{unrecognized}: yaml: exceeded max depth of 10000 ({})",
            summary(&yaml_flow)
        )
    );
    assert_eq!(messages[0], messages[3]);
    assert_eq!(
        messages[1],
        format!(
            "{unrecognized}: yaml: line 4: exceeded max depth of 10000 ({})",
            summary(&yaml_block)
        )
    );
    assert_eq!(
        messages[4],
        format!(
            "{unrecognized}: yaml: exceeded max depth of 10000 ({})",
            summary(&yaml_seq)
        )
    );
    assert_eq!(
        messages[2],
        format!(
            "{unrecognized}: couldn't get version/kind; json parse error: invalid character '{{' exceeded max depth ({})",
            summary(&json)
        )
    );

    // Deep patch and apply bodies are refused as kube's patch handler refuses them.
    let client = server.client();
    create(&client, "kept").await;
    let cases = [
        (
            format!("{THINGS}/kept"),
            "application/merge-patch+json",
            "error decoding patch: invalid character '{' exceeded max depth",
        ),
        (
            format!("{THINGS}/kept?fieldManager=t"),
            "application/apply-patch+yaml",
            "error decoding YAML: error converting YAML to JSON: yaml: exceeded max depth of 10000",
        ),
    ];
    for (path, content_type, message) in cases {
        let answer = send(&client, "PATCH", &path, content_type, json.to_vec()).await;
        assert_eq!(answer.code, StatusCode::BAD_REQUEST, "{answer:?}");
        assert_eq!(answer.json()["message"], message);
    }
    assert_eq!(names(&client).await, ["kept"], "nothing else stored");
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// 3. Unknown and duplicate fields
// ---------------------------------------------------------------------------------------

/// A body with `n` unknown fields under `spec`.
fn unknown_fields(name: &str, n: usize) -> Vec<u8> {
    let mut spec = serde_json::Map::new();
    for i in 0..n {
        spec.insert(format!("f{i}"), json!(i));
    }
    json!({"metadata": {"name": name}, "spec": spec})
        .to_string()
        .into_bytes()
}

/// 200,000 unknown fields took 38 s (a list searched per warning) and gave one `Warning`
/// header each. kube-apiserver's strict decoder keeps the first 100, and its recorder keeps
/// the warnings within 4,096 runes (+ one cut item).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_are_reported_within_kubes_bounds() {
    let server = start().await;
    let client = server.client();
    let h2 = h2_connection(&server).await;
    let send = |method: &'static str, path: String, content_type: &'static str, body: Vec<u8>| {
        let (h2, server) = (&h2, &server);
        async move { h2_send(h2, server, method, &path, content_type, body).await }
    };
    let json = "application/json";

    let warned = send(
        "POST",
        THINGS.into(),
        json,
        unknown_fields("warned", 50_000),
    )
    .await;
    assert_eq!(warned.code, StatusCode::CREATED, "{:?}", warned.code);
    assert_eq!(warned.warnings.len(), 100);
    assert_eq!(warned.warnings[0], r#"299 - "unknown field \"spec.f0\"""#);
    let text: usize = warned.warnings.iter().map(|w| w.len()).sum();
    assert!(
        text <= 4096 + 256 + 100 * "299 - \"\"".len(),
        "{text} bytes of warnings"
    );

    let path = format!("{THINGS}?fieldValidation=Strict");
    let strict = send("POST", path, json, unknown_fields("strict", 50_000)).await;
    assert_eq!(strict.code, StatusCode::BAD_REQUEST);
    let message = strict.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with(r#"Thing in version "v1" cannot be handled as a Thing: strict decoding error: unknown field "spec.f"#),
        "{message:.200}"
    );
    assert_eq!(message.matches("unknown field").count(), 100);

    // Duplicate fields: the same bounds.
    let mut dup = String::from(r#"{"metadata":{"name":"dup"},"spec":{"color":"a""#);
    for i in 0..50_000 {
        dup.push_str(&format!(r#","color":"{i}","x{i}":1,"x{i}":2"#));
    }
    dup.push_str("}}");
    let answer = send("POST", THINGS.into(), json, dup.into_bytes()).await;
    assert_eq!(answer.code, StatusCode::CREATED);
    let duplicates = answer
        .warnings
        .iter()
        .filter(|w| w.contains("duplicate field"))
        .count();
    assert_eq!(duplicates, 100, "{:?}", &answer.warnings[..3]);
    assert_eq!(answer.json()["spec"]["color"], "49999", "the last one wins");

    assert_eq!(
        names(&client).await,
        ["dup", "warned"],
        "the strict one is not stored"
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// 10. Strict decoding errors of patches
// ---------------------------------------------------------------------------------------

/// kube's patch handler answers a patched object's strict decoding errors with
/// `NewInvalid(GroupKind{}, "", [Invalid("patch", patched, err)])`: 422, not the 400 of a
/// create or update body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_patch_errors_are_invalid() {
    let server = start().await;
    let client = server.client();
    create(&client, "p").await;
    let one = format!("{THINGS}/p?fieldValidation=Strict");

    let merge = send(
        &client,
        "PATCH",
        &one,
        "application/merge-patch+json",
        br#"{"spec":{"nope":1}}"#.to_vec(),
    )
    .await;
    assert_eq!(
        merge.code,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{:?}",
        merge.json()
    );
    let status = merge.json();
    assert_eq!(status["reason"], "Invalid");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            r#" "" is invalid: patch: Invalid value: "{\"apiVersion\":\"bounds.example.com/v1\","#
        ),
        "{message}"
    );
    assert!(
        message.ends_with(r#"": strict decoding error: unknown field "spec.nope""#),
        "{message}"
    );
    let cause = &status["details"]["causes"][0];
    assert_eq!(
        (cause["reason"].as_str(), cause["field"].as_str()),
        (Some("FieldValueInvalid"), Some("patch"))
    );
    assert!(
        cause["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid value: \"{")
    );
    assert!(status["details"].get("kind").is_none(), "{status}");

    // A strategic merge patch shows the patch as Go prints a map; its duplicates come first.
    let smp = send(
        &client,
        "PATCH",
        &one,
        "application/strategic-merge-patch+json",
        br#"{"spec":{"nope":1,"color":"a","color":"b"}}"#.to_vec(),
    )
    .await;
    assert_eq!(smp.code, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        smp.json()["message"],
        r#" "" is invalid: patch: Invalid value: "map[spec:map[color:b nope:1]]": strict decoding error: duplicate field "spec.color", unknown field "spec.nope""#
    );

    // A JSON patch's unknown operation members are its own strict errors.
    let ops = br#"[{"op":"add","path":"/spec/nope","value":1,"extra":true}]"#.to_vec();
    let jp = send(&client, "PATCH", &one, "application/json-patch+json", ops).await;
    assert_eq!(jp.code, StatusCode::UNPROCESSABLE_ENTITY);
    let message = jp.json()["message"].as_str().unwrap().to_string();
    assert!(message.ends_with(r#"strict decoding error: json patch unknown field "[0].extra", unknown field "spec.nope""#), "{message}");

    // Warn (the default): the same errors as warnings, and the patch applies.
    let path = format!("{THINGS}/p");
    let warned = send(
        &client,
        "PATCH",
        &path,
        "application/merge-patch+json",
        br#"{"spec":{"nope":1,"color":"blue"}}"#.to_vec(),
    )
    .await;
    assert_eq!(warned.code, StatusCode::OK);
    assert_eq!(warned.warnings, [r#"299 - "unknown field \"spec.nope\"""#]);
    assert_eq!(warned.json()["spec"]["color"], "blue");

    // A create with the unknown field is still the 400 of a body.
    let body = br#"{"metadata":{"name":"q"},"spec":{"nope":1}}"#.to_vec();
    let created = send(
        &client,
        "POST",
        &format!("{THINGS}?fieldValidation=Strict"),
        "application/json",
        body,
    )
    .await;
    assert_eq!(created.code, StatusCode::BAD_REQUEST);
    assert_eq!(
        created.json()["message"],
        r#"Thing in version "v1" cannot be handled as a Thing: strict decoding error: unknown field "spec.nope""#
    );
    server.stop().await;
}
