//! Typed strategies over TLS with real clients: a type with `custom_strategy` whose hooks see
//! the user who made the request (recorded on create, checked on update), the namespace and
//! dry run; its warnings reach kubectl and the raw `Warning` header (`299 - "..."`); its
//! canonical form is what is stored; and a PUT to a missing name creates the object (201).

use std::path::{Path, PathBuf};
use std::process::Command;

use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::prelude::*;
use extension_apiserver_testing::pki::TestCa;
use extension_apiserver_testing::{KubectlOutput, TestServer, kubectl};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "strategy.example.com",
    version = "v1",
    kind = "Runbook",
    namespaced,
    custom_strategy
)]
pub struct Runbook {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: RunbookSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunbookSpec {
    #[serde(default)]
    pub owners: Vec<String>,
    #[serde(default)]
    pub steps: Vec<String>,
}

const CREATED_BY: &str = "strategy.example.com/created-by";
const SEEN: &str = "strategy.example.com/seen";
const EDITORS: &str = "runbook-editors";

fn annotate(object: &mut Runbook, key: &str, value: String) {
    let annotations = object
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(key.into(), value);
}

fn username(ctx: &StrategyContext<'_>) -> String {
    ctx.user().map(|u| u.name.clone()).unwrap_or_default()
}

impl Strategy for Runbook {
    fn prepare_for_create(&mut self, ctx: &StrategyContext<'_>) {
        annotate(self, CREATED_BY, username(ctx));
        let seen = format!(
            "namespace={} dryRun={}",
            ctx.namespace().unwrap_or_default(),
            ctx.dry_run()
        );
        annotate(self, SEEN, seen);
    }

    fn prepare_for_update(&mut self, old: &Self, _: &StrategyContext<'_>) {
        let annotations = old.metadata.annotations.clone().unwrap_or_default();
        for key in [CREATED_BY, SEEN] {
            if let Some(value) = annotations.get(key) {
                annotate(self, key, value.clone());
            }
        }
    }

    fn validate_update(&self, old: &Self, ctx: &StrategyContext<'_>) -> Vec<FieldError> {
        let editor = ctx.user_in_group(EDITORS) || ctx.user_in_group("system:masters");
        if self.spec != old.spec && !editor {
            let detail = format!("only {EDITORS} may change a runbook");
            return vec![FieldError::forbidden("spec", &detail)];
        }
        Vec::new()
    }

    fn warnings_on_create(&self, _: &StrategyContext<'_>) -> Vec<String> {
        match self.spec.owners.is_empty() {
            true => vec!["a runbook without owners pages nobody".into()],
            false => Vec::new(),
        }
    }

    fn warnings_on_update(&self, old: &Self, ctx: &StrategyContext<'_>) -> Vec<String> {
        match self.spec.steps != old.spec.steps {
            true => vec![format!("steps changed by {}", username(ctx))],
            false => Vec::new(),
        }
    }

    fn canonicalize(&mut self) {
        self.spec.owners.sort();
        self.spec.owners.dedup();
    }

    fn allow_create_on_update() -> bool {
        true
    }
}

const PATH: &str = "/apis/strategy.example.com/v1/namespaces/default/runbooks";

/// A server whose client CA is the test's, so it can sign certificates of other users.
struct Fixture {
    server: TestServer,
    ca: TestCa,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("server").join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let ca = TestCa::new("client-ca");
        std::fs::write(certs.join("client-ca.crt"), &ca.cert_pem).unwrap();
        std::fs::write(certs.join("client-ca.key"), &ca.key_pem).unwrap();
        let group =
            APIGroup::new("strategy.example.com").version("v1", |v| v.resource::<Runbook>());
        let server = TestServer::builder()
            .dir(dir.path().join("server"))
            .group(group)
            .start()
            .await;
        Self { server, ca, dir }
    }

