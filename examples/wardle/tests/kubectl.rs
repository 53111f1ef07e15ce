//! End to end with kubectl: the wardle server over real TLS on each storage backend, driven the
//! way a user drives kube-apiserver.

use crate::common::*;

backend_tests! {
    all: [
        discovery_and_explain,
        apply_get_patch_edit_delete,
        selectors_and_chunks,
        watch_sees_changes,
        cascading_delete_and_replace,
        both_versions_with_kubectl,
        ban_flunder_refuses_disallowed_names,
        server_side_apply_through_both_versions,
        the_flunder_rule_answers_as_a_crd,
    ],
    // A restart finds the objects again only on a persistent backend.
    persistent: [survives_restart_and_watch_resumes],
}

/// sample-apiserver's Flunder rule, stated in CEL on the type: a reference type without a
/// reference is refused by `kubectl apply` with a CRD's 422 (the rule's message at its
/// fieldPath, reason FieldValueRequired), a reference type outside the enum with the
/// schema's `Unsupported value`; the published schema carries the rules where a CRD does.
async fn the_flunder_rule_answers_as_a_crd(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let bad = "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: bad\n  namespace: default\nspec:\n  referenceType: Fischer\n";
    let file = write(dir.path(), "bad.yaml", bad);
    let out = server.kubectl(&["apply", "-f", &file]);
    assert!(!out.success, "{out:?}");
    assert!(
        out.stderr.contains(
            r#"The Flunder "bad" is invalid: spec.reference: Required value: must be set when referenceType is set"#
        ),
        "{}",
        out.stderr
    );
    let bogus = bad.replace("Fischer", "Bogus\n  reference: r");
    let file = write(dir.path(), "bogus.yaml", &bogus);
    let out = server.kubectl(&["apply", "-f", &file]);
    assert!(
        out.stderr.contains(
            r#"spec.referenceType: Unsupported value: "Bogus": supported values: "Flunder", "Fischer""#
        ),
        "{}",
        out.stderr
    );
    let good = bad.replace("Fischer", "Fischer\n  reference: trout");
    let file = write(dir.path(), "good.yaml", &good);
    ok(server.kubectl(&["apply", "-f", &file]));

    let v3 = ok(server.kubectl(&[
        "get",
        "--raw",
        "/openapi/v3/apis/wardle.example.com/v1alpha1",
    ]));
    let v3: serde_json::Value = serde_json::from_str(&v3).unwrap();
    let schemas = v3["components"]["schemas"].as_object().unwrap();
    let (_, flunder) = schemas
        .iter()
        .find(|(k, v)| k.ends_with(".Flunder") && v.get("x-kubernetes-validations").is_some())
        .expect("the Flunder schema carries its rules");
    let rules = flunder["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(rules[0]["fieldPath"], ".spec.reference");
    assert_eq!(rules[0]["reason"], "FieldValueRequired");
    let explain = ok(server.kubectl(&["explain", "flunder.spec.referenceType"]));
    assert!(
        explain.contains("Flunder") && explain.contains("Fischer"),
        "{explain}"
    );
    server.stop().await;
}

/// `kubectl delete --cascade` sets the garbage collector's finalizers as on kube-apiserver
/// (the object stays until the cluster's collector removes them), and `kubectl replace` of a
/// file without a resourceVersion still works: kubectl reads it first, as the server needs.
async fn cascading_delete_and_replace(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let file = write(dir.path(), "f.yaml", &flunder_yaml("f", "one", ""));
    ok(server.kubectl(&["create", "-f", &file]));
    let replaced = write(dir.path(), "r.yaml", &flunder_yaml("f", "two", "app: x"));
    ok(server.kubectl(&["replace", "-f", &replaced]));
    let reference = ok(server.kubectl(&["get", "fl", "f", "-o", "jsonpath={.spec.reference}"]));
    assert_eq!(reference, "two");

    for (cascade, finalizer) in [("foreground", "foregroundDeletion"), ("orphan", "orphan")] {
        ok(server.kubectl(&[
            "delete",
            "fl",
            "f",
            &format!("--cascade={cascade}"),
            "--wait=false",
        ]));
        let finalizers =
            ok(server.kubectl(&["get", "fl", "f", "-o", "jsonpath={.metadata.finalizers}"]));
        assert_eq!(
            finalizers,
            format!("[\"{finalizer}\"]"),
            "--cascade={cascade}"
        );
    }
    // Background (kubectl's default) drops them, so the object goes at once.
    ok(server.kubectl(&["delete", "fl", "f", "--cascade=background"]));
    let out = server.kubectl(&["get", "fl", "f"]);
    assert!(!out.success && out.stderr.contains("NotFound"), "{out:?}");
    server.stop().await;
}

/// sample-apiserver's BanFlunder: a flunder named in a fischer's `disallowedFlunders` is
/// refused with its 403, in either version and with `--dry-run=server`; other names, and the
/// name once no fischer lists it, are created.
async fn ban_flunder_refuses_disallowed_names(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let fischer = "apiVersion: wardle.example.com/v1alpha1\nkind: Fischer\nmetadata:\n  name: strict\ndisallowedFlunders: [banned, worse]\n";
    ok(server.kubectl(&["create", "-f", &write(dir.path(), "fischer.yaml", fischer)]));
    let banned = write(dir.path(), "banned.yaml", &flunder_yaml("banned", "x", ""));
    let expected = r#"flunders.wardle.example.com "banned" is forbidden: this name may not be used, please change the resource name"#;
    for extra in [&[][..], &["--dry-run=server"][..]] {
        let mut args = vec!["create", "-f", banned.as_str()];
        args.extend(extra);
        let out = server.kubectl(&args);
        assert!(!out.success, "{out:?}");
        assert!(
            out.stderr.contains("Error from server (Forbidden)") && out.stderr.contains(expected),
            "{}",
            out.stderr
        );
    }
    let beta = "apiVersion: wardle.example.com/v1beta1\nkind: Flunder\nmetadata:\n  name: worse\n  namespace: default\n";
    let out = server.kubectl(&["create", "-f", &write(dir.path(), "beta.yaml", beta)]);
    assert!(
        !out.success && out.stderr.contains("\"worse\" is forbidden"),
        "{out:?}"
    );
    let out = server.kubectl(&["get", "flunders", "-o", "name"]);
    assert_eq!(ok(out), "", "nothing refused was stored");

    let fine = write(dir.path(), "fine.yaml", &flunder_yaml("fine", "x", ""));
    ok(server.kubectl(&["create", "-f", &fine]));
    ok(server.kubectl(&["delete", "fischer", "strict"]));
    ok(server.kubectl(&["create", "-f", &banned]));
    server.stop().await;
}

/// Server-side apply by two managers through two versions: each manager's entry records its
/// version, and a field set through v1alpha1 (`reference`) is the same field through
/// v1beta1 (`flunderReference`): a conflict, named in the other manager's version as kube
/// names it, taken with `--force-conflicts`.
async fn server_side_apply_through_both_versions(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let alpha = "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: f\n  namespace: default\nspec:\n  reference: a\n  referenceType: Flunder\n";
    let out = ok(server.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        &write(dir.path(), "a.yaml", alpha),
    ]));
    assert!(out.contains("serverside-applied"), "{out}");
    let beta = "apiVersion: wardle.example.com/v1beta1\nkind: Flunder\nmetadata:\n  name: f\n  namespace: default\nspec:\n  flunderReference: b\n  referenceType: Flunder\n";
    let beta = write(dir.path(), "b.yaml", beta);
    let refused = server.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=beta",
        "-f",
        &beta,
    ]);
    assert!(!refused.success, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("conflict with \"kubectl\": .spec.reference"),
        "{}",
        refused.stderr
    );
    ok(server.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=beta",
        "--force-conflicts",
        "-f",
        &beta,
    ]));
    let reference = ok(server.kubectl(&[
        "get",
        "flunders.v1alpha1.wardle.example.com",
        "f",
        "-o",
        "jsonpath={.spec.reference}",
    ]));
    assert_eq!(reference, "b");
    let json = ok(server.kubectl(&[
        "get",
        "flunders.v1alpha1.wardle.example.com",
        "f",
        "-o",
        "json",
        "--show-managed-fields",
    ]));
    let object: serde_json::Value = serde_json::from_str(&json).unwrap();
    let entries = object["metadata"]["managedFields"].as_array().unwrap();
    let entry = |manager: &str| {
        entries
            .iter()
            .find(|e| e["manager"] == manager)
            .unwrap()
            .clone()
    };
    assert_eq!(entry("beta")["apiVersion"], "wardle.example.com/v1beta1");
    assert!(
        entry("beta")["fieldsV1"]["f:spec"]
            .get("f:flunderReference")
            .is_some()
    );
    assert_eq!(
        entry("kubectl")["apiVersion"],
        "wardle.example.com/v1alpha1"
    );
    assert!(
        entry("kubectl")["fieldsV1"]["f:spec"]
            .get("f:reference")
            .is_none(),
        "{json}"
    );
    server.stop().await;
}

