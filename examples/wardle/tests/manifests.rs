//! `wardle manifests`: the YAML parses as the Kubernetes types (no unknown field anywhere),
//! says what the aggregator needs, and `kubectl apply --dry-run=client` accepts it.
//!
//! kubectl maps kinds through discovery even for a client-side dry run, so it runs against the
//! fake core kube-apiserver (`extension_apiserver_testing::fake_core`), which serves the discovery of
//! these kinds, with `--validate=false` (the fake has no OpenAPI schema to validate with; the
//! typed parsing below is the schema check).

use std::io::Write as _;
use std::process::{Command, Stdio};

use extension_apiserver::APIGroup;
use extension_apiserver::aggregator::{ManifestOptions, manifest_objects};
use extension_apiserver_testing::fake_core::FakeCore;
use extension_apiserver_testing::manifests::{documents, strict};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

fn wardle_manifests(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wardle"))
        .arg("manifests")
        .args(args)
        .output()
        .expect("wardle runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn manifests_parse_as_the_kubernetes_types() {
    let yaml = wardle_manifests(&[
        "--namespace",
        "wardle-system",
        "--image",
        "example/wardle:1",
    ]);
    let docs = documents(&yaml);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRoleBinding",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Service",
            "APIService",
            "APIService"
        ]
    );
    let mut deployment = None;
    let mut service = None;
    let mut apiservices = Vec::new();
    let mut bindings = Vec::new();
    let mut role = None;
    let mut reader = None;
    for doc in &docs {
        match doc["kind"].as_str().unwrap() {
            "Namespace" => {
                let ns: Namespace = strict(doc);
                assert_eq!(ns.metadata.name.as_deref(), Some("wardle-system"));
            }
            "ServiceAccount" => {
                let sa: ServiceAccount = strict(doc);
                assert_eq!(sa.metadata.namespace.as_deref(), Some("wardle-system"));
            }
            "ClusterRoleBinding" => bindings.push(strict::<ClusterRoleBinding>(doc)),
            "RoleBinding" => reader = Some(strict::<RoleBinding>(doc)),
            "ClusterRole" => role = Some(strict::<ClusterRole>(doc)),
            "Deployment" => deployment = Some(strict::<Deployment>(doc)),
            "Service" => service = Some(strict::<Service>(doc)),
            "APIService" => apiservices.push(strict::<APIService>(doc)),
            other => panic!("unexpected kind {other}"),
        }
    }

    // The name defaults to the program's.
    let deployment = deployment.unwrap();
    assert_eq!(deployment.metadata.name.as_deref(), Some("wardle"));
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("wardle"));
    let container = &pod.containers[0];
    assert_eq!(container.image.as_deref(), Some("example/wardle:1"));
    let args = container.args.clone().unwrap();
    for wanted in [
        "--secure-port=8443",
        "--tls-cert-file=/var/run/apiserver/serving-cert/tls.crt",
        "--tls-private-key-file=/var/run/apiserver/serving-cert/tls.key",
        "--register-apiservice",
        "--apiservice-service-namespace=wardle-system",
        "--apiservice-service-name=wardle",
        "--apiservice-service-port=443",
        "--apiservice-ca-file=/var/run/apiserver/serving-cert/ca.crt",
    ] {
        assert!(
            args.iter().any(|a| a == wanted),
            "{wanted} missing from {args:?}"
        );
    }
    for (probe, path) in [
        (container.readiness_probe.as_ref(), "/readyz"),
        (container.liveness_probe.as_ref(), "/livez"),
    ] {
        let get = probe.unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"));
    }
    let security = container.security_context.as_ref().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let secret = pod
        .volumes
        .unwrap()
        .into_iter()
        .find_map(|v| v.secret)
        .unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("wardle-serving-cert"));

    let service = service.unwrap().spec.unwrap();
    let port = &service.ports.unwrap()[0];
    assert_eq!(port.port, 443);

    // One APIService per version, the preferred first with the higher priority.
    let v1beta1 = apiservices.pop().unwrap();
    assert_eq!(
        v1beta1.metadata.name.as_deref(),
        Some("v1beta1.wardle.example.com")
    );
    assert_eq!(v1beta1.spec.unwrap().version_priority, 14);
    let apiservice = apiservices.pop().unwrap();
    assert_eq!(
        apiservice.metadata.name.as_deref(),
        Some("v1alpha1.wardle.example.com")
    );
    let spec = apiservice.spec.unwrap();
    assert_eq!(spec.group.as_deref(), Some("wardle.example.com"));
    assert_eq!(spec.version.as_deref(), Some("v1alpha1"));
    assert_eq!(
        (spec.group_priority_minimum, spec.version_priority),
        (1000, 15)
    );
    let target = spec.service.unwrap();
    assert_eq!(target.namespace.as_deref(), Some("wardle-system"));
    assert_eq!(target.name.as_deref(), Some("wardle"));
    assert_eq!(target.port, Some(443));
    // The server fills in the caBundle when it registers; nothing is skipped.
    assert_eq!(spec.ca_bundle, None);
    assert_ne!(spec.insecure_skip_tls_verify, Some(true));

    let roles: Vec<&str> = bindings.iter().map(|b| b.role_ref.name.as_str()).collect();
    assert_eq!(roles, ["system:auth-delegator", "wardle"]);
    let reader = reader.unwrap();
    assert_eq!(reader.metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(reader.role_ref.kind, "Role");
    assert_eq!(
        reader.role_ref.name,
        "extension-apiserver-authentication-reader"
    );
    for subjects in bindings
        .iter()
        .map(|b| &b.subjects)
        .chain([&reader.subjects])
    {
        let subject = &subjects.as_ref().unwrap()[0];
        assert_eq!(subject.kind, "ServiceAccount");
        assert_eq!(subject.name, "wardle");
        assert_eq!(subject.namespace.as_deref(), Some("wardle-system"));
    }
    let rules = role.unwrap().rules.unwrap();
    let grants = |resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r.resources.as_ref().unwrap().iter().any(|x| x == resource)
                && r.verbs.iter().any(|v| v == verb)
        })
    };
    for verb in ["get", "list", "watch"] {
        assert!(grants("namespaces", verb));
    }
    for verb in ["get", "create", "update"] {
        assert!(grants("apiservices", verb));
    }
    // Priority and fairness follows the cluster's configuration.
    for verb in ["get", "list", "watch"] {
        assert!(grants("flowschemas", verb));
        assert!(grants("prioritylevelconfigurations", verb));
    }
}