    /// A kubeconfig of the server for user `cn` in `groups`.
    fn kubeconfig(&self, cn: &str, groups: &[&str]) -> PathBuf {
        let cert = self.ca.client(cn, groups);
        let (crt, key) = (
            self.file(&format!("{cn}.crt")),
            self.file(&format!("{cn}.key")),
        );
        std::fs::write(&crt, &cert.cert_pem).unwrap();
        std::fs::write(&key, &cert.key_pem).unwrap();
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": format!("https://127.0.0.1:{}", self.server.addr.port()),
                "certificate-authority": self.serving_ca().display().to_string(),
            }}],
            "users": [{"name": cn, "user": {
                "client-certificate": crt.display().to_string(),
                "client-key": key.display().to_string(),
            }}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": cn}}],
            "current-context": "test",
        });
        let path = self.file(&format!("{cn}.kubeconfig"));
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    fn serving_ca(&self) -> PathBuf {
        self.dir.path().join("server/certs/serving-ca.crt")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `curl -i` as user `cn`: the status line and headers, then the body. A `GET` sends no
    /// body: the server answers one without reading it, and then resets the HTTP/2 stream
    /// that curl may still be sending it on (as Go's server does), which curl reports as
    /// exit status 92 when the reset arrives first (seen under load).
    fn curl(&self, cn: &str, method: &str, path: &str, body: &Value) -> (String, Value) {
        self.kubeconfig(cn, &["system:masters"]);
        let serving_ca = self.serving_ca();
        let url = format!("https://127.0.0.1:{}{path}", self.server.addr.port());
        let mut command = Command::new("curl");
        command
            .args(["-sS", "-i", "--max-time", "30", "-X", method])
            .arg("--cacert")
            .arg(&serving_ca)
            .arg("--cert")
            .arg(self.file(&format!("{cn}.crt")))
            .arg("--key")
            .arg(self.file(&format!("{cn}.key")));
        if method != "GET" {
            command
                .args(["-H", "Content-Type: application/json", "--data-binary"])
                .arg(body.to_string());
        }
        let out = command.arg(url).output().expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
        // What curl said is kept in the failure, so that a flake shows its cause.
        let failed = |what: &str| -> ! {
            panic!(
                "{what} from curl {method} {path} ({}): stdout {text:?}, stderr {:?}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        };
        let Some((head, body)) = text.split_once("\n\n") else {
            failed("no headers and body")
        };
        let Ok(body) = serde_json::from_str(body) else {
            failed("no JSON body")
        };
        (head.to_string(), body)
    }
}

fn ok(out: KubectlOutput) -> KubectlOutput {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out
}

fn apply(kubeconfig: &Path, object: &Value) -> KubectlOutput {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), object.to_string()).unwrap();
    let path = file.path().display().to_string();
    kubectl(kubeconfig, &["apply", "-f", &path], &[])
}

fn runbook(name: &str, owners: &[&str], steps: &[&str]) -> Value {
    json!({"apiVersion": "strategy.example.com/v1", "kind": "Runbook",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"owners": owners, "steps": steps}})
}