async fn discovery_and_explain(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let out = ok(server.kubectl(&[
        "api-resources",
        "--api-group=wardle.example.com",
        "--no-headers",
    ]));
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec![
            "fischers",
            "wardle.example.com/v1alpha1",
            "false",
            "Fischer"
        ]),
        "{out}"
    );
    assert!(
        rows.contains(&vec![
            "flunders",
            "fl",
            "wardle.example.com/v1alpha1",
            "true",
            "Flunder"
        ]),
        "{out}"
    );
    let out = ok(server.kubectl(&["explain", "flunder.spec"]));
    assert!(out.contains("reference"), "{out}");
    assert!(out.contains("referenceType"), "{out}");
    server.stop().await;
}

async fn apply_get_patch_edit_delete(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let file = write(dir.path(), "a.yaml", &flunder_yaml("a", "one", "app: x"));
    assert!(
        ok(server.kubectl(&["apply", "-f", &file]))
            .contains("flunder.wardle.example.com/a created")
    );
    assert!(ok(server.kubectl(&["apply", "-f", &file])).contains("unchanged"));
    write(dir.path(), "a.yaml", &flunder_yaml("a", "two", "app: x"));
    assert!(ok(server.kubectl(&["apply", "-f", &file])).contains("configured"));
    let yaml = ok(server.kubectl(&["get", "fl", "a", "-o", "yaml"]));
    assert!(yaml.contains("reference: two"), "{yaml}");
    assert!(yaml.contains("referenceType: Flunder"), "{yaml}");
    assert!(yaml.contains("generation: 2"), "{yaml}");

    let wide = ok(server.kubectl(&["get", "fl", "-o", "wide"]));
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "REFERENCE", "TYPE", "AGE"], "{wide}");
    assert!(wide.lines().nth(1).unwrap().starts_with("a "), "{wide}");
    let narrow = ok(server.kubectl(&["get", "flunders"]));
    assert!(!narrow.contains("TYPE"), "{narrow}");

    ok(server.kubectl(&[
        "patch",
        "fl",
        "a",
        "--type=merge",
        "-p",
        r#"{"spec":{"reference":"three"}}"#,
    ]));
    ok(server.kubectl(&[
        "patch",
        "fl",
        "a",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/extra","value":"y"}]"#,
    ]));
    // A JSON patch that does not apply: 422 with json-patch v4's words, as kube-apiserver.
    let out = server.kubectl(&[
        "patch",
        "fl",
        "a",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/nothere"}]"#,
    ]);
    assert!(
        !out.success
            && out.stderr.contains(
                "error in remove for path: '/spec/nothere': Unable to remove nonexistent key: nothere: missing value"
            ),
        "{out:?}"
    );
    ok(server.kubectl(&[
        "patch",
        "fl",
        "a",
        "-p",
        r#"{"metadata":{"annotations":{"note":"smp"}}}"#,
    ]));
    let json = ok(server.kubectl(&["get", "fl", "a", "-o", "json"]));
    let object: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(object["spec"]["reference"], "three");
    assert_eq!(object["metadata"]["labels"]["extra"], "y");
    assert_eq!(object["metadata"]["annotations"]["note"], "smp");

    let editor = "sed -i -e s/reference:\\ three/reference:\\ edited/";
    ok(server.kubectl_with_env(&["edit", "fl", "a"], &[("KUBE_EDITOR", editor)]));
    let json = ok(server.kubectl(&["get", "fl", "a", "-o", "jsonpath={.spec.reference}"]));
    assert_eq!(json, "edited");

    assert!(ok(server.kubectl(&["delete", "fl", "a"])).contains("deleted"));
    let out = server.kubectl(&["get", "fl", "a"]);
    assert!(!out.success);
    assert!(
        out.stderr.contains("NotFound") || out.stderr.contains("not found"),
        "{}",
        out.stderr
    );
    server.stop().await;
}

