//! The field manager against the sequences kube-apiserver records.

use super::*;
use serde_json::json;

const V1: &str = "wardle.example.com/v1alpha1";

fn owner(manager: &str, second: u32) -> FieldOwner {
    FieldOwner::new(manager, V1, &format!("2024-05-01T10:00:{second:02}Z"))
}

fn entries(object: &Value) -> Vec<(String, String, String)> {
    let list = object["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    list.iter()
        .map(|e| {
            let fields = FieldSet::from_fields_v1(&e["fieldsV1"]).unwrap();
            let manager = e["manager"].as_str().unwrap_or_default().to_owned();
            let op = e["operation"].as_str().unwrap_or_default().to_owned();
            (manager, op, fields.to_fields_v1_string())
        })
        .collect()
}

#[test]
fn update_on_create_records_the_whole_object() {
    let fm = FieldManager::default();
    let mut new = json!({"apiVersion": V1, "kind": "Flunder",
                         "metadata": {"name": "f", "labels": {"a": "1"}},
                         "spec": {"reference": "x"}});
    fm.update(None, &mut new, &owner("kubectl-create", 1));
    assert_eq!(
        entries(&new),
        [(
            "kubectl-create".into(),
            "Update".into(),
            r#"{"f:metadata":{"f:labels":{".":{},"f:a":{}}},"f:spec":{".":{},"f:reference":{}}}"#
                .into()
        )]
    );
    let e = &new["metadata"]["managedFields"][0];
    assert_eq!(e["apiVersion"], V1);
    assert_eq!(e["time"], "2024-05-01T10:00:01Z");
    assert_eq!(e["fieldsType"], "FieldsV1");
}

fn schema() -> PatchSchema {
    PatchSchema::from_json_schema(&json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "spec": {"type": "object", "properties": {
                "reference": {"type": "string"},
                "replicas": {"type": "integer"},
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                              "port": {"type": "integer"}, "protocol": {"type": "string"},
                              "name": {"type": "string"}}},
                          "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"]},
                "containers": {"type": "array", "items": {"type": "object", "properties": {
                                   "name": {"type": "string"}, "image": {"type": "string"}}},
                               "x-kubernetes-patch-strategy": "merge",
                               "x-kubernetes-patch-merge-key": "name"},
                "tags": {"type": "array", "items": {"type": "string"},
                         "x-kubernetes-list-type": "set"},
                "selector": {"type": "object", "additionalProperties": {"type": "string"},
                             "x-kubernetes-map-type": "atomic"},
                "data": {"type": "object", "additionalProperties": {"type": "string"}}
            }},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
        }
    }))
}

fn flunder(spec: Value) -> Value {
    json!({"apiVersion": V1, "kind": "Flunder", "metadata": {"name": "f"}, "spec": spec})
}

fn fm() -> FieldManager {
    FieldManager::new(schema())
}

