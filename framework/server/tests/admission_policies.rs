//! ValidatingAdmissionPolicies of the core cluster: policies and bindings held by the fake
//! core kube-apiserver, evaluated in CEL for the server's own resources (the webhook tests'
//! server), with kube-rs's client and kubectl. Only loopback addresses.

use std::collections::BTreeMap;

use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::fake_core::FakeCore;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};

// The server of the webhook tests: flunders stored as v1alpha1, served as v1beta1 too.
use super::admission_webhooks::start;

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";

/// `(code, body, warnings)` of a POST of a flunder as the admin.
async fn create(server: &TestServer, name: &str, reference: &str) -> (u16, Value, Vec<String>) {
    create_labelled(server, name, reference, json!({})).await
}

async fn create_labelled(
    server: &TestServer,
    name: &str,
    reference: &str,
    labels: Value,
) -> (u16, Value, Vec<String>) {
    let body = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                      "metadata": {"name": name, "labels": labels},
                      "spec": {"reference": reference}});
    crate::admission_webhooks::request(server, "POST", FLUNDERS, Some(body)).await
}

/// A policy on flunders' creates with `spec` added.
fn policy(name: &str, spec: Value) -> Value {
    let mut policy = json!({
        "metadata": {"name": name},
        "spec": {"matchConstraints": {"resourceRules": [{
            "apiGroups": ["wardle.example.com"], "apiVersions": ["*"],
            "operations": ["CREATE"], "resources": ["flunders"],
        }]}},
    });
    for (k, v) in spec.as_object().unwrap() {
        policy["spec"][k] = v.clone();
    }
    policy
}

fn binding(name: &str, policy: &str, actions: &[&str], extra: Value) -> Value {
    let mut binding = json!({
        "metadata": {"name": name},
        "spec": {"policyName": policy, "validationActions": actions},
    });
    for (k, v) in extra.as_object().unwrap() {
        binding["spec"][k] = v.clone();
    }
    binding
}

pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) core: FakeCore,
}

pub(crate) async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    Setup { dir, core }
}

impl Setup {
    pub(crate) async fn server(&self) -> TestServer {
        start(&self.dir.path().join("server"), &self.core, |_| {}).await
    }

    /// The server, writing the audit events of every request at `Metadata` to the log whose
    /// path it gives too.
    async fn audited_server(&self) -> (TestServer, std::path::PathBuf) {
        let audit_policy = self.dir.path().join("audit-policy.yaml");
        std::fs::write(
            &audit_policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
        )
        .unwrap();
        let log = self.dir.path().join("audit.log");
        let log_path = log.display().to_string();
        let server = start(&self.dir.path().join("server"), &self.core, move |o| {
            o.audit.policy_file = Some(audit_policy);
            o.audit.log_path = Some(log_path);
        })
        .await;
        (server, log)
    }
}

fn denial(code: u16, reason: &str, message: &str) -> Value {
    let full = format!("flunders.wardle.example.com \"a\" is forbidden: {message}");
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": full, "reason": reason, "code": code,
        "details": {"name": "a", "group": "wardle.example.com", "kind": "flunders",
                    "causes": [{"message": message}]},
    })
}

