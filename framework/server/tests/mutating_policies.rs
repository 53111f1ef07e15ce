//! MutatingAdmissionPolicies of the core cluster (`admissionregistration.k8s.io/v1beta1`):
//! policies and bindings held by the fake core kube-apiserver, applied in CEL to the server's
//! own flunders (the webhook tests' server) before the mutating webhooks, with kube-rs's
//! client. Only loopback addresses.

use std::collections::BTreeMap;

use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::fake_core::FakeCore;
use serde_json::{Value, json};

use super::admission_policies::setup;
use super::admission_webhooks::{Webhooks, configuration, request, rules, start};

const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders";
const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies";

/// `(code, body)` of a POST of a flunder as the admin.
async fn create(server: &TestServer, name: &str, reference: &str) -> (u16, Value) {
    let body = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                      "metadata": {"name": name}, "spec": {"reference": reference}});
    let (code, body, _) = request(server, "POST", FLUNDERS, Some(body)).await;
    (code, body)
}

/// A policy on flunders' creates and updates with `mutations` and `spec` added.
fn policy(name: &str, mutations: Value, spec: Value) -> Value {
    let mut policy = json!({
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["wardle.example.com"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["flunders"],
            }]},
            "mutations": mutations,
        },
    });
    for (k, v) in spec.as_object().unwrap() {
        policy["spec"][k] = v.clone();
    }
    policy
}

fn apply_configuration(expression: &str) -> Value {
    json!([{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}])
}

fn json_patch(expression: &str) -> Value {
    json!([{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}])
}

fn binding(name: &str, policy: &str, spec: Value) -> Value {
    let mut binding = json!({"metadata": {"name": name}, "spec": {"policyName": policy}});
    for (k, v) in spec.as_object().unwrap() {
        binding["spec"][k] = v.clone();
    }
    binding
}

/// `policy` and a binding of the same name, in the fake core.
fn bound(core: &FakeCore, policy: Value, binding_spec: Value) {
    let name = policy["metadata"]["name"].as_str().unwrap().to_string();
    core.set_mutating_admission_policy(policy);
    core.set_mutating_admission_policy_binding(binding(&name, &name, binding_spec));
}

#[tokio::test]
async fn apply_configurations_and_json_patches_mutate_the_object() {
    let s = setup().await;
    bound(
        &s.core,
        policy(
            "defaults",
            apply_configuration(
                "Object{metadata: Object.metadata{labels: {'team': 'wardle'}}, \
                 spec: Object.spec{reference: object.spec.reference == '' ? 'default' : object.spec.reference}}",
            ),
            json!({}),
        ),
        json!({}),
    );
    bound(
        &s.core,
        policy(
            "patches",
            json_patch(
                "[JSONPatch{op: 'add', path: '/metadata/finalizers', value: []}, \
                  JSONPatch{op: 'add', path: '/metadata/finalizers/-', value: 'example.com/keep'}, \
                  JSONPatch{op: 'add', path: '/metadata/annotations', value: {}}, \
                  JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('example.com/by'), \
                            value: object.metadata.labels.team}]",
            ),
            json!({}),
        ),
        json!({}),
    );
    let server = s.server().await;
    let (code, created) = create(&server, "a", "").await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["labels"], json!({"team": "wardle"}));
    assert_eq!(created["spec"]["reference"], "default");
    assert_eq!(
        created["metadata"]["finalizers"],
        json!(["example.com/keep"])
    );
    // The JSON patch (policy "patches", after "defaults") sees the label the first set.
    assert_eq!(
        created["metadata"]["annotations"],
        json!({"example.com/by": "wardle"})
    );
    let (_, stored, _) = request(&server, "GET", &format!("{FLUNDERS}/a"), None).await;
    assert_eq!(stored["spec"], created["spec"]);
    // Not owned: the policy tracks no fields, the creating client owns what it sent.
    let managers: Vec<&str> = stored["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        !managers.iter().any(|m| m.contains("Policy")),
        "{managers:?}"
    );
    let (code, kept) = create(&server, "b", "mine").await;
    assert_eq!(code, 201, "{kept}");
    assert_eq!(kept["spec"]["reference"], "mine");
    server.stop().await;
}