#[test]
fn apply_create_owns_what_it_applied() {
    let config = flunder(json!({"reference": "x", "ports": [{"port": 80, "protocol": "TCP"}]}));
    let live = fm()
        .apply(None, &config, &owner("kubectl", 1), false)
        .unwrap();
    assert_eq!(live["spec"], config["spec"]);
    assert_eq!(
        entries(&live),
        [("kubectl".into(), "Apply".into(),
          r#"{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{}}},"f:reference":{}}}"#.into())]
    );
    let e = &live["metadata"]["managedFields"][0];
    assert_eq!(
        (e["apiVersion"].as_str(), e["time"].as_str()),
        (Some(V1), Some("2024-05-01T10:00:01Z"))
    );
    assert!(e.get("subresource").is_none());
}

#[test]
fn two_managers_conflict_then_force() {
    let fm = fm();
    let live = fm
        .apply(
            None,
            &flunder(json!({"reference": "x", "replicas": 1})),
            &owner("kubectl", 1),
            false,
        )
        .unwrap();
    // Same value: shared, no conflict.
    let shared = fm
        .apply(
            Some(&live),
            &flunder(json!({"replicas": 1})),
            &owner("kube-rs", 2),
            false,
        )
        .unwrap();
    assert_eq!(entries(&shared).len(), 2);
    // kube moves an applier's time only when the object changes.
    let list = shared["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(list[0]["manager"], "kube-rs");
    assert!(list[0].get("time").is_none());
    // Another value: a conflict with the owner, as kube words it.
    let other = flunder(json!({"reference": "y", "replicas": 1}));
    let e = fm
        .apply(Some(&shared), &other, &owner("kube-rs", 3), false)
        .unwrap_err();
    assert_eq!(e.code(), 409);
    assert_eq!(
        e.message(),
        r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.reference"#
    );
    let cause = &e.status().details.as_ref().unwrap().causes[0];
    assert_eq!(
        (cause.reason.as_str(), cause.field.as_str()),
        ("FieldManagerConflict", ".spec.reference")
    );
    assert_eq!(cause.message, r#"conflict with "kubectl""#);
    // Forced: kube-rs takes the field, kubectl keeps the rest.
    let forced = fm
        .apply(Some(&shared), &other, &owner("kube-rs", 3), true)
        .unwrap();
    assert_eq!(forced["spec"], json!({"reference": "y", "replicas": 1}));
    assert_eq!(
        entries(&forced),
        [
            (
                "kubectl".into(),
                "Apply".into(),
                r#"{"f:spec":{"f:replicas":{}}}"#.into()
            ),
            (
                "kube-rs".into(),
                "Apply".into(),
                r#"{"f:spec":{"f:reference":{},"f:replicas":{}}}"#.into()
            )
        ]
    );
}

#[test]
fn conflicts_name_update_managers_with_version_and_subresource() {
    let fm = fm();
    let mut live = flunder(json!({"reference": "x"}));
    live["status"] = json!({"phase": "Ready"});
    fm.update(
        None,
        &mut live,
        &owner("controller", 1).subresource("status"),
    );
    let mut config = flunder(json!({}));
    config["status"] = json!({"phase": "Gone"});
    let e = fm
        .apply(Some(&live), &config, &owner("kubectl", 2), false)
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            r#"Apply failed with 1 conflict: conflict with "controller" with subresource "status" using {V1}: .status.phase"#
        )
    );
    let two = flunder(json!({"reference": "y"}));
    let mut two = two;
    two["status"] = json!({"phase": "Gone"});
    let e = fm
        .apply(Some(&live), &two, &owner("kubectl", 2), false)
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            "Apply failed with 2 conflicts: conflicts with \"controller\" with subresource \"status\" using {V1}:\n- .spec.reference\n- .status.phase"
        )
    );
}

#[test]
fn omitting_a_field_removes_it_unless_another_manager_owns_it() {
    let fm = fm();
    let live = fm
        .apply(
            None,
            &flunder(json!({"reference": "x", "replicas": 1, "data": {"a": "1", "b": "2"}})),
            &owner("kubectl", 1),
            false,
        )
        .unwrap();
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"data": {"b": "2"}})),
            &owner("other", 2),
            false,
        )
        .unwrap();
    let next = fm
        .apply(
            Some(&live),
            &flunder(json!({"replicas": 1})),
            &owner("kubectl", 3),
            false,
        )
        .unwrap();
    assert_eq!(next["spec"], json!({"replicas": 1, "data": {"b": "2"}}));
    assert_eq!(
        entries(&next),
        [
            (
                "other".into(),
                "Apply".into(),
                r#"{"f:spec":{"f:data":{"f:b":{}}}}"#.into()
            ),
            (
                "kubectl".into(),
                "Apply".into(),
                r#"{"f:spec":{"f:replicas":{}}}"#.into()
            )
        ]
    );
    // A field an updater set stays too.
    let mut updated = next.clone();
    updated["spec"]["reference"] = json!("by-hand");
    fm.update(Some(&next), &mut updated, &owner("kubectl-edit", 4));
    let last = fm
        .apply(
            Some(&updated),
            &flunder(json!({"replicas": 2})),
            &owner("kubectl", 5),
            false,
        )
        .unwrap();
    assert_eq!(last["spec"]["reference"], "by-hand");
}