// Several threads: kubectl blocks the test's thread while the server answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_kubes_status_422_invalid_or_the_reason_given() {
    let s = setup().await;
    s.core.set_validating_admission_policy(policy(
        "no-bad",
        json!({"validations": [{"expression": "object.spec.reference != 'bad'"}]}),
    ));
    s.core.set_validating_admission_policy_binding(binding(
        "no-bad-binding",
        "no-bad",
        &["Deny"],
        json!({}),
    ));
    s.core.set_validating_admission_policy(policy(
        "no-worse",
        json!({"validations": [{"expression": "object.spec.reference != 'worse'",
                                "message": "worse is forbidden", "reason": "Forbidden"}]}),
    ));
    s.core.set_validating_admission_policy_binding(binding(
        "no-worse-binding",
        "no-worse",
        &["Deny"],
        json!({}),
    ));
    let server = s.server().await;

    let (code, status, _) = create(&server, "a", "bad").await;
    let message = "ValidatingAdmissionPolicy 'no-bad' with binding 'no-bad-binding' denied request: failed expression: object.spec.reference != 'bad'";
    assert_eq!(status, denial(422, "Invalid", message));
    assert_eq!(code, 422);
    let (code, status, _) = create(&server, "a", "worse").await;
    let message = "ValidatingAdmissionPolicy 'no-worse' with binding 'no-worse-binding' denied request: worse is forbidden";
    assert_eq!(status, denial(403, "Forbidden", message));
    assert_eq!(code, 403);
    let (code, body, _) = create(&server, "a", "good").await;
    assert_eq!(code, 201, "{body}");

    // Through kubectl, as a user sees it.
    let file = s.dir.path().join("flunder.json");
    let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                         "metadata": {"name": "k", "namespace": "default"}, "spec": {"reference": "bad"}});
    std::fs::write(&file, flunder.to_string()).unwrap();
    let out = server.kubectl(&["create", "-f", file.to_str().unwrap()]);
    assert!(!out.success);
    // kubectl words a 422 from its causes, as it does kube-apiserver's.
    assert!(
        out.stderr.contains("The flunders \"k\" is invalid: : ValidatingAdmissionPolicy 'no-bad' with binding 'no-bad-binding' denied request: failed expression: object.spec.reference != 'bad'"),
        "{}",
        out.stderr
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_reaches_kubectl_and_audit_the_audit_log() {
    let s = setup().await;
    s.core.set_validating_admission_policy(policy(
        "short",
        json!({
            "variables": [{"name": "length", "expression": "size(object.spec.reference)"}],
            "validations": [{"expression": "variables.length < 4",
                             "messageExpression": "'reference too long: ' + string(variables.length)"}],
            "auditAnnotations": [{"key": "length", "valueExpression": "string(variables.length)"}],
        }),
    ));
    s.core.set_validating_admission_policy_binding(binding(
        "short-binding",
        "short",
        &["Warn", "Audit"],
        json!({}),
    ));
    let (server, log) = s.audited_server().await;

    let (code, body, warnings) = create(&server, "a", "longer").await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        warnings,
        [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'short' with binding 'short-binding': reference too long: 6\""
        ]
    );
    let file = s.dir.path().join("flunder.json");
    let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                         "metadata": {"name": "k", "namespace": "default"}, "spec": {"reference": "longest"}});
    std::fs::write(&file, flunder.to_string()).unwrap();
    let out = server.kubectl(&["create", "-f", file.to_str().unwrap()]);
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stderr.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'short' with binding 'short-binding': reference too long: 7"),
        "{}",
        out.stderr
    );

    let created = created_event(&log, "a");
    let annotations = &created["annotations"];
    assert_eq!(annotations["short/length"], "6", "{annotations}");
    let failure: Value = serde_json::from_str(
        annotations["validation.policy.admission.k8s.io/validation_failure"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        failure,
        json!([{"message": "reference too long: 6", "policy": "short", "binding": "short-binding",
                "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}])
    );
    server.stop().await;
}

/// The audit event of `log` that completed the create of `name`.
fn created_event(log: &std::path::Path, name: &str) -> Value {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "create"
                && e["objectRef"]["name"] == name
        })
        .expect("the create's event")
}

#[tokio::test]
async fn several_audit_failures_keep_the_first_as_kube() {
    let s = setup().await;
    // Two failing validations in each of two policies, all audited.
    for name in ["first", "second"] {
        s.core.set_validating_admission_policy(policy(
            name,
            json!({"validations": [
                {"expression": "object.spec.reference == 'never'", "message": format!("{name} 0")},
                {"expression": "object.spec.reference == 'nor'", "message": format!("{name} 1")},
            ]}),
        ));
        s.core
            .set_validating_admission_policy_binding(binding(name, name, &["Audit"], json!({})));
    }
    let (server, log) = s.audited_server().await;
    let (code, body, warnings) = create(&server, "a", "r").await;
    assert_eq!(code, 201, "{body}");
    assert!(warnings.is_empty(), "{warnings:?}");
    // kube publishes each failure as a list of one, and an admission annotation is never
    // overwritten: the first failure (policies in name order, validations in order) stays.
    let annotations = &created_event(&log, "a")["annotations"];
    let failure = annotations["validation.policy.admission.k8s.io/validation_failure"]
        .as_str()
        .unwrap();
    assert_eq!(
        failure,
        r#"[{"message":"first 0","policy":"first","binding":"first","expressionIndex":0,"validationActions":["Audit"]}]"#
    );
    server.stop().await;
}

#[tokio::test]
async fn params_from_a_configmap_of_the_core() {
    let s = setup().await;
    s.core.set_configmap(
        "default",
        "limits",
        BTreeMap::from([("forbidden".to_string(), "x".to_string())]),
    );
    let spec = json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "object.spec.reference != params.data.forbidden",
                         "messageExpression": "'reference ' + params.data.forbidden + ' is forbidden'"}],
    });
    s.core
        .set_validating_admission_policy(policy("limits", spec));
    s.core.set_validating_admission_policy_binding(binding(
        "limits",
        "limits",
        &["Deny"],
        json!({"paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"}}),
    ));
    let server = s.server().await;
    let (code, status, _) = create(&server, "a", "x").await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "flunders.wardle.example.com \"a\" is forbidden: ValidatingAdmissionPolicy 'limits' with binding 'limits' denied request: reference x is forbidden"
    );
    assert_eq!(create(&server, "a", "y").await.0, 201);

    // A param that is not there, with `parameterNotFoundAction: Deny`.
    s.core.set_validating_admission_policy_binding(binding(
        "limits",
        "limits",
        &["Deny"],
        json!({"paramRef": {"name": "missing", "parameterNotFoundAction": "Deny"}}),
    ));
    let expected = "flunders.wardle.example.com \"b\" is forbidden: ValidatingAdmissionPolicy 'limits' with binding 'limits' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction";
    let refused = extension_apiserver_testing::eventually(|| async {
        let (_, status, _) = create(&server, "b", "z").await;
        status["message"] == expected
    })
    .await;
    assert!(refused);
    // With `Allow`, nothing to evaluate: admitted.
    s.core.set_validating_admission_policy_binding(binding(
        "limits",
        "limits",
        &["Deny"],
        json!({"paramRef": {"name": "missing", "parameterNotFoundAction": "Allow"}}),
    ));
    let admitted = extension_apiserver_testing::eventually(|| async {
        create(&server, "c", "x").await.0 == 201
    })
    .await;
    assert!(admitted);
    // Read from an informer of ConfigMaps, as kube's param informers: listed and watched,
    // never fetched one by one.
    let (lists, watches) = s.core.lists_and_watches("/api/v1/configmaps");
    assert!(
        lists >= 1 && watches >= 1,
        "{lists} lists, {watches} watches"
    );
    assert_eq!(s.core.count("/configmaps/limits"), 0);
    assert_eq!(s.core.count("/configmaps/missing"), 0);
    server.stop().await;
}