async fn selectors_and_chunks(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let mut all = String::new();
    for i in 0..7 {
        let app = if i % 2 == 0 { "even" } else { "odd" };
        all.push_str(&flunder_yaml(
            &format!("f{i}"),
            &format!("r{i}"),
            &format!("app: {app}"),
        ));
        all.push_str("---\n");
    }
    let file = write(dir.path(), "all.yaml", &all);
    ok(server.kubectl(&["create", "-f", &file]));
    let names =
        |out: String| -> Vec<String> { out.split_whitespace().map(str::to_string).collect() };
    let even = ok(server.kubectl(&["get", "fl", "-l", "app=even", "-o", "name"]));
    assert_eq!(names(even).len(), 4);
    let notin = ok(server.kubectl(&["get", "fl", "-l", "app notin (even)", "-o", "name"]));
    assert_eq!(names(notin).len(), 3);
    let by_field = ok(server.kubectl(&[
        "get",
        "fl",
        "--field-selector",
        "spec.reference=r3",
        "-o",
        "name",
    ]));
    assert_eq!(names(by_field), ["flunder.wardle.example.com/f3"]);
    let chunked = ok(server.kubectl(&["get", "fl", "--chunk-size=2", "-o", "name"]));
    assert_eq!(names(chunked).len(), 7);
    let raw = ok(server.kubectl(&[
        "get",
        "--raw",
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?limit=3",
    ]));
    let page: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    assert_eq!(page["metadata"]["remainingItemCount"], 4);
    assert!(page["metadata"]["continue"].is_string());
    let all_ns = ok(server.kubectl(&["get", "fl", "-A", "--no-headers"]));
    assert_eq!(all_ns.lines().count(), 7);
    ok(server.kubectl(&["delete", "fl", "-l", "app=odd"]));
    assert_eq!(
        names(ok(server.kubectl(&["get", "fl", "-o", "name"]))).len(),
        4
    );
    server.stop().await;
}