#[test]
fn list_maps_merge_by_every_key() {
    let fm = fm();
    let live = fm
        .apply(
            None,
            &flunder(json!({"ports": [{"port": 80, "protocol": "TCP", "name": "http"}]})),
            &owner("a", 1),
            false,
        )
        .unwrap();
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"ports": [{"port": 80, "protocol": "UDP", "name": "dns"}]})),
            &owner("b", 2),
            false,
        )
        .unwrap();
    assert_eq!(
        live["spec"]["ports"],
        json!([{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 80, "protocol": "UDP", "name": "dns"}])
    );
    let e = fm
        .apply(
            Some(&live),
            &flunder(json!({"ports": [{"port": 80, "protocol": "UDP", "name": "x"}]})),
            &owner("a", 3),
            false,
        )
        .unwrap_err();
    assert_eq!(
        e.message(),
        r#"Apply failed with 1 conflict: conflict with "b": .spec.ports[port=80,protocol="UDP"].name"#
    );
    // A merge key alone (strategic merge markers) is a list map too.
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"containers": [{"name": "c", "image": "1"}]})),
            &owner("c", 4),
            false,
        )
        .unwrap();
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"containers": [{"name": "d", "image": "2"}]})),
            &owner("d", 5),
            false,
        )
        .unwrap();
    assert_eq!(
        live["spec"]["containers"],
        json!([{"name": "c", "image": "1"}, {"name": "d", "image": "2"}])
    );
}

#[test]
fn sets_merge_by_value_and_atomic_maps_are_replaced() {
    let fm = fm();
    let live = fm
        .apply(
            None,
            &flunder(json!({"tags": ["a", "b"], "selector": {"app": "x", "tier": "web"}})),
            &owner("a", 1),
            false,
        )
        .unwrap();
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"tags": ["c"]})),
            &owner("b", 2),
            false,
        )
        .unwrap();
    assert_eq!(live["spec"]["tags"], json!(["a", "b", "c"]));
    // The owner of an atomic map conflicts on the whole map...
    let e = fm
        .apply(
            Some(&live),
            &flunder(json!({"selector": {"app": "x"}})),
            &owner("b", 3),
            false,
        )
        .unwrap_err();
    assert_eq!(
        e.message(),
        r#"Apply failed with 1 conflict: conflict with "a": .spec.selector"#
    );
    // ...and a forced apply replaces it.
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"tags": ["c"], "selector": {"app": "x"}})),
            &owner("b", 3),
            true,
        )
        .unwrap();
    assert_eq!(live["spec"]["selector"], json!({"app": "x"}));
    // Applier a drops "b": removed; "c" (b's) stays.
    let live = fm
        .apply(
            Some(&live),
            &flunder(json!({"tags": ["a"]})),
            &owner("a", 4),
            false,
        )
        .unwrap();
    assert_eq!(live["spec"]["tags"], json!(["a", "c"]));
}