/// A flunder of the server labelled as a rule.
async fn create_rule(server: &TestServer, name: &str, reference: &str) {
    let (code, body, _) = create_labelled(server, name, reference, json!({"role": "rules"})).await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn params_of_the_servers_own_kinds_are_read_in_process() {
    let s = setup().await;
    // Params selected among the server's flunders, in the version served converted
    // (`spec.flunderReference`); the fake core knows no such kind.
    let spec = json!({
        "paramKind": {"apiVersion": "wardle.example.com/v1beta1", "kind": "Flunder"},
        "validations": [{"expression": "object.spec.reference != params.spec.flunderReference",
                         "messageExpression": "'reference ' + params.spec.flunderReference + ' is banned by ' + params.metadata.name + ' (' + params.apiVersion + ')'"}],
    });
    s.core
        .set_validating_admission_policy(policy("banned", spec));
    s.core.set_validating_admission_policy_binding(binding(
        "banned",
        "banned",
        &["Deny"],
        json!({"paramRef": {"selector": {"matchLabels": {"role": "rules"}},
                            "parameterNotFoundAction": "Allow"}}),
    ));
    // One param by name, in the storage version.
    let spec = json!({
        "paramKind": {"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder"},
        "validations": [{"expression": "object.metadata.name != params.spec.reference + '-copy'",
                         "message": "no copies"}],
    });
    s.core
        .set_validating_admission_policy(policy("no-copy", spec));
    s.core.set_validating_admission_policy_binding(binding(
        "no-copy",
        "no-copy",
        &["Deny"],
        json!({"paramRef": {"name": "r1", "parameterNotFoundAction": "Allow"}}),
    ));
    let server = s.server().await;
    // Each rule is admitted by the rules before it.
    create_rule(&server, "r1", "x").await;
    create_rule(&server, "r2", "y").await;
    let prefix = "flunders.wardle.example.com \"a\" is forbidden: ValidatingAdmissionPolicy";
    let (code, status, _) = create(&server, "a", "x").await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "{prefix} 'banned' with binding 'banned' denied request: reference x is banned by r1 (wardle.example.com/v1beta1)"
        )
    );
    let (code, status, _) = create(&server, "a", "y").await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        format!(
            "{prefix} 'banned' with binding 'banned' denied request: reference y is banned by r2 (wardle.example.com/v1beta1)"
        )
    );
    let (code, status, _) = create(&server, "x-copy", "z").await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("'no-copy' with binding 'no-copy' denied request: no copies"),
        "{status}"
    );
    let (code, body, _) = create(&server, "a", "z").await;
    assert_eq!(code, 201, "{body}");
    // Read in process: the core was never asked about flunders.
    let asked = s.core.calls();
    assert!(
        !asked
            .iter()
            .any(|c| c.path.starts_with("/apis/wardle.example.com")),
        "{asked:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn selectors_and_match_conditions_choose_the_requests() {
    let s = setup().await;
    s.core.set_namespace_labels(
        "default",
        BTreeMap::from([("env".to_string(), "prod".to_string())]),
    );
    let never = json!([{"expression": "false", "message": "refused"}]);
    let constraints = |selectors: Value| {
        let mut c = json!({"resourceRules": [{"apiGroups": ["wardle.example.com"], "apiVersions": ["*"],
                                               "operations": ["CREATE"], "resources": ["flunders"]}]});
        for (k, v) in selectors.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let policies = [
        (
            "labelled",
            json!({"matchConstraints": constraints(json!({"objectSelector": {"matchLabels": {"checked": "yes"}}})),
                   "validations": never}),
        ),
        (
            "test-namespaces",
            json!({"matchConstraints": constraints(json!({"namespaceSelector": {"matchLabels": {"env": "test"}}})),
                   "validations": never}),
        ),
        (
            "named",
            json!({"matchConditions": [{"name": "mc", "expression": "object.metadata.name.startsWith('mc-')"}],
                   "validations": never}),
        ),
    ];
    for (name, spec) in policies {
        s.core.set_validating_admission_policy(policy(name, spec));
        s.core
            .set_validating_admission_policy_binding(binding(name, name, &["Deny"], json!({})));
    }
    let server = s.server().await;
    let (code, body, _) = create(&server, "plain", "r").await;
    assert_eq!(code, 201, "{body}");
    let (code, body, _) = create_labelled(&server, "a", "r", json!({"checked": "yes"})).await;
    assert_eq!(code, 422);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("ValidatingAdmissionPolicy 'labelled'"),
        "{body}"
    );
    let (code, body, _) = create(&server, "mc-a", "r").await;
    assert_eq!(code, 422);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("ValidatingAdmissionPolicy 'named'"),
        "{body}"
    );
    s.core.set_namespace_labels(
        "default",
        BTreeMap::from([("env".to_string(), "test".to_string())]),
    );
    let refused = extension_apiserver_testing::eventually(|| async {
        let (code, body, _) = create(&server, "ns", "r").await;
        code == 422
            && body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("'test-namespaces'")
    })
    .await;
    assert!(refused);
    server.stop().await;
}