#[test]
fn name_and_extra_args_are_used() {
    let yaml = wardle_manifests(&[
        "--namespace=ns1",
        "--image=img",
        "--name=flunders-api",
        "--arg=--storage-backend=etcd3",
        "--arg",
        "--etcd-servers=https://etcd:2379",
    ]);
    let docs = documents(&yaml);
    let deployment: Deployment = strict(docs.iter().find(|d| d["kind"] == "Deployment").unwrap());
    assert_eq!(deployment.metadata.name.as_deref(), Some("flunders-api"));
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(args.contains(&"--storage-backend=etcd3".to_string()));
    assert!(args.contains(&"--etcd-servers=https://etcd:2379".to_string()));
    assert!(args.contains(&"--apiservice-service-name=flunders-api".to_string()));
}

#[test]
fn every_version_gets_an_apiservice_with_its_priority() {
    let groups = [APIGroup::new("things.example.com")
        .priority(2000, 20)
        .version("v1", |v| v)
        .version("v1beta1", |v| v)];
    let versions: Vec<_> = groups
        .iter()
        .flat_map(APIGroup::apiservice_versions)
        .collect();
    let objects = manifest_objects(&ManifestOptions::new("ns", "img", "things"), &versions);
    let apiservices: Vec<APIService> = objects
        .iter()
        .filter(|o| o["kind"] == "APIService")
        .map(strict)
        .collect();
    let summary: Vec<(String, i32, i32)> = apiservices
        .into_iter()
        .map(|a| {
            let spec = a.spec.unwrap();
            (
                a.metadata.name.unwrap(),
                spec.group_priority_minimum,
                spec.version_priority,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("v1.things.example.com".to_string(), 2000, 20),
            ("v1beta1.things.example.com".to_string(), 2000, 19),
        ]
    );
}

#[tokio::test]
async fn kubectl_accepts_the_manifests_in_a_client_side_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let kubeconfig = core.kubeconfig("admin");
    let yaml = wardle_manifests(&[
        "--namespace",
        "wardle-system",
        "--image",
        "example/wardle:1",
    ]);
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("timeout")
            .args(["60", "kubectl", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["apply", "--dry-run=client", "--validate=false", "-f", "-"])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for line in [
        "namespace/wardle-system created (dry run)",
        "serviceaccount/wardle created (dry run)",
        "clusterrolebinding.rbac.authorization.k8s.io/wardle:system:auth-delegator created (dry run)",
        "rolebinding.rbac.authorization.k8s.io/wardle-auth-reader created (dry run)",
        "clusterrole.rbac.authorization.k8s.io/wardle created (dry run)",
        "deployment.apps/wardle created (dry run)",
        "service/wardle created (dry run)",
        "apiservice.apiregistration.k8s.io/v1alpha1.wardle.example.com created (dry run)",
    ] {
        assert!(
            stdout.contains(line),
            "{line:?} missing from:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn the_strict_parse_sees_unknown_fields() {
    let typo = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "c", "readinessProbe": {"httpGet": {"path": "/readyz", "port": 1, "schem": "HTTPS"}}}
        ]}}},
    });
    let mut unknown = Vec::new();
    let _: Deployment =
        extension_apiserver::codec::unknown::from_value_reporting_unknown(&typo, |path| {
            unknown.push(path.to_string())
        })
        .unwrap();
    assert_eq!(
        unknown,
        ["spec.template.spec.containers.0.readinessProbe.httpGet.schem"]
    );
    let strict = std::panic::catch_unwind(|| strict::<Deployment>(&typo)).unwrap_err();
    let message = strict.downcast_ref::<String>().unwrap();
    assert!(message.contains("schem"), "{message}");
}