#[test]
fn update_records_added_modified_removed() {
    let fm = fm();
    let mut live = flunder(json!({"reference": "x", "replicas": 1}));
    fm.update(None, &mut live, &owner("creator", 1));
    let mut new = live.clone();
    new["spec"] = json!({"reference": "y", "data": {"k": "v"}});
    fm.update(Some(&live), &mut new, &owner("editor", 2));
    assert_eq!(
        entries(&new),
        [
            ("creator".into(), "Update".into(), r#"{"f:spec":{}}"#.into()),
            (
                "editor".into(),
                "Update".into(),
                r#"{"f:spec":{"f:data":{".":{},"f:k":{}},"f:reference":{}}}"#.into()
            )
        ]
    );
    // A write that changes nothing keeps the entries and their times.
    let mut same = new.clone();
    fm.update(Some(&new), &mut same, &owner("noop", 3));
    assert_eq!(
        same["metadata"]["managedFields"],
        new["metadata"]["managedFields"]
    );
    // The same manager's updates merge into one entry with the later time.
    let mut again = new.clone();
    again["spec"]["replicas"] = json!(3);
    fm.update(Some(&new), &mut again, &owner("editor", 4));
    let list = again["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[1]["time"], "2024-05-01T10:00:04Z");
    assert_eq!(
        entries(&again)[1].2,
        r#"{"f:spec":{"f:data":{".":{},"f:k":{}},"f:reference":{},"f:replicas":{}}}"#
    );
}

#[test]
fn update_managers_are_capped() {
    let fm = fm();
    let mut live = flunder(json!({}));
    fm.update(None, &mut live, &owner("creator", 0));
    for i in 1..=12u32 {
        let mut new = live.clone();
        new["spec"]["data"] = json!({});
        new["spec"]["data"][format!("k{i}")] = json!("v");
        let mut data = live["spec"].get("data").cloned().unwrap_or(json!({}));
        data[format!("k{i}")] = json!("v");
        new["spec"]["data"] = data;
        fm.update(Some(&live), &mut new, &owner(&format!("m{i:02}"), i));
        live = new;
    }
    let found = entries(&live);
    assert_eq!(found.len(), managed::MAX_UPDATE_MANAGERS);
    assert_eq!(found[0].0, "ancient-changes");
}

#[test]
fn managed_fields_sent_are_kept_or_reset() {
    let fm = fm();
    let mut live = flunder(json!({"reference": "x"}));
    fm.update(None, &mut live, &owner("creator", 1));
    // A client that does not know managedFields (sends none) keeps live's.
    let mut new = live.clone();
    new["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    fm.update(Some(&live), &mut new, &owner("editor", 2));
    assert_eq!(entries(&new), entries(&live));
    // An empty list or one empty entry resets them: only this write's changes are left.
    for reset in [json!([]), json!([{}])] {
        let mut new = live.clone();
        new["metadata"]["managedFields"] = reset;
        fm.update(Some(&live), &mut new, &owner("editor", 2));
        assert!(new["metadata"].get("managedFields").is_none(), "{new}");
        let mut changed = live.clone();
        changed["metadata"]["managedFields"] = json!([]);
        changed["spec"]["replicas"] = json!(2);
        fm.update(Some(&live), &mut changed, &owner("editor", 2));
        assert_eq!(
            entries(&changed),
            [(
                "editor".into(),
                "Update".into(),
                r#"{"f:spec":{"f:replicas":{}}}"#.into()
            )]
        );
    }
    // Valid entries a client sends are taken as given.
    let mut new = live.clone();
    new["metadata"]["managedFields"] = json!([{"manager": "someone", "operation": "Apply",
        "apiVersion": V1, "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:reference": {}}}}]);
    fm.update(Some(&live), &mut new, &owner("editor", 2));
    assert_eq!(
        entries(&new),
        [(
            "someone".into(),
            "Apply".into(),
            r#"{"f:spec":{"f:reference":{}}}"#.into()
        )]
    );
    // Invalid ones are ignored, as are any sent to a subresource.
    for (sent, sub) in [
        (json!([{"operation": "Bad"}]), None),
        (new["metadata"]["managedFields"].clone(), Some("status")),
    ] {
        let mut other = live.clone();
        other["metadata"]["managedFields"] = sent;
        let mut who = owner("editor", 2);
        who.subresource = sub.map(str::to_owned);
        fm.update(Some(&live), &mut other, &who);
        assert_eq!(entries(&other), entries(&live));
    }
}

#[test]
fn apply_refuses_managed_fields_and_other_versions() {
    let mut config = flunder(json!({}));
    config["metadata"]["managedFields"] = json!([]);
    let e = fm()
        .apply(None, &config, &owner("a", 1), false)
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (400, "metadata.managedFields must be nil")
    );
    let mut config = flunder(json!({}));
    config["apiVersion"] = json!("wardle.example.com/v1beta1");
    let e = fm()
        .apply(None, &config, &owner("a", 1), false)
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (
            400,
            "invalid object type: wardle.example.com/v1beta1, Kind=Flunder"
        )
    );
    let live = fm()
        .apply(None, &flunder(json!({})), &owner("a", 1), false)
        .unwrap();
    let mut other_kind = flunder(json!({}));
    other_kind["kind"] = json!("Fischer");
    let e = fm()
        .apply(Some(&live), &other_kind, &owner("a", 1), false)
        .unwrap_err();
    assert_eq!(
        e.message(),
        "invalid object type: wardle.example.com/v1alpha1, Kind=Fischer"
    );
    let no_kind = json!({"apiVersion": "v1"});
    let e = fm()
        .apply(None, &no_kind, &FieldOwner::new("a", "v1", "t"), false)
        .unwrap_err();
    assert_eq!(e.message(), "invalid object type: /v1, Kind=");
}

#[test]
fn a_noop_apply_keeps_the_time() {
    let fm = fm();
    let config = flunder(json!({"reference": "x"}));
    let live = fm.apply(None, &config, &owner("a", 1), false).unwrap();
    let again = fm
        .apply(Some(&live), &config, &owner("a", 9), false)
        .unwrap();
    assert_eq!(again, live);
}