#[tokio::test]
async fn runtime_errors_follow_the_failure_policy() {
    let s = setup().await;
    let broken = |failure: &str| {
        json!({"failurePolicy": failure,
               "validations": [{"expression": "object.spec.nothing == 1"}]})
    };
    s.core
        .set_validating_admission_policy(policy("fails", broken("Fail")));
    s.core
        .set_validating_admission_policy_binding(binding("fails", "fails", &["Deny"], json!({})));
    s.core
        .set_validating_admission_policy(policy("ignores", broken("Ignore")));
    s.core.set_validating_admission_policy_binding(binding(
        "ignores",
        "ignores",
        &["Deny"],
        json!({}),
    ));
    let server = s.server().await;
    let (code, body, _) = create(&server, "a", "r").await;
    assert_eq!(code, 422, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("flunders.wardle.example.com \"a\" is forbidden: ValidatingAdmissionPolicy 'fails' with binding 'fails' denied request: expression 'object.spec.nothing == 1' resulted in error: "),
        "{message}"
    );
    s.core.delete_validating_admission_policy("fails");
    let admitted = extension_apiserver_testing::eventually(|| async {
        create(&server, "b", "r").await.0 == 201
    })
    .await;
    assert!(admitted, "the Ignore policy lets the request through");
    server.stop().await;
}