/// The Deployment's container arguments, run by the real binary (paths moved into a temporary
/// directory, loopback only, the fake core's kubeconfig instead of the pod's service account):
/// the server starts and registers its APIService with `ca.crt` as caBundle.
#[tokio::test]
async fn the_deployment_arguments_start_a_server_that_registers_itself() {
    use extension_apiserver_testing::pki::TestCa;
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    let yaml = wardle_manifests(&["--namespace", "wardle-system", "--image", "img"]);
    let docs = documents(&yaml);
    let deployment: Deployment = strict(docs.iter().find(|d| d["kind"] == "Deployment").unwrap());
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();

    // The Secret the user creates: tls.crt, tls.key, ca.crt for wardle.wardle-system.svc.
    let secret_dir = dir.path().join("serving-cert");
    let ca = TestCa::new("wardle-ca");
    let serving = ca.serving(&["wardle.wardle-system.svc", "127.0.0.1"]);
    serving.write(&secret_dir, "tls");
    std::fs::write(secret_dir.join("ca.crt"), &ca.cert_pem).unwrap();

    let root = dir.path().to_str().unwrap().to_string();
    let mut args: Vec<String> = args
        .into_iter()
        .map(|a| {
            a.replace(
                "/var/run/apiserver/serving-cert",
                &format!("{root}/serving-cert"),
            )
            .replace("/var/run/apiserver/certs", &format!("{root}/certs"))
            .replace("/var/lib/apiserver", &format!("{root}/data"))
            .replace("--secure-port=8443", "--secure-port=0")
            .replace("--bind-address=0.0.0.0", "--bind-address=127.0.0.1")
        })
        .collect();
    args.push(format!(
        "--kubeconfig={}",
        core.kubeconfig("system:serviceaccount:wardle-system:wardle")
            .display()
    ));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_wardle"))
        .args(&args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .kill_on_drop(true)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let mut registered = None;
    for _ in 0..300 {
        if let Some(a) = core.apiservice("v1alpha1.wardle.example.com") {
            registered = Some(a);
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                use tokio::io::AsyncReadExt as _;
                pipe.read_to_string(&mut stderr).await.ok();
            }
            panic!("wardle exited ({status}):\n{stderr}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    child.kill().await.unwrap();
    let apiservice = registered.expect("the APIService is registered");
    let spec = &apiservice["spec"];
    assert_eq!(
        spec["service"],
        serde_json::json!({"namespace": "wardle-system", "name": "wardle", "port": 443})
    );
    use base64::Engine as _;
    let ca_bundle = base64::engine::general_purpose::STANDARD
        .decode(spec["caBundle"].as_str().unwrap())
        .unwrap();
    assert_eq!(String::from_utf8(ca_bundle).unwrap(), ca.cert_pem);
}