fn get(kubeconfig: &Path, name: &str) -> Value {
    let out = ok(kubectl(
        kubeconfig,
        &["get", "runbook", name, "-o", "json"],
        &[],
    ));
    serde_json::from_str(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_see_the_user_and_warn_through_kubectl() {
    let fx = Fixture::start().await;
    let alice = fx.kubeconfig("alice", &[EDITORS]);
    let bob = fx.kubeconfig("bob", &[]);

    // Create as alice: recorded as hers, canonicalized, with a warning kubectl prints.
    let created = ok(apply(&alice, &runbook("db", &[], &["restart"])));
    assert!(
        created
            .stderr
            .contains("Warning: a runbook without owners pages nobody"),
        "{}",
        created.stderr
    );
    let out = ok(apply(
        &alice,
        &runbook("web", &["zed", "amy", "zed"], &["scale"]),
    ));
    assert!(!out.stderr.contains("Warning"), "{}", out.stderr);
    let web = get(&alice, "web");
    assert_eq!(
        web["spec"]["owners"],
        json!(["amy", "zed"]),
        "canonical form stored"
    );
    assert_eq!(web["metadata"]["annotations"][CREATED_BY], "alice");
    assert_eq!(
        web["metadata"]["annotations"][SEEN],
        "namespace=default dryRun=false"
    );

    // Bob may read but not change the spec; his refused update changes nothing.
    let refused = apply(&bob, &runbook("web", &["bob"], &["scale"]));
    assert!(!refused.success);
    assert!(
        refused
            .stderr
            .contains("only runbook-editors may change a runbook"),
        "{}",
        refused.stderr
    );
    assert_eq!(get(&alice, "web")["spec"]["owners"], json!(["amy", "zed"]));

    // Alice may; the update's warning names her, and the creator stays recorded.
    let updated = ok(apply(&alice, &runbook("web", &["amy"], &["scale", "page"])));
    assert!(
        updated.stderr.contains("Warning: steps changed by alice"),
        "{}",
        updated.stderr
    );
    let web = get(&bob, "web");
    assert_eq!(web["spec"]["steps"], json!(["scale", "page"]));
    assert_eq!(web["metadata"]["annotations"][CREATED_BY], "alice");

    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warning_headers_dry_run_and_create_on_update_over_http() {
    let fx = Fixture::start().await;

    // A dry-run create: the strategy sees it, the answer carries kube's Warning header, and
    // nothing is stored.
    let (head, body) = fx.curl(
        "carol",
        "POST",
        &format!("{PATH}?dryRun=All"),
        &runbook("dry", &[], &[]),
    );
    assert!(
        head.starts_with("HTTP/2 201") || head.starts_with("HTTP/1.1 201"),
        "{head}"
    );
    assert!(
        head.to_lowercase()
            .contains("warning: 299 - \"a runbook without owners pages nobody\""),
        "{head}"
    );
    assert_eq!(
        body["metadata"]["annotations"][SEEN],
        "namespace=default dryRun=true"
    );
    assert_eq!(body["metadata"]["annotations"][CREATED_BY], "carol");
    let (head, _) = fx.curl("carol", "GET", &format!("{PATH}/dry"), &Value::Null);
    assert!(head.contains(" 404"), "{head}");

    // PUT to a missing name creates it: 201, the create strategy ran.
    let (head, body) = fx.curl(
        "carol",
        "PUT",
        &format!("{PATH}/put"),
        &runbook("put", &["b", "a"], &[]),
    );
    assert!(head.contains(" 201"), "{head}\n{body}");
    assert_eq!(body["spec"]["owners"], json!(["a", "b"]));
    assert_eq!(body["metadata"]["annotations"][CREATED_BY], "carol");
    assert_eq!(body["metadata"]["generation"], 1);
    assert!(body["metadata"]["uid"].is_string());

    // Another PUT without a resourceVersion to the existing object: the 422 kube gives.
    let (head, _) = fx.curl(
        "carol",
        "PUT",
        &format!("{PATH}/put"),
        &runbook("put", &["a"], &[]),
    );
    assert!(head.contains(" 422"), "{head}");

    // A PUT to a missing name with a resourceVersion was meant for a gone object: 404.
    let mut stale = runbook("gone", &[], &[]);
    stale["metadata"]["resourceVersion"] = json!("5");
    let (head, body) = fx.curl("carol", "PUT", &format!("{PATH}/gone"), &stale);
    assert!(head.contains(" 404"), "{head}\n{body}");
    assert_eq!(body["reason"], "NotFound");

    // The name comes from the URL.
    let (head, _) = fx.curl(
        "carol",
        "PUT",
        &format!("{PATH}/other"),
        &runbook("put2", &[], &[]),
    );
    assert!(head.contains(" 400"), "{head}");
    fx.server.stop().await;
}