#[tokio::test]
async fn params_and_match_conditions() {
    let s = setup().await;
    s.core.set_configmap(
        "default",
        "defaults",
        BTreeMap::from([("reference".to_string(), "from-param".to_string())]),
    );
    bound(
        &s.core,
        policy(
            "from-params",
            apply_configuration("Object{spec: Object.spec{reference: params.data.reference}}"),
            json!({
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConditions": [{"name": "not-skipped",
                                     "expression": "!object.metadata.name.startsWith('skip-')"}],
            }),
        ),
        json!({"paramRef": {"name": "defaults", "parameterNotFoundAction": "Deny"}}),
    );
    let server = s.server().await;
    let (code, created) = create(&server, "a", "r").await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["reference"], "from-param");
    let (code, skipped) = create(&server, "skip-me", "r").await;
    assert_eq!(code, 201, "{skipped}");
    assert_eq!(skipped["spec"]["reference"], "r");
    // A param missing, with `parameterNotFoundAction: Deny`: a binding that cannot be configured
    // has no reason of its own, so kube's refusal stays `Forbidden` (a failed mutation says
    // `Invalid`).
    s.core.set_mutating_admission_policy_binding(binding(
        "from-params",
        "from-params",
        json!({"paramRef": {"name": "missing", "parameterNotFoundAction": "Deny"}}),
    ));
    let mut refused = None;
    for _ in 0..100 {
        let (code, answer) = create(&server, "no-param", "r").await;
        if code == 403 {
            refused = Some(answer);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let status = refused.expect("refused once the param is gone");
    assert_eq!(status["reason"], "Forbidden", "{status}");
    assert_eq!(
        status["message"],
        "policy 'from-params' with binding 'from-params' denied request: failed to \
         configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
        "{status}"
    );
    server.stop().await;
}

// Several threads: kubectl blocks the test's thread while the server answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_follow_the_failure_policy_with_kubes_status() {
    let s = setup().await;
    bound(
        &s.core,
        policy(
            "fails",
            json_patch(
                "[JSONPatch{op: 'add', path: '/spec/reference', value: object.spec.nothing}]",
            ),
            json!({}),
        ),
        json!({}),
    );
    let server = s.server().await;
    let (code, status) = create(&server, "a", "r").await;
    let message = "policy 'fails' with binding 'fails' denied request: expression '[JSONPatch{op: 'add', path: '/spec/reference', value: object.spec.nothing}]' resulted in error: ";
    assert_eq!(code, 403, "{status}");
    assert_eq!(status["reason"], "Invalid", "{status}");
    assert!(
        status["message"].as_str().unwrap().starts_with(message),
        "{status}"
    );
    assert_eq!(
        status["details"]["causes"][0]["message"], status["message"],
        "{status}"
    );
    assert_eq!(status["details"]["name"], "a");
    assert_eq!(status["details"]["kind"], "flunders");
    let file = s.dir.path().join("flunder.json");
    let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
                         "metadata": {"name": "k", "namespace": "default"}, "spec": {"reference": "r"}});
    std::fs::write(&file, flunder.to_string()).unwrap();
    let out = server.kubectl(&["create", "-f", file.to_str().unwrap()]);
    assert!(!out.success);
    assert!(
        out.stderr
            .contains("policy 'fails' with binding 'fails' denied request: expression"),
        "{}",
        out.stderr
    );

    // With Ignore, the request goes through unchanged.
    s.core.set_mutating_admission_policy(policy(
        "fails",
        json_patch("[JSONPatch{op: 'add', path: '/spec/reference', value: object.spec.nothing}]"),
        json!({"failurePolicy": "Ignore"}),
    ));
    let admitted = extension_apiserver_testing::eventually(|| async {
        create(&server, "b", "r").await.0 == 201
    })
    .await;
    assert!(admitted);
    server.stop().await;
}

#[tokio::test]
async fn the_mutated_object_is_validated_as_any_write() {
    let s = setup().await;
    bound(
        &s.core,
        policy(
            "bad-annotation",
            json_patch(
                "[JSONPatch{op: 'add', path: '/metadata/annotations', \
                            value: {'not a key': 'x'}}]",
            ),
            json!({}),
        ),
        json!({}),
    );
    let server = s.server().await;
    let (code, status) = create(&server, "a", "r").await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.annotations"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_core_without_the_api_leaves_requests_unchanged() {
    let s = setup().await;
    s.core.serve_mutating_admission_policies(false);
    bound(
        &s.core,
        policy(
            "defaults",
            apply_configuration("Object{spec: Object.spec{reference: 'changed'}}"),
            json!({}),
        ),
        json!({}),
    );
    let server = s.server().await;
    let (code, created) = create(&server, "a", "r").await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["reference"], "r");
    let (lists, watches) = s.core.lists_and_watches(POLICIES);
    assert_eq!((lists, watches), (0, 0), "not followed");
    server.stop().await;
}