/// `kubectl apply` (client-side) then `kubectl apply --server-side`: no conflict on the
/// fields the annotation set, and the annotation follows the new configuration.
#[test]
fn kubectl_takes_over_client_side_apply() {
    let fm = fm();
    let csa = flunder(json!({"reference": "x", "replicas": 1}));
    let mut live = csa.clone();
    live["metadata"]["annotations"] = json!({LAST_APPLIED_CONFIG_ANNOTATION: format!("{csa}\n")});
    fm.update(None, &mut live, &owner("kubectl-client-side-apply", 1));
    let config = flunder(json!({"reference": "y", "replicas": 1}));
    // Another manager conflicts...
    assert!(
        fm.apply(Some(&live), &config, &owner("other", 2), false)
            .is_err()
    );
    // ...kubectl does not.
    let applied = fm
        .apply(Some(&live), &config, &owner("kubectl", 2), false)
        .unwrap();
    assert_eq!(applied["spec"]["reference"], "y");
    let annotation = applied["metadata"]["annotations"][LAST_APPLIED_CONFIG_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(serde_json::from_str::<Value>(annotation).unwrap(), config);
    assert!(annotation.ends_with('\n'));
    let found = entries(&applied);
    assert_eq!(
        found[0],
        (
            "kubectl".into(),
            "Apply".into(),
            r#"{"f:spec":{"f:reference":{},"f:replicas":{}}}"#.into()
        )
    );
    // A field client-side apply did not set, changed by hand since, still conflicts.
    let mut edited = applied.clone();
    edited["spec"]["data"] = json!({"k": "v"});
    fm.update(Some(&applied), &mut edited, &owner("kubectl-edit", 3));
    let config = flunder(json!({"reference": "y", "replicas": 1, "data": {"k": "w"}}));
    let e = fm
        .apply(Some(&edited), &config, &owner("kubectl", 4), false)
        .unwrap_err();
    assert!(e.message().contains(".spec.data.k"), "{}", e.message());
}

#[test]
fn field_set_strips_what_kube_never_manages() {
    let object = json!({"apiVersion": V1, "kind": "Flunder",
        "metadata": {"name": "f", "namespace": "n", "uid": "u", "resourceVersion": "1",
                     "generation": 1, "creationTimestamp": "t", "labels": {"a": "b"}},
        "spec": {"reference": "x"}});
    assert_eq!(
        fm().field_set(&object).to_fields_v1_string(),
        r#"{"f:metadata":{"f:labels":{"f:a":{}}},"f:spec":{"f:reference":{}}}"#
    );
}

#[test]
fn manager_names_from_user_agents() {
    assert_eq!(
        manager_from_user_agent("kubectl/v1.33.0 (linux/amd64) kubernetes/abc"),
        "kubectl"
    );
    assert_eq!(manager_from_user_agent("kube-rs/0.99"), "kube-rs");
    assert_eq!(
        manager_from_user_agent("Go-http-client/1.1"),
        "Go-http-client"
    );
    assert_eq!(manager_from_user_agent("a\u{7}b c"), "ab c");
    assert_eq!(manager_from_user_agent(""), "");
    assert_eq!(
        manager_from_user_agent(&"x".repeat(300)).len(),
        FIELD_MANAGER_MAX_LENGTH
    );
    assert_eq!(manager_from_user_agent(&"é".repeat(100)).len(), 128);
}

/// The nginx Deployment of kube's documentation, applied with `kubectl apply
/// --server-side`: kube-apiserver records exactly these fields for manager `kubectl`.
#[test]
fn a_deployment_applied_by_kubectl_owns_what_kube_records() {
    let fm = FieldManager::for_type::<k8s_openapi::api::apps::v1::Deployment>();
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "nginx-deployment", "labels": {"app": "nginx"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "nginx"}},
                 "template": {"metadata": {"labels": {"app": "nginx"}},
                              "spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2",
                                                       "ports": [{"containerPort": 80}]}]}}}});
    assert_eq!(
        fm.field_set(&config).to_fields_v1_string(),
        r#"{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:replicas":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{},"f:name":{},"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}}}}}}"#
    );
}