#[tokio::test]
async fn an_evaluation_out_of_cost_budget_is_cut_with_kubes_message() {
    let s = setup().await;
    // Each validation within the per-call limit, all of them far beyond the budget of an
    // evaluation: nested comprehensions over the object's 300 annotations.
    let nested =
        "object.metadata.annotations.all(a, object.metadata.annotations.all(b, a != b || a == b))";
    let validations: Vec<Value> = (0..100).map(|_| json!({"expression": nested})).collect();
    for (name, failure) in [("f", "Fail"), ("i", "Ignore")] {
        s.core.set_validating_admission_policy(policy(
            name,
            json!({"failurePolicy": failure, "validations": validations,
                   "matchConditions": [{"name": "mine", "expression": format!("object.metadata.name.startsWith('{name}-')")}]}),
        ));
        s.core
            .set_validating_admission_policy_binding(binding(name, name, &["Deny"], json!({})));
    }
    let server = s.server().await;
    let annotations: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("k{i}"), json!("v"))).collect();
    let client = server.client();
    let send = |name: &'static str| {
        let body = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                          "metadata": {"name": name, "annotations": annotations},
                          "spec": {"reference": "r"}});
        let request = http::Request::post(FLUNDERS)
            .header("content-type", "application/json")
            .body(body.to_string().into_bytes())
            .unwrap();
        client.send(request.map(Into::into))
    };
    let started = std::time::Instant::now();
    let response = send("f-a").await.unwrap();
    assert_eq!(response.status().as_u16(), 422);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let status: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        status["message"],
        "flunders.wardle.example.com \"f-a\" is forbidden: ValidatingAdmissionPolicy 'f' with binding 'f' denied request: validation failed due to running out of cost budget, no further validation rules will be run"
    );
    // failurePolicy Ignore: admitted.
    let response = send("i-a").await.unwrap();
    assert_eq!(response.status().as_u16(), 201);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(120),
        "not stalled"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_plugin_can_be_disabled() {
    let s = setup().await;
    s.core.set_validating_admission_policy(policy(
        "never",
        json!({"validations": [{"expression": "false"}]}),
    ));
    s.core
        .set_validating_admission_policy_binding(binding("never", "never", &["Deny"], json!({})));
    let server = start(&s.dir.path().join("server"), &s.core, |o| {
        o.admission.disable_admission_plugins = vec!["ValidatingAdmissionPolicy".into()];
    })
    .await;
    let (code, body, _) = create(&server, "a", "r").await;
    assert_eq!(code, 201, "{body}");
    let (lists, _) = s
        .core
        .lists_and_watches("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies");
    assert_eq!(lists, 0, "not followed when disabled");
    server.stop().await;
}