#[tokio::test]
async fn the_plugin_can_be_disabled() {
    let s = setup().await;
    bound(
        &s.core,
        policy(
            "defaults",
            apply_configuration("Object{spec: Object.spec{reference: 'changed'}}"),
            json!({}),
        ),
        json!({}),
    );
    let server = start(&s.dir.path().join("server"), &s.core, |o| {
        o.admission.disable_admission_plugins = vec!["MutatingAdmissionPolicy".into()];
    })
    .await;
    let (code, created) = create(&server, "a", "r").await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["reference"], "r");
    assert_eq!(s.core.lists_and_watches(POLICIES).0, 0, "not followed");
    server.stop().await;
}

#[tokio::test]
async fn policies_run_before_the_mutating_webhooks() {
    let s = setup().await;
    let webhooks = Webhooks::start().await;
    bound(
        &s.core,
        policy(
            "labels",
            apply_configuration("Object{metadata: Object.metadata{labels: {'policy': 'yes'}}}"),
            json!({}),
        ),
        json!({}),
    );
    // The webhook replaces the labels whole.
    let hook = webhooks.hook(
        "mutate.wardle.example.com",
        "/mutate",
        rules(&["CREATE"], &["v1alpha1"], &["flunders"]),
        json!({}),
    );
    s.core
        .set_mutating_webhook_configuration(configuration("mutate", vec![hook]));
    let server = s.server().await;
    let (code, created) = create(&server, "a", "r").await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["labels"], json!({"mutated": "yes"}));
    let reviews = webhooks.reviews("/mutate");
    assert_eq!(reviews.len(), 1);
    assert_eq!(
        reviews[0]["request"]["object"]["metadata"]["labels"],
        json!({"policy": "yes"}),
        "the webhook sees the policy's mutation"
    );

    // With `reinvocationPolicy: IfNeeded`, the policy runs again after the webhook's change.
    s.core.set_mutating_admission_policy(policy(
        "labels",
        apply_configuration("Object{metadata: Object.metadata{labels: {'policy': 'yes'}}}"),
        json!({"reinvocationPolicy": "IfNeeded"}),
    ));
    let both = json!({"mutated": "yes", "policy": "yes"});
    let mut name = 0;
    let reinvoked = extension_apiserver_testing::eventually(|| {
        name += 1;
        let name = format!("b{name}");
        let server = &server;
        let both = &both;
        async move {
            let (code, created) = create(server, &name, "r").await;
            code == 201 && created["metadata"]["labels"] == *both
        }
    })
    .await;
    assert!(reinvoked, "the policy's label is back after the webhook");
    server.stop().await;
}

/// A JSON patch applies with json-patch v4's semantics and words (kube's `patch/json_patch.go`):
/// one that does not apply denies the request with `JSON Patch: <v4's error>`, one whose `test`
/// fails leaves the object as it was.
#[tokio::test]
async fn json_patches_fail_in_json_patch_v4s_words_and_a_failed_test_changes_nothing() {
    let s = setup().await;
    bound(
        &s.core,
        policy(
            "p",
            json_patch("[JSONPatch{op: 'remove', path: '/spec/nothere'}]"),
            json!({}),
        ),
        json!({}),
    );
    let server = s.server().await;
    let (code, status) = create(&server, "a", "r").await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        "policy 'p' with binding 'p' denied request: JSON Patch: error in remove for path: \
         '/spec/nothere': Unable to remove nonexistent key: nothere: missing value",
        "{status}"
    );

    // Once the policy tests first, nothing is denied and nothing changes.
    s.core.set_mutating_admission_policy(policy(
        "p",
        json_patch(
            "[JSONPatch{op: 'test', path: '/spec/reference', value: 'other'}, \
              JSONPatch{op: 'replace', path: '/spec/reference', value: 'changed'}]",
        ),
        json!({}),
    ));
    let mut created = Value::Null;
    for i in 0..200 {
        let (code, body) = create(&server, &format!("b{i}"), "r").await;
        if code == 201 {
            created = body;
            break;
        }
        assert_eq!(code, 403, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(created["spec"]["reference"], "r", "{created}");
    server.stop().await;
}