#[test]
fn object_meta_lists_and_maps_are_built_in() {
    let fm = fm();
    let uid = |u: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": u, "uid": u});
    let mut a = flunder(json!({}));
    a["metadata"]["finalizers"] = json!(["a.example.com/f"]);
    a["metadata"]["ownerReferences"] = json!([uid("1")]);
    a["metadata"]["labels"] = json!({"x": "1"});
    let live = fm.apply(None, &a, &owner("a", 1), false).unwrap();
    assert_eq!(
        entries(&live)[0].2,
        r#"{"f:metadata":{"f:finalizers":{"v:\"a.example.com/f\"":{}},"f:labels":{"f:x":{}},"f:ownerReferences":{"k:{\"uid\":\"1\"}":{".":{},"f:apiVersion":{},"f:kind":{},"f:name":{},"f:uid":{}}}},"f:spec":{}}"#
    );
    let mut b = flunder(json!({}));
    b["metadata"]["finalizers"] = json!(["b.example.com/f"]);
    b["metadata"]["ownerReferences"] = json!([uid("2")]);
    b["metadata"]["labels"] = json!({"y": "2"});
    let live = fm.apply(Some(&live), &b, &owner("b", 2), false).unwrap();
    assert_eq!(
        live["metadata"]["finalizers"],
        json!(["a.example.com/f", "b.example.com/f"])
    );
    assert_eq!(
        live["metadata"]["ownerReferences"],
        json!([uid("1"), uid("2")])
    );
    assert_eq!(live["metadata"]["labels"], json!({"x": "1", "y": "2"}));
    assert_eq!(live["metadata"]["name"], "f");
}

