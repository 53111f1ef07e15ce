//! The builder's extension points end to end, a real server over TLS: a user's tower layer,
//! route, authenticator and authorizer (ahead of the server's own), health checks and
//! post-start hooks, and the open stages (build, inspect, start). Requests by the admin go
//! through kube-rs, the others through curl with or without a bearer token.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use extension_apiserver::Resource;
use extension_apiserver::async_trait;
use extension_apiserver::auth::delegating::Mode;
use extension_apiserver::auth::{
    Attributes, AuthError, Authenticator, Authorization, Authorizer, Decision, UserInfo,
};
use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::lifecycle::NotReady;
use extension_apiserver::server::{APIGroup, APIServer, ServerError};
use extension_apiserver::tls::certs::SelfSignedCerts;
use extension_apiserver_testing::{KubectlOutput, TestServer, eventually};
use http::HeaderValue;
use http_body_util::BodyExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "extensions.example.com",
    version = "v1",
    kind = "Widget",
    namespaced
)]
pub struct Widget {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

const WIDGETS: &str = "/apis/extensions.example.com/v1/namespaces/default/widgets";
const WAIT: Duration = Duration::from_secs(30);

fn group() -> APIGroup {
    APIGroup::new("extensions.example.com").version("v1", |v| v.resource::<Widget>())
}

fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

fn create_widget(server: &TestServer, dir: &Path, name: &str) {
    let file = dir.join(format!("{name}.yaml"));
    let yaml = format!(
        "apiVersion: extensions.example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: default\n"
    );
    std::fs::write(&file, yaml).unwrap();
    ok(server.kubectl(&["create", "-f", &file.display().to_string()]));
}

/// A response: code, head (lower-cased) and body.
#[derive(Debug)]
struct Reply {
    code: u16,
    head: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}: ");
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(str::trim)
    }
}

/// `method path` as the admin (kube-rs, the admin kubeconfig's client certificate).
async fn as_admin(server: &TestServer, method: &str, path: &str) -> Reply {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let response = server.client().send(request).await.expect("a response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("the body").to_bytes();
    let head = parts
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or_default()))
        .collect();
    Reply {
        code: parts.status.as_u16(),
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// `GET path` by curl, without a client certificate, with `headers`.
async fn curl(dir: &Path, server: &TestServer, path: &str, headers: &[(&str, &str)]) -> Reply {
    let certs = SelfSignedCerts::load_or_create(&dir.join("certs"), &[]).unwrap();
    let ca_file = dir.join("serving-ca.crt");
    std::fs::write(&ca_file, &certs.serving_ca_pem).unwrap();
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "-i", "--http1.1", "--cacert"])
        .arg(&ca_file);
    for (name, value) in headers {
        cmd.args(["-H", &format!("{name}: {value}")]);
    }
    cmd.arg(format!("https://{}{path}", server.addr));
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run curl"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP head");
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    Reply {
        code,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// `Authorization: Bearer robot-token` is `robot`; another bearer token is a bad credential.
struct RobotToken;

#[async_trait]
impl Authenticator for RobotToken {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        let header = parts.headers.get("authorization");
        let token = header
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match token {
            None => Ok(None),
            Some("robot-token") => Ok(Some(UserInfo::new("robot", []).with_authenticated_group())),
            Some(_) => Err(AuthError::InvalidCredentials("unknown token".into())),
        }
    }
}

/// Robots may only say hello; nobody deletes widgets; the rest is the server's to decide.
struct Rules;

#[async_trait]
impl Authorizer for Rules {
    async fn authorize(&self, a: &Attributes<'_>) -> Result<Authorization, AuthError> {
        if a.user.name == "robot" {
            return Ok(match !a.resource_request && a.path == "/hello" {
                true => Authorization::new(Decision::Allow, ""),
                false => Authorization::new(Decision::Deny, "robots may only say hello"),
            });
        }
        if a.resource == "widgets" && a.verb == "delete" {
            return Ok(Authorization::new(Decision::Deny, "widgets are forever"));
        }
        Ok(Authorization::new(Decision::NoOpinion, ""))
    }
}

fn user_of(request: &Request) -> String {
    let user = request.extensions().get::<UserInfo>();
    user.map_or("none".into(), |u| u.name.clone())
}

/// Tags every response it sees with the user the filters found.
async fn tag(request: Request, next: Next) -> Response {
    let user = user_of(&request);
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert("x-extension", HeaderValue::from_static("on"));
    headers.insert("x-seen-user", HeaderValue::from_str(&user).unwrap());
    response
}