#[tokio::test]
async fn the_authorizer_asks_the_servers_authorizer() {
    let s = setup().await;
    s.core
        .allow(extension_apiserver_testing::fake_core::Rule::user(
            "system:serviceaccount:default:robot",
            &["create"],
            "wardle.example.com",
            &["fischers"],
        ));
    // The test's client is anonymous to the core's authorizer.
    s.core
        .allow(extension_apiserver_testing::fake_core::Rule::user(
            "system:anonymous",
            &["create", "custom-verb"],
            "wardle.example.com",
            &["flunders"],
        ));
    // The request's own resource: `authorizer.requestResource` (kube's library/authz.go).
    s.core.set_validating_admission_policy(policy(
        "custom-verb",
        json!({"validations": [{"expression": "authorizer.requestResource.check('custom-verb').allowed()",
                                "message": "custom-verb refused"}]}),
    ));
    s.core.set_validating_admission_policy_binding(binding(
        "custom-verb",
        "custom-verb",
        &["Deny"],
        json!({}),
    ));
    // The service account is the flunder's reference.
    let check = "authorizer.serviceAccount('default', object.spec.reference).group('wardle.example.com').resource('fischers').namespace('default').check('create')";
    s.core.set_validating_admission_policy(policy(
        "may-create-fischers",
        json!({"validations": [{"expression": format!("{check}.allowed()"),
                                "messageExpression": format!("'may not create fischers: ' + string({check}.allowed())")}]}),
    ));
    s.core.set_validating_admission_policy_binding(binding(
        "may-create-fischers",
        "may-create-fischers",
        &["Deny"],
        json!({}),
    ));
    // Authorization delegated to the core: its SubjectAccessReviews answer the checks.
    let kubeconfig = s.core.kubeconfig("system:serviceaccount:wardle:apiserver");
    let server = start(&s.dir.path().join("server"), &s.core, move |o| {
        o.auth.authorization_kubeconfig = Some(kubeconfig);
    })
    .await;
    let (code, body, _) = create(&server, "a", "robot").await;
    assert_eq!(code, 201, "{body}");
    let (code, body, _) = create(&server, "b", "intruder").await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: may not create fischers: false"),
        "{body}"
    );
    let reviews = s.core.access_reviews();
    let asked = reviews
        .iter()
        .find(|spec| spec["user"] == "system:serviceaccount:default:intruder")
        .expect("a SubjectAccessReview for the service account");
    let attributes = &asked["resourceAttributes"];
    assert_eq!(attributes["group"], "wardle.example.com", "{asked}");
    assert_eq!(attributes["resource"], "fischers", "{asked}");
    assert_eq!(attributes["namespace"], "default", "{asked}");
    assert_eq!(attributes["verb"], "create", "{asked}");
    let custom = reviews
        .iter()
        .find(|spec| spec["resourceAttributes"]["verb"] == "custom-verb")
        .expect("a SubjectAccessReview of authorizer.requestResource");
    assert_eq!(custom["user"], "system:anonymous", "{custom}");
    assert_eq!(
        custom["resourceAttributes"],
        json!({"group": "wardle.example.com", "version": "*", "resource": "flunders",
               "namespace": "default", "name": "a", "verb": "custom-verb"})
    );
    assert_eq!(
        asked["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    server.stop().await;
}
