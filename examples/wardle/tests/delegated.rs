//! Delegated mode end to end with kubectl: the wardle server authenticates a bearer token
//! through TokenReview and authorizes through SubjectAccessReview on a fake core
//! kube-apiserver (`extension_apiserver_testing::fake_core`), as it would in a cluster.

use std::path::Path;

use crate::common::*;
use extension_apiserver::tls::certs::SelfSignedCerts;
use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
use extension_apiserver_testing::pki::TestCa;
use extension_apiserver_testing::{KubectlOutput, kubectl};

const CALLER: &str = "system:serviceaccount:wardle:apiserver";

/// kubectl with a kubeconfig holding only `token` (blocking; at most 60 s).
fn kubectl_as(dir: &Path, server_port: u16, token: &str, args: &[&str]) -> KubectlOutput {
    let certs = SelfSignedCerts::load_or_create(&dir.join("certs"), &[]).unwrap();
    let ca = dir.join("serving-ca.crt");
    std::fs::write(&ca, &certs.serving_ca_pem).unwrap();
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "wardle", "cluster": {
            "server": format!("https://127.0.0.1:{server_port}"),
            "certificate-authority": ca,
        }}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "wardle", "context": {"cluster": "wardle", "user": "user"}}],
        "current-context": "wardle",
    });
    let path = dir.join(format!("{token}.kubeconfig"));
    std::fs::write(&path, kubeconfig.to_string()).unwrap();
    // kubectl's discovery cache stays in the test's directory.
    let home = dir.to_string_lossy();
    kubectl(&path, args, &[("HOME", &home)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_a_token_is_allowed_by_rbac_and_denied_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client_ca = TestCa::new("client-ca");
    let front_proxy = TestCa::new("front-proxy-ca");
    core.set_authentication_config(&AuthenticationConfig::with_front_proxy(
        &client_ca.cert_pem,
        &front_proxy.cert_pem,
    ));
    let user = |name: &str| TokenUser {
        username: name.into(),
        groups: vec!["system:authenticated".into()],
        ..TokenUser::default()
    };
    core.add_token("token-of-alice", user("alice"));
    core.add_token("token-of-bob", user("bob"));
    // kube-apiserver's system:discovery role, bound to every authenticated user.
    core.allow(Rule {
        groups: vec!["system:authenticated".into()],
        verbs: vec!["get".into()],
        non_resource_urls: [
            "/api",
            "/api/*",
            "/apis",
            "/apis/*",
            "/openapi",
            "/openapi/*",
        ]
        .map(String::from)
        .to_vec(),
        ..Rule::default()
    });
    core.allow(
        Rule::user(
            "alice",
            &["get", "list", "create"],
            "wardle.example.com",
            &["flunders"],
        )
        .in_namespace("ns1"),
    );

    let mut options = Backend::Memory.options(dir.path());
    let kubeconfig = core.kubeconfig(CALLER);
    options.auth.authentication_kubeconfig = Some(kubeconfig.clone());
    options.auth.authorization_kubeconfig = Some(kubeconfig);
    // Long enough that no answer expires while the test runs, so the count below is exact.
    options.auth.authentication_token_webhook_cache_ttl = std::time::Duration::from_secs(600);
    let server = serve(options).await;
    let port = server.addr.port();
    let d = dir.path().to_path_buf();

    let flunder = dir.path().join("flunder.json");
    std::fs::write(
        &flunder,
        r#"{"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
            "metadata": {"name": "by-alice", "namespace": "ns1"}, "spec": {}}"#,
    )
    .unwrap();
    let file = flunder.to_str().unwrap().to_string();
    let alice = tokio::task::spawn_blocking({
        let d = d.clone();
        move || {
            let created = kubectl_as(&d, port, "token-of-alice", &["create", "-f", &file]);
            let listed = kubectl_as(
                &d,
                port,
                "token-of-alice",
                &["get", "flunders", "-n", "ns1", "-o", "name"],
            );
            (created, listed)
        }
    });
    let (created, listed) = alice.await.unwrap();
    ok(created);
    assert_eq!(ok(listed).trim(), "flunder.wardle.example.com/by-alice");

    let bob = tokio::task::spawn_blocking(move || {
        kubectl_as(&d, port, "token-of-bob", &["get", "flunders", "-n", "ns1"])
    });
    let denied = bob.await.unwrap();
    assert!(!denied.success, "bob must be denied: {}", denied.stdout);
    assert!(
        denied.stderr.contains(
            "flunders.wardle.example.com is forbidden: User \"bob\" cannot list resource \
             \"flunders\" in API group \"wardle.example.com\" in the namespace \"ns1\""
        ),
        "{}",
        denied.stderr
    );
    // Alice may not delete what she created: her role has no delete.
    let d = dir.path().to_path_buf();
    let delete = tokio::task::spawn_blocking(move || {
        kubectl_as(
            &d,
            port,
            "token-of-alice",
            &["delete", "flunder", "by-alice", "-n", "ns1"],
        )
    });
    let delete = delete.await.unwrap();
    assert!(!delete.success);
    assert!(
        delete
            .stderr
            .contains("cannot delete resource \"flunders\""),
        "{}",
        delete.stderr
    );
    // One TokenReview per token, whatever kubectl sent (the answers are cached).
    assert_eq!(core.count("/tokenreviews"), 2);
    server.stop().await;
}

/// kube-apiserver defaults an object again after a mutating admission plugin changed it
/// (`GetObjectDefaulter().Default` in both mutating dispatchers): a MutatingAdmissionPolicy of
/// the core that sets `spec.reference` on a flunder created without one leaves a flunder whose
/// `referenceType` wardle's defaulting filled in, which its validation requires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_a_mutating_policy_changed_is_defaulted_again() {
    use extension_apiserver::aggregator::AggregatorOptions;
    use extension_apiserver_testing::TestServer;

    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.serve_mutating_admission_policies(true);
    core.set_mutating_admission_policy(serde_json::json!({
        "metadata": {"name": "reference"},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["wardle.example.com"], "apiVersions": ["*"],
                "operations": ["CREATE"], "resources": ["flunders"],
            }]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{spec: Object.spec{reference: 'other'}}"}}],
        },
    }));
    core.set_mutating_admission_policy_binding(serde_json::json!({
        "metadata": {"name": "reference"}, "spec": {"policyName": "reference"},
    }));
    let aggregator = AggregatorOptions {
        kubeconfig: Some(core.kubeconfig(CALLER)),
        ..AggregatorOptions::default()
    };
    let options = Backend::Memory.options(&dir.path().join("server"));
    let server = TestServer::start_configured(options, move |s| {
        wardle::configure(s).aggregator_options(aggregator)
    })
    .await;

    let flunder = dir.path().join("flunder.json");
    std::fs::write(
        &flunder,
        r#"{"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
            "metadata": {"name": "mutated", "namespace": "default"}, "spec": {}}"#,
    )
    .unwrap();
    // The policies are followed from the core once the server is up: wait until it acts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let created = loop {
        let out = server.kubectl(&["create", "-f", flunder.to_str().unwrap(), "-o", "json"]);
        let created: serde_json::Value = serde_json::from_str(&ok(out)).unwrap();
        if created["spec"]["reference"] == "other" || std::time::Instant::now() > deadline {
            break created;
        }
        ok(server.kubectl(&["delete", "flunder", "mutated"]));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        created["spec"],
        serde_json::json!({"reference": "other", "referenceType": "Flunder"}),
        "{created}"
    );
    server.stop().await;
}