#[test]
fn reset_fields_are_never_owned_nor_contested() {
    let fm = fm();
    let status = FieldSet::from_fields_v1_str(r#"{"f:status":{}}"#).unwrap();
    let mut config = flunder(json!({"reference": "x"}));
    config["status"] = json!({"phase": "Ready"});
    let live = fm
        .apply(
            None,
            &config,
            &owner("a", 1).reset_fields(status.clone()),
            false,
        )
        .unwrap();
    assert_eq!(entries(&live)[0].2, r#"{"f:spec":{"f:reference":{}}}"#);
}

/// kubectl ≥ 1.26 migrates before its first server-side apply (`csaupgrade`): a JSON patch
/// that replaces `managedFields`, merging `kubectl-client-side-apply`'s entry into an
/// `Apply` entry of `kubectl`. The server only has to take valid entries as sent.
#[test]
fn kubectls_own_migration_patch_is_taken_as_sent() {
    let fm = fm();
    let mut live = flunder(json!({"reference": "x", "replicas": 1}));
    fm.update(None, &mut live, &owner("kubectl-client-side-apply", 1));
    let csa = live["metadata"]["managedFields"][0].clone();
    let mut migrated = live.clone();
    let mut entry = csa.clone();
    entry["manager"] = json!("kubectl");
    entry["operation"] = json!("Apply");
    migrated["metadata"]["managedFields"] = json!([entry]);
    fm.update(Some(&live), &mut migrated, &owner("kubectl", 2));
    assert_eq!(
        entries(&migrated),
        [(
            "kubectl".into(),
            "Apply".into(),
            r#"{"f:spec":{".":{},"f:reference":{},"f:replicas":{}}}"#.into()
        )]
    );
    // Now kubectl applies without conflicts and drops what it no longer applies.
    let applied = fm
        .apply(
            Some(&migrated),
            &flunder(json!({"reference": "y"})),
            &owner("kubectl", 3),
            false,
        )
        .unwrap();
    assert_eq!(applied["spec"], json!({"reference": "y"}));
    assert_eq!(
        entries(&applied),
        [(
            "kubectl".into(),
            "Apply".into(),
            r#"{"f:spec":{"f:reference":{}}}"#.into()
        )]
    );
}

/// v1alpha1 calls the field `reference`, v1beta1 `ref`: each manager's fields are compared
/// and pruned in the version it applied through.
#[test]
fn managers_of_other_versions_are_compared_in_theirs() {
    const V2: &str = "wardle.example.com/v1beta1";
    let rename = |object: &Value, to: &str| -> Option<Value> {
        let mut out = object.clone();
        if object.get("apiVersion").is_some() {
            out["apiVersion"] = json!(to);
        }
        let spec = out.get_mut("spec").and_then(Value::as_object_mut);
        if let Some(spec) = spec {
            let (from, into) = if to == V1 {
                ("ref", "reference")
            } else {
                ("reference", "ref")
            };
            if let Some(v) = spec.remove(from) {
                spec.insert(into.into(), v);
            }
        }
        Some(out)
    };
    let fm = fm().with_converter(Arc::new(rename));
    let beta = |m: &str, s: u32| FieldOwner::new(m, V2, &format!("2024-05-01T10:00:{s:02}Z"));
    let live = fm
        .apply(
            None,
            &flunder(json!({"reference": "x", "replicas": 1})),
            &owner("alpha", 1),
            false,
        )
        .unwrap();
    let mut config = flunder(json!({"ref": "y"}));
    config["apiVersion"] = json!(V2);
    let as_beta = rename(&live, V2).unwrap();
    let e = fm
        .apply(Some(&as_beta), &config, &beta("beta", 2), false)
        .unwrap_err();
    // The conflict names the field as its manager knows it.
    assert_eq!(
        e.message(),
        r#"Apply failed with 1 conflict: conflict with "alpha": .spec.reference"#
    );
    let forced = fm
        .apply(Some(&as_beta), &config, &beta("beta", 2), true)
        .unwrap();
    assert_eq!(forced["spec"], json!({"ref": "y", "replicas": 1}));
    assert_eq!(entries(&forced)[0].2, r#"{"f:spec":{"f:replicas":{}}}"#);
    // alpha stops applying replicas: removed, although the object now comes in v1beta1.
    let back = rename(&forced, V1).unwrap();
    let done = fm
        .apply(Some(&back), &flunder(json!({})), &owner("alpha", 3), false)
        .unwrap();
    assert_eq!(done["spec"], json!({"reference": "y"}));
}

/// As kube's converter, an object already in the version asked for is taken as it is: an
/// apply whose managers all wrote through its own version never calls the converter (which
/// would copy the object, or round-trip it through the storage version) and prunes as
/// without one.
#[test]
fn conversions_to_the_objects_own_version_are_none() {
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = asked.clone();
    let record = move |object: &Value, to: &str| -> Option<Value> {
        seen.lock().unwrap().push(to.to_owned());
        Some(object.clone())
    };
    let converting = fm().with_converter(Arc::new(record));
    let plain = fm();
    let apply = |fm: &FieldManager, live: &Value, spec: Value, second: u32| {
        let force = second == 2; // the first apply takes the creator's fields
        fm.apply(Some(live), &flunder(spec), &owner("a", second), force)
    };
    let mut results = Vec::new();
    for fm in [&converting, &plain] {
        let mut live = flunder(json!({"reference": "x", "replicas": 1}));
        fm.update(None, &mut live, &owner("creator", 1));
        let applied = apply(fm, &live, json!({"reference": "y", "replicas": 2}), 2).unwrap();
        // The applier stops applying replicas: pruned (the creator's fields were taken).
        let pruned = apply(fm, &applied, json!({"reference": "y"}), 3).unwrap();
        assert_eq!(pruned["spec"], json!({"reference": "y"}));
        results.push(pruned);
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(*asked.lock().unwrap(), Vec::<String>::new());
}

#[test]
fn update_skips_reset_fields() {
    let fm = fm();
    let status = FieldSet::from_fields_v1_str(r#"{"f:status":{}}"#).unwrap();
    let mut new = flunder(json!({"reference": "x"}));
    new["status"] = json!({"phase": "Ready"});
    fm.update(None, &mut new, &owner("a", 1).reset_fields(status));
    assert_eq!(
        entries(&new)[0].2,
        r#"{"f:spec":{".":{},"f:reference":{}}}"#
    );
}

/// A Rust type declares its fields' apply semantics with the same `schemars` attributes
/// strategic merge patch reads.
#[test]
fn rust_types_declare_apply_semantics_with_schemars() {
    #[derive(serde::Serialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Port {
        port: u16,
        protocol: String,
    }
    #[derive(serde::Serialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Selector {
        app: String,
    }
    #[derive(serde::Serialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Spec {
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["port", "protocol"]))]
        ports: Vec<Port>,
        #[schemars(extend("x-kubernetes-patch-strategy" = "merge"))]
        tags: Vec<String>,
        #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
        selector: Option<Selector>,
        plain: Vec<String>,
    }
    #[derive(serde::Serialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Thing {
        spec: Spec,
    }
    let fm = FieldManager::for_type::<Thing>();
    let object = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}], "tags": ["a"],
                                 "selector": {"app": "x"}, "plain": ["p"]}});
    assert_eq!(
        fm.field_set(&object).to_fields_v1_string(),
        r#"{"f:spec":{"f:plain":{},"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{}}},"f:selector":{},"f:tags":{"v:\"a\"":{}}}}"#
    );
}