async fn watch_sees_changes(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let file = write(dir.path(), "w.yaml", &flunder_yaml("w", "one", "app: w"));
    ok(server.kubectl(&["create", "-f", &file]));
    let watch = server.kubectl_watch(&["get", "fl", "-w", "--output-watch-events", "--no-headers"]);
    watch.expect_line(&["ADDED", "w", "one"]);
    ok(server.kubectl(&[
        "patch",
        "fl",
        "w",
        "--type=merge",
        "-p",
        r#"{"spec":{"reference":"two"}}"#,
    ]));
    watch.expect_line(&["MODIFIED", "w", "two"]);
    let file2 = write(dir.path(), "v.yaml", &flunder_yaml("v", "new", "app: v"));
    ok(server.kubectl(&["create", "-f", &file2]));
    watch.expect_line(&["ADDED", "v", "new"]);
    ok(server.kubectl(&["delete", "fl", "w"]));
    watch.expect_line(&["DELETED", "w", "two"]);
    server.stop().await;
}

async fn survives_restart_and_watch_resumes(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let options = backend.options(dir.path());
    let server = serve(options.clone()).await;
    let port = server.addr.port();
    let file = write(dir.path(), "p.yaml", &flunder_yaml("p", "before", "app: p"));
    ok(server.kubectl(&["create", "-f", &file]));
    let rv = ok(server.kubectl(&[
        "get",
        "fl",
        "p",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]));
    ok(server.kubectl(&[
        "create",
        "-f",
        &write(dir.path(), "q.yaml", &flunder_yaml("q", "x", "app: q")),
    ]));
    server.stop().await;

    // The same storage (file or etcd prefix) and port: kubectl's kubeconfig still holds.
    let server = serve(extension_apiserver::server::ServerOptions {
        secure_port: port,
        ..options
    })
    .await;
    let out = ok(server.kubectl(&["get", "fl", "-o", "name"]));
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        [
            "flunder.wardle.example.com/p",
            "flunder.wardle.example.com/q"
        ]
    );
    let path = format!(
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    );
    let events = ok(server.kubectl(&["get", "--raw", &path]));
    let first: serde_json::Value = serde_json::from_str(events.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["metadata"]["name"], "q");
    server.stop().await;
}