async fn hello(request: Request) -> String {
    format!("hello, {}", user_of(&request))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layers_routes_authenticators_and_authorizers() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .group(group())
        .dir(dir.path())
        .options(|o| o.auth.anonymous_auth = Some(true))
        .extend(|server| {
            server
                .layer(middleware::from_fn(tag))
                .route("/hello", get(hello))
                .authenticator(RobotToken)
                .authorizer(Rules)
        })
        .start()
        .await;
    create_widget(&server, dir.path(), "w1");

    // The layer sits inside the filters: it sees the user, and wraps resources and 404s.
    let listed = as_admin(&server, "GET", WIDGETS).await;
    assert_eq!(listed.code, 200, "{listed:?}");
    assert!(listed.body.contains("\"w1\""), "{listed:?}");
    assert_eq!(listed.header("x-extension"), Some("on"), "{listed:?}");
    assert_eq!(listed.header("x-seen-user"), Some("admin"), "{listed:?}");
    let missing = as_admin(&server, "GET", "/nowhere").await;
    assert_eq!(missing.code, 404, "{missing:?}");
    assert_eq!(missing.header("x-extension"), Some("on"), "{missing:?}");

    // The route is a non-resource URL, authenticated and authorized as the rest.
    assert_eq!(
        ok(server.kubectl(&["get", "--raw", "/hello"])),
        "hello, admin"
    );
    let anonymous = curl(dir.path(), &server, "/hello", &[]).await;
    assert_eq!(anonymous.code, 403, "{anonymous:?}");
    assert!(
        anonymous
            .body
            .contains("forbidden: User \\\"system:anonymous\\\" cannot get path \\\"/hello\\\""),
        "{anonymous:?}"
    );
    // Refused by the filters, before the layer.
    assert_eq!(anonymous.header("x-extension"), None, "{anonymous:?}");

    // The user's authenticator comes first; a bad token is 401, not anonymous.
    let robot = [("Authorization", "Bearer robot-token")];
    let hello = curl(dir.path(), &server, "/hello", &robot).await;
    assert_eq!((hello.code, hello.body.as_str()), (200, "hello, robot"));
    let bad = [("Authorization", "Bearer nope")];
    assert_eq!(curl(dir.path(), &server, "/hello", &bad).await.code, 401);

    // The user's authorizer comes first: its Deny wins over standalone's "any authenticated
    // user", its NoOpinion leaves the decision to it.
    let listed = curl(dir.path(), &server, WIDGETS, &robot).await;
    assert_eq!(listed.code, 403, "{listed:?}");
    assert!(
        listed.body.contains("robots may only say hello"),
        "{listed:?}"
    );
    let deleted = as_admin(&server, "DELETE", &format!("{WIDGETS}/w1")).await;
    assert_eq!(deleted.code, 403, "{deleted:?}");
    assert!(
        deleted.body.contains(
            "widgets.extensions.example.com \\\"w1\\\" is forbidden: User \\\"admin\\\" cannot \
             delete resource \\\"widgets\\\" in API group \\\"extensions.example.com\\\" in the \
             namespace \\\"default\\\": widgets are forever"
        ),
        "{deleted:?}"
    );
    assert_eq!(
        as_admin(&server, "GET", &format!("{WIDGETS}/w1"))
            .await
            .code,
        200
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_and_post_start_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = Arc::new(AtomicBool::new(false));
    let (go, gone) = oneshot::channel::<()>();
    let (seen_tx, seen) = oneshot::channel::<Vec<String>>();
    let healthy = flaky.clone();
    let server = TestServer::builder()
        .group(group())
        .dir(dir.path())
        .extend(move |server| {
            server
                .readyz_check("flaky", move || {
                    let up = healthy.load(Ordering::SeqCst);
                    async move { up.then_some(()).ok_or(NotReady::new("flaking")) }
                })
                .livez_check("alive", || async { Ok(()) })
                .health_check("disk", || async { Ok(()) })
                .post_start_hook("count-widgets", |ctx| async move {
                    gone.await?;
                    let widgets = ctx.reader::<Widget>().list(Some("default")).await?;
                    let names = widgets.into_iter().filter_map(|w| w.metadata.name);
                    let _ = seen_tx.send(names.collect());
                    Ok(())
                })
        })
        .start()
        .await;

    // Both fail: the check, and the hook's check until the hook returns.
    let ready = as_admin(&server, "GET", "/readyz?verbose").await;
    assert_eq!(ready.code, 500, "{ready:?}");
    for line in [
        "[+]ping ok",
        "[-]flaky failed: reason withheld",
        "[-]poststarthook/count-widgets failed: reason withheld",
        "readyz check failed",
    ] {
        assert!(ready.body.contains(line), "{line}: {}", ready.body);
    }
    let flaking = as_admin(&server, "GET", "/readyz/flaky").await;
    assert_eq!(
        (flaking.code, flaking.body.as_str()),
        (500, "internal server error: flaking\n")
    );
    let hook = as_admin(&server, "GET", "/readyz/poststarthook/count-widgets").await;
    assert_eq!(hook.code, 500, "{hook:?}");
    assert_eq!(hook.body, "internal server error: not finished\n");
    let excluded = "/readyz?exclude=flaky&exclude=poststarthook/count-widgets&verbose";
    let excluded = as_admin(&server, "GET", excluded).await;
    assert_eq!(excluded.code, 200, "{excluded:?}");
    assert!(
        excluded.body.contains("[+]flaky excluded: ok"),
        "{excluded:?}"
    );
    // `/livez` has its own checks and those added to all three; not the readyz-only one.
    let live = as_admin(&server, "GET", "/livez?verbose").await;
    assert!(live.body.contains("[+]alive ok\n[+]disk ok\n"), "{live:?}");
    assert!(!live.body.contains("flaky"), "{live:?}");
    let healthz = as_admin(&server, "GET", "/healthz?verbose").await;
    assert!(healthz.body.contains("[+]disk ok"), "{healthz:?}");
    assert!(!healthz.body.contains("alive"), "{healthz:?}");

    // The hook reads what is stored through the server's own reader.
    create_widget(&server, dir.path(), "w1");
    go.send(()).unwrap();
    let names = tokio::time::timeout(WAIT, seen).await.unwrap().unwrap();
    assert_eq!(names, ["w1"]);
    let finished = eventually(|| async {
        let path = "/readyz/poststarthook/count-widgets";
        as_admin(&server, "GET", path).await.code == 200
    });
    assert!(finished.await, "the hook's check never passed");
    flaky.store(true, Ordering::SeqCst);
    let ready = as_admin(&server, "GET", "/readyz?verbose").await;
    assert_eq!(ready.code, 200, "{ready:?}");
    assert!(ready.body.contains("[+]flaky ok"), "{ready:?}");
    assert!(
        ready.body.contains("[+]poststarthook/count-widgets ok"),
        "{ready:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_post_start_hook_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let running = APIServer::new(TestServer::options(dir.path()))
        .group(group())
        .post_start_hook("fine", |_| async { Ok(()) })
        .post_start_hook("quorum", |_| async { Err("no quorum".into()) })
        .start()
        .await
        .expect("the server starts");
    let ended = tokio::time::timeout(WAIT, running.wait()).await;
    let Ok(Err(ServerError::PostStartHook { name, message })) = ended else {
        panic!("the server must stop with the hook's error: {ended:?}");
    };
    assert_eq!((name.as_str(), message.as_str()), ("quorum", "no quorum"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_inspect_then_start() {
    let dir = tempfile::tempdir().unwrap();
    let server = || {
        APIServer::new(TestServer::options(dir.path()))
            .group(group())
            .readyz_check("warm", || async { Ok(()) })
            .post_start_hook("seeded", |_| async { Ok(()) })
    };
    let twice = server().post_start_hook("seeded", |_| async { Ok(()) });
    let Err(ServerError::Config(message)) = twice.build().await else {
        panic!("two hooks of one name must be refused");
    };
    assert!(
        message.contains("\"seeded\" is already registered"),
        "{message}"
    );
    let taken = server().readyz_check("shutdown", || async { Ok(()) });
    assert!(matches!(taken.build().await, Err(ServerError::Config(_))));

    let built = server().build().await.expect("the server builds");
    assert_ne!(built.addr().port(), 0);
    assert!(built.kubeconfig().exists());
    assert_eq!(built.mode(), Mode::Standalone);
    assert_eq!(
        built.readyz_checks(),
        [
            "ping",
            "storage",
            "shutdown",
            "warm",
            "poststarthook/seeded"
        ]
    );
    assert_eq!(built.livez_checks(), ["ping", "poststarthook/seeded"]);
    assert_eq!(built.post_start_hooks(), ["seeded"]);
    assert!(
        built
            .storage()
            .reader::<Widget>()
            .list(None)
            .await
            .unwrap()
            .is_empty()
    );
    // Dropped unstarted, it lets its port go.
    let addr = built.addr();
    drop(built);
    drop(
        tokio::net::TcpListener::bind(addr)
            .await
            .expect("the port is free again"),
    );

    let built = server().build().await.expect("the server builds");
    let kubeconfig = built.kubeconfig().to_path_buf();
    let running = built.start().await.expect("the server starts");
    let kubectl = |args: &[&str]| extension_apiserver_testing::kubectl(&kubeconfig, args, &[]);
    let ready = eventually(|| async { kubectl(&["get", "--raw", "/readyz"]).success });
    assert!(ready.await, "never ready");
    assert_eq!(kubectl(&["get", "--raw", "/readyz/warm"]).stdout, "ok");
    running.shutdown().await.expect("the server stops");
}