/// Fields the type does not have are dropped by its decoding (with a warning, or refused
/// under Strict) and never owned, as kube's decoder drops them before its field manager.
#[test]
fn unknown_fields_are_never_owned() {
    let mut new = flunder(json!({"reference": "x", "nope": 1,
                                 "ports": [{"port": 80, "protocol": "TCP", "extra": true}],
                                 "data": {"free": "form"}}));
    new["metadata"]["labels"] = json!({"a": "1"});
    new["bogus"] = json!({"deep": 1});
    fm().update(None, &mut new, &owner("kubectl-create", 1));
    assert_eq!(
        entries(&new),
        [(
            "kubectl-create".into(),
            "Update".into(),
            r#"{"f:metadata":{"f:labels":{".":{},"f:a":{}}},"f:spec":{".":{},"f:data":{".":{},"f:free":{}},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:port":{},"f:protocol":{}}},"f:reference":{}}}"#
                .into()
        )]
    );
    // The object itself is left to the typed decode (its warnings name the fields).
    assert_eq!(new["spec"]["nope"], 1);
    assert_eq!(new["bogus"]["deep"], 1);
}

/// A stored object of two managers, each owning one field of `spec`.
fn stored_by_two() -> Value {
    let fm = FieldManager::default();
    let mut live = json!({"apiVersion": V1, "kind": "Flunder", "metadata": {"name": "f"},
                          "spec": {"a": "1"}});
    fm.update(None, &mut live, &owner("first", 1));
    let mut next = live.clone();
    next["spec"]["b"] = json!("2");
    fm.update(Some(&live), &mut next, &owner("second", 2));
    next
}

/// [`stored_by_two`] and what `second`'s write of it, changed by `change`, stores.
fn written_by_second(change: impl FnOnce(&mut Value)) -> (Value, Value) {
    let live = stored_by_two();
    let mut written = live.clone();
    change(&mut written);
    FieldManager::default().update(Some(&live), &mut written, &owner("second", 3));
    (live, written)
}

#[test]
fn an_entry_the_write_leaves_alone_is_written_back_as_read() {
    // A patch of `second`'s field by `second`: `first`'s entry is untouched.
    let (live, patched) = written_by_second(|o| o["spec"]["b"] = json!("3"));
    let (before, after) = (
        &live["metadata"]["managedFields"],
        &patched["metadata"]["managedFields"],
    );
    assert_eq!(after[0], before[0], "first's entry as it was");
    assert_eq!(after[1]["time"], "2024-05-01T10:00:03Z");
    // Byte for byte what encoding every entry anew gives.
    let fresh = managed::encode(managed::decode(Some(after)).unwrap()).unwrap();
    assert_eq!(serde_json::to_string(after).unwrap(), fresh.to_string());
}

#[test]
fn entries_a_client_sent_other_than_stored_are_encoded_anew() {
    // A PUT whose entries carry a member kube's type does not have: not the stored JSON,
    // so each entry is written in kube's form.
    let (live, sent) = written_by_second(|o| {
        o["metadata"]["managedFields"][0]["extra"] = json!(true);
        o["spec"]["b"] = json!("3");
    });
    let list = sent["metadata"]["managedFields"].as_array().unwrap();
    assert!(list.iter().all(|e| e.get("extra").is_none()), "{list:?}");
    assert_eq!(list[0], live["metadata"]["managedFields"][0]);
}

#[test]
fn an_entry_the_write_takes_fields_from_is_encoded_anew() {
    let (live, patched) = written_by_second(|o| o["spec"]["a"] = json!("9"));
    // `first` keeps `spec` itself, and loses `spec.a`.
    let want = [
        ("first", r#"{"f:spec":{}}"#),
        ("second", r#"{"f:spec":{"f:a":{},"f:b":{}}}"#),
    ]
    .map(|(m, f)| (m.to_string(), "Update".to_string(), f.to_string()));
    assert_eq!(entries(&patched), want);
    assert_ne!(
        patched["metadata"]["managedFields"][0],
        live["metadata"]["managedFields"][0]
    );
}