/// sample-apiserver's two versions through kubectl: a flunder created in v1alpha1 is listed
/// and explained in v1beta1 (its own columns), changed there, and read back in v1alpha1 with
/// nothing lost.
async fn both_versions_with_kubectl(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let server = start(backend, dir.path()).await;
    let file = write(dir.path(), "v.yaml", &flunder_yaml("v", "other", "app: v"));
    ok(server.kubectl(&["create", "-f", &file]));
    let beta = "flunders.v1beta1.wardle.example.com";
    let table = ok(server.kubectl(&["get", beta]));
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["v", "Flunder", "other"], "{table}");
    let explained = ok(server.kubectl(&[
        "explain",
        "flunders.spec",
        "--api-version=wardle.example.com/v1beta1",
    ]));
    assert!(explained.contains("fischerReference"), "{explained}");
    ok(server.kubectl(&[
        "patch",
        beta,
        "v",
        "--type=merge",
        "-p",
        r#"{"spec":{"flunderReference":"changed"}}"#,
    ]));
    let alpha = ok(server.kubectl(&[
        "get",
        "fl",
        "v",
        "-o",
        "jsonpath={.spec.reference}/{.spec.referenceType}",
    ]));
    assert_eq!(alpha, "changed/Flunder");
    // Field selectors in each version's own fields.
    let fish = flunder_yaml("fish", "trout", "app: f") + "  referenceType: Fischer\n";
    ok(server.kubectl(&["create", "-f", &write(dir.path(), "fish.yaml", &fish)]));
    let select = |resource: &str, selector: &str| {
        server.kubectl(&["get", resource, "--field-selector", selector, "-o", "name"])
    };
    let by_fischer = ok(select(beta, "spec.fischerReference=trout"));
    assert_eq!(by_fischer.trim(), "flunder.wardle.example.com/fish");
    let by_flunder = ok(select(beta, "spec.flunderReference=changed"));
    assert_eq!(by_flunder.trim(), "flunder.wardle.example.com/v");
    let by_reference = ok(select("fl", "spec.reference=trout"));
    assert_eq!(by_reference.trim(), "flunder.wardle.example.com/fish");
    let not_here = select("fl", "spec.fischerReference=trout");
    assert!(
        !not_here.success && not_here.stderr.contains("field label not supported"),
        "v1alpha1 has no such field: {}",
        not_here.stderr
    );
    let gone = server.kubectl(&[
        "patch",
        beta,
        "v",
        "--type=merge",
        "-p",
        r#"{"spec":{"fischerReference":"fish"}}"#,
    ]);
    assert!(
        !gone.success,
        "v1beta1's validation: both references at once"
    );
    assert!(
        gone.stderr
            .contains("cannot be set with flunderReference at the same time"),
        "{}",
        gone.stderr
    );
    server.stop().await;
}
