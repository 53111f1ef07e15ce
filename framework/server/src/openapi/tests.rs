use axum::Router;
use http::StatusCode;
use serde_json::{Value, json};

use super::{OpenAPIDocuments, OpenAPIInfo};
use crate::discovery::fixtures::{ALL_VERBS, GROUP, PATCH_TYPES, Reply, get, groups};
use crate::runtime::ResourceInfo;

const FLUNDER: &str = "com.example.wardle.v1alpha1.Flunder";
const V1ALPHA1: &str = "apis/wardle.example.com/v1alpha1";

fn router() -> Router {
    let info = OpenAPIInfo {
        title: "Wardle".into(),
        version: "0.1".into(),
    };
    OpenAPIDocuments::build(&groups(), &info).router()
}

async fn v2() -> Value {
    let reply = get(&router(), "/openapi/v2", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    reply.json()
}

/// The v3 document at `key`, fetched through the index as kubectl does.
async fn v3(key: &str) -> (Reply, String) {
    let router = router();
    let index = get(&router, "/openapi/v3", &[]).await.json();
    let url = index["paths"][key]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    (
        get(&router, &url, &[("accept", "application/json")]).await,
        url,
    )
}

/// Every `$ref` in `doc` points into the document, under `prefix`, at an existing definition.
/// In OpenAPI 3.0 a `$ref` has no siblings (they would be ignored).
fn assert_refs_resolve(doc: &Value, definitions: &Value, prefix: &str, no_siblings: bool) {
    fn walk(value: &Value, found: &mut Vec<(String, usize)>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref") {
                    found.push((reference.clone(), map.len()));
                }
                map.values().for_each(|v| walk(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(doc, &mut found);
    assert!(!found.is_empty());
    for (reference, keys) in found {
        let name = reference
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("foreign ref {reference}"));
        assert!(
            definitions.get(name).is_some(),
            "unresolved ref {reference}"
        );
        assert!(!no_siblings || keys == 1, "siblings next to {reference}");
    }
}

/// Keywords JSON Schema 2020-12 has and Swagger 2.0 / OpenAPI 3.0 do not.
fn assert_no_2020_12(value: &Value) {
    match value {
        Value::Object(map) => {
            for key in ["$defs", "$schema", "const", "examples", "prefixItems"] {
                assert!(!map.contains_key(key), "{key} in {value}");
            }
            if let Some(type_) = map.get("type") {
                assert!(type_.is_string() || type_.is_object(), "type union {value}");
            }
            map.values().for_each(assert_no_2020_12);
        }
        Value::Array(items) => items.iter().for_each(assert_no_2020_12),
        _ => {}
    }
}

#[tokio::test]
async fn v2_is_self_contained_swagger() {
    let doc = v2().await;
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(doc["info"], json!({"title": "Wardle", "version": "0.1"}));
    assert_eq!(doc["security"], json!([{"BearerToken": []}]));
    assert_refs_resolve(&doc, &doc["definitions"], "#/definitions/", false);
    assert_no_2020_12(&doc);
    for definition in doc["definitions"].as_object().unwrap().values() {
        assert!(definition.get("oneOf").is_none() && definition.get("anyOf").is_none());
    }
    for name in [
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
        "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
        "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
        "com.example.wardle.v1beta1.Flunder",
        "com.example.wardle.v1alpha1.FischerList",
        "com.example.aaa.v1.Fischer",
    ] {
        assert!(doc["definitions"].get(name).is_some(), "{name} missing");
    }
}

#[tokio::test]
async fn kind_definition_has_type_meta_and_gvk() {
    let doc = v2().await;
    let flunder = &doc["definitions"][FLUNDER];
    assert_eq!(
        flunder["description"],
        "A Flunder is an example type with spec and status."
    );
    assert_eq!(flunder["type"], "object");
    assert_eq!(
        flunder["x-kubernetes-group-version-kind"],
        json!([{"group": GROUP, "kind": "Flunder", "version": "v1alpha1"}])
    );
    let properties = &flunder["properties"];
    assert_eq!(properties["apiVersion"]["type"], "string");
    assert_eq!(properties["kind"]["type"], "string");
    assert_eq!(
        properties["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(
        properties["spec"],
        json!({"$ref": "#/definitions/com.example.wardle.v1alpha1.FlunderSpec",
               "description": "The desired state of the flunder."})
    );
    assert_eq!(flunder["required"], json!(["spec"]));
}

#[tokio::test]
async fn nested_types_are_named_under_their_version() {
    let doc = v2().await;
    let spec = &doc["definitions"]["com.example.wardle.v1alpha1.FlunderSpec"];
    assert_eq!(
        spec["description"],
        "FlunderSpec is the specification of a Flunder."
    );
    let properties = &spec["properties"];
    assert_eq!(
        properties["reference"],
        json!({"type": "string", "description": "A name of another flunder or fischer."})
    );
    assert_eq!(properties["replicas"]["format"], "int64");
    assert_eq!(
        properties["settings"]["additionalProperties"],
        json!({"type": "string"})
    );
    assert_eq!(
        properties["owner"]["$ref"],
        format!("#/definitions/{FLUNDER}")
    );
    let reference_type = &doc["definitions"]["com.example.wardle.v1alpha1.ReferenceType"];
    assert_eq!(reference_type["enum"], json!(["Flunder", "Fischer"]));
    assert_eq!(reference_type["type"], "string");
    assert!(
        doc["definitions"]
            .get("com.example.wardle.v1beta1.FlunderSpec")
            .is_some()
    );
}

#[tokio::test]
async fn list_definition() {
    let doc = v2().await;
    let list = &doc["definitions"]["com.example.wardle.v1alpha1.FlunderList"];
    assert_eq!(list["required"], json!(["items"]));
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        format!("#/definitions/{FLUNDER}")
    );
    assert_eq!(
        list["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"
    );
    assert_eq!(
        list["x-kubernetes-group-version-kind"][0]["kind"],
        "FlunderList"
    );
}

#[tokio::test]
async fn meta_definitions_carry_kube_extensions() {
    let doc = v2().await;
    let meta = &doc["definitions"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
    assert_eq!(
        meta["properties"]["ownerReferences"]["x-kubernetes-patch-merge-key"],
        "uid"
    );
    assert_eq!(
        meta["properties"]["finalizers"]["x-kubernetes-list-type"],
        "set"
    );
    let delete = &doc["definitions"]["io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"];
    let gvks = delete["x-kubernetes-group-version-kind"]
        .as_array()
        .unwrap();
    assert_eq!(
        gvks[0],
        json!({"group": "", "kind": "DeleteOptions", "version": "v1"})
    );
    assert!(
        gvks.contains(&json!({"group": GROUP, "kind": "DeleteOptions", "version": "v1alpha1"}))
    );
}

fn methods(doc: &Value, path: &str) -> Vec<String> {
    let item = doc["paths"]
        .get(path)
        .unwrap_or_else(|| panic!("no path {path}"));
    item.as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "parameters")
        .cloned()
        .collect()
}

fn names(params: &Value) -> Vec<&str> {
    params.as_array().map_or(Vec::new(), |p| {
        p.iter().map(|p| p["name"].as_str().unwrap()).collect()
    })
}

#[tokio::test]
async fn v2_paths_cover_every_route() {
    let doc = v2().await;
    let base = "/apis/wardle.example.com/v1alpha1";
    let expected = [
        ("/apis/", vec!["get"]),
        ("/apis/wardle.example.com/", vec!["get"]),
        ("/apis/wardle.example.com/v1alpha1/", vec!["get"]),
        (
            "/namespaces/{namespace}/flunders",
            vec!["delete", "get", "post"],
        ),
        (
            "/namespaces/{namespace}/flunders/{name}",
            vec!["delete", "get", "patch", "put"],
        ),
        (
            "/namespaces/{namespace}/flunders/{name}/status",
            vec!["get", "patch", "put"],
        ),
        ("/flunders", vec!["get"]),
        ("/watch/flunders", vec!["get"]),
        ("/watch/namespaces/{namespace}/flunders", vec!["get"]),
        ("/watch/namespaces/{namespace}/flunders/{name}", vec!["get"]),
        ("/fischers", vec!["delete", "get", "post"]),
        ("/fischers/{name}", vec!["delete", "get", "patch", "put"]),
        ("/watch/fischers", vec!["get"]),
        ("/watch/fischers/{name}", vec!["get"]),
    ];
    for (path, ops) in expected {
        let path = if path.starts_with("/apis") {
            path.to_string()
        } else {
            format!("{base}{path}")
        };
        assert_eq!(methods(&doc, &path), ops, "{path}");
    }
    // The read-only group has no write or watch routes.
    assert_eq!(methods(&doc, "/apis/aaa.example.com/v1/fischers"), ["get"]);
    assert!(
        doc["paths"]
            .get("/apis/aaa.example.com/v1/watch/fischers")
            .is_none()
    );
}

#[tokio::test]
async fn v2_operations_match_kube() {
    let doc = v2().await;
    let item =
        &doc["paths"]["/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders/{name}"];
    assert_eq!(names(&item["parameters"]), ["name", "namespace", "pretty"]);
    assert_eq!(item["parameters"][0]["required"], true);
    let patch = &item["patch"];
    assert_eq!(
        patch["operationId"],
        "patchWardleExampleComV1alpha1NamespacedFlunder"
    );
    assert_eq!(patch["tags"], json!(["wardleExampleCom_v1alpha1"]));
    assert_eq!(patch["consumes"], json!(PATCH_TYPES));
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": GROUP, "kind": "Flunder", "version": "v1alpha1"})
    );
    assert_eq!(
        names(&patch["parameters"]),
        ["body", "dryRun", "fieldManager", "fieldValidation", "force"]
    );
    assert_eq!(
        patch["parameters"][0]["schema"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    assert_eq!(patch["responses"]["201"]["description"], "Created");
    assert_eq!(
        patch["responses"]["401"],
        json!({"description": "Unauthorized"})
    );
    let delete = &item["delete"];
    assert_eq!(delete["x-kubernetes-action"], "delete");
    assert!(
        delete["parameters"][0].get("required").is_none(),
        "delete body is optional"
    );
    assert_eq!(
        names(&delete["parameters"]),
        [
            "body",
            "dryRun",
            "gracePeriodSeconds",
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "orphanDependents",
            "propagationPolicy"
        ]
    );
    assert_eq!(item["get"]["description"], "read the specified Flunder");
    assert!(item["get"].get("parameters").is_none());
}

#[tokio::test]
async fn v2_collection_operations() {
    let doc = v2().await;
    let collection =
        &doc["paths"]["/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders"];
    assert_eq!(names(&collection["parameters"]), ["namespace", "pretty"]);
    let list = &collection["get"];
    assert_eq!(list["description"], "list or watch objects of kind Flunder");
    assert_eq!(list["x-kubernetes-action"], "list");
    for param in [
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "resourceVersion",
        "watch",
        "allowWatchBookmarks",
        "timeoutSeconds",
    ] {
        assert!(names(&list["parameters"]).contains(&param), "{param}");
    }
    assert_eq!(
        list["responses"]["200"]["schema"]["$ref"],
        "#/definitions/com.example.wardle.v1alpha1.FlunderList"
    );
    assert_eq!(
        collection["post"]["operationId"],
        "createWardleExampleComV1alpha1NamespacedFlunder"
    );
    assert_eq!(
        names(&collection["post"]["parameters"]),
        ["body", "dryRun", "fieldManager", "fieldValidation"]
    );
    let deletecollection = &collection["delete"];
    assert_eq!(
        deletecollection["operationId"],
        "deleteWardleExampleComV1alpha1CollectionNamespacedFlunder"
    );
    assert_eq!(deletecollection["x-kubernetes-action"], "deletecollection");
    assert!(!names(&deletecollection["parameters"]).contains(&"watch"));
    let all = &doc["paths"]["/apis/wardle.example.com/v1alpha1/flunders"];
    assert_eq!(
        all["get"]["operationId"],
        "listWardleExampleComV1alpha1FlunderForAllNamespaces"
    );
    assert!(!names(&all["parameters"]).contains(&"namespace"));
    let watch =
        &doc["paths"]["/apis/wardle.example.com/v1alpha1/watch/namespaces/{namespace}/flunders"];
    assert_eq!(
        watch["get"]["operationId"],
        "watchWardleExampleComV1alpha1NamespacedFlunderList"
    );
    assert_eq!(watch["get"]["x-kubernetes-action"], "watchlist");
    assert!(
        names(&watch["parameters"]).contains(&"labelSelector"),
        "single-op paths share all"
    );
    let status = &doc["paths"]["/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders/{name}/status"];
    assert_eq!(
        status["put"]["operationId"],
        "replaceWardleExampleComV1alpha1NamespacedFlunderStatus"
    );
    assert_eq!(
        status["put"]["description"],
        "replace status of the specified Flunder"
    );
    assert_eq!(
        status["patch"]["x-kubernetes-group-version-kind"]["kind"],
        "Flunder"
    );
}

#[tokio::test]
async fn v2_refuses_protobuf_and_supports_etags() {
    let router = router();
    let accept = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let reply = get(&router, "/openapi/v2", &[("accept", accept)]).await;
    assert_eq!(reply.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(reply.json()["reason"], "NotAcceptable");
    let first = get(&router, "/openapi/v2", &[]).await;
    let etag = first.header("etag").to_string();
    let again = get(&router, "/openapi/v2", &[("if-none-match", &etag)]).await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn v3_index_lists_documents_with_hashes() {
    let router = router();
    let reply = get(&router, "/openapi/v3", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let index = reply.json();
    let keys: Vec<&String> = index["paths"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "apis",
            "apis/aaa.example.com",
            "apis/aaa.example.com/v1",
            "apis/wardle.example.com",
            "apis/wardle.example.com/v1alpha1",
            "apis/wardle.example.com/v1beta1"
        ]
    );
    let url = index["paths"][V1ALPHA1]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let hash = url
        .strip_prefix("/openapi/v3/apis/wardle.example.com/v1alpha1?hash=")
        .unwrap();
    let doc = get(&router, url, &[]).await;
    assert_eq!(doc.header("etag"), format!("\"{hash}\""));
}

#[tokio::test]
async fn v3_document_is_self_contained() {
    let (reply, _) = v3(V1ALPHA1).await;
    let doc = reply.json();
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = &doc["components"]["schemas"];
    assert_refs_resolve(&doc, schemas, "#/components/schemas/", true);
    assert_no_2020_12(&doc);
    assert!(schemas.get(FLUNDER).is_some());
    // Only what this group version uses.
    assert!(schemas.get("com.example.wardle.v1beta1.Flunder").is_none());
    assert!(
        doc["paths"]
            .get("/apis/wardle.example.com/v1alpha1/")
            .is_some()
    );
    assert_eq!(
        schemas[FLUNDER]["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let group = v3("apis/wardle.example.com").await.0.json();
    assert_eq!(
        group["paths"]["/apis/wardle.example.com/"]["get"]["operationId"],
        "getWardleExampleComAPIGroup"
    );
    let root = v3("apis").await.0.json();
    assert_eq!(
        root["paths"]["/apis/"]["get"]["operationId"],
        "getAPIVersions"
    );
}

/// kubectl's `gvkSupportsPatchOpenAPIV3` and `supportsQueryParamV3`: the first PATCH operation
/// with the kind's `x-kubernetes-group-version-kind` decides; it must take strategic merge
/// patch and have `fieldValidation` among its own parameters. Every one of them must pass
/// because kubectl iterates a Go map.
#[tokio::test]
async fn kubectl_finds_strategic_merge_patch_and_field_validation() {
    let doc = v3(V1ALPHA1).await.0.json();
    let gvk = json!({"group": GROUP, "kind": "Flunder", "version": "v1alpha1"});
    let mut patches = 0;
    for item in doc["paths"].as_object().unwrap().values() {
        let Some(patch) = item.get("patch") else {
            continue;
        };
        if patch["x-kubernetes-group-version-kind"] != gvk {
            continue;
        }
        patches += 1;
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_some()
        );
        assert!(names(&patch["parameters"]).contains(&"fieldValidation"));
    }
    assert_eq!(patches, 2, "object and status");
    let post =
        &doc["paths"]["/apis/wardle.example.com/v1alpha1/namespaces/{namespace}/flunders"]["post"];
    assert_eq!(
        post["requestBody"],
        json!({"content": {"*/*": {"schema": {"$ref": format!("#/components/schemas/{FLUNDER}")}}}, "required": true})
    );
    assert!(
        post["responses"]["201"]["content"]
            .get("application/json")
            .is_some()
    );
}

/// What `kubectl explain flunders.spec` does with the v3 document: find the schema whose
/// `x-kubernetes-group-version-kind` names the kind, then follow `spec`.
#[tokio::test]
async fn explain_can_walk_the_schema() {
    let doc = v3(V1ALPHA1).await.0.json();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let gvk = json!({"group": GROUP, "kind": "Flunder", "version": "v1alpha1"});
    let (_, flunder) = schemas
        .iter()
        .find(|(_, s)| {
            s["x-kubernetes-group-version-kind"]
                .as_array()
                .is_some_and(|l| l.contains(&gvk))
        })
        .expect("schema with the kind's GVK");
    let spec = &flunder["properties"]["spec"];
    assert_eq!(spec["description"], "The desired state of the flunder.");
    let target = spec["allOf"][0]["$ref"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    assert_eq!(schemas[target]["properties"]["replicas"]["type"], "integer");
}

#[tokio::test]
async fn v3_caching_headers_follow_the_hash() {
    let router = router();
    let (reply, url) = v3(V1ALPHA1).await;
    assert_eq!(
        reply.header("cache-control"),
        "public, immutable, max-age=31536000"
    );
    assert_eq!(reply.header("vary"), "Accept");
    let plain = get(&router, &format!("/openapi/v3/{V1ALPHA1}"), &[]).await;
    assert_eq!(plain.status, StatusCode::OK);
    assert_eq!(plain.header("cache-control"), "no-cache, private");
    let stale = get(&router, &format!("/openapi/v3/{V1ALPHA1}?hash=0BAD"), &[]).await;
    assert_eq!(stale.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(stale.header("location"), url);
    let etag = reply.header("etag").to_string();
    let cached = get(&router, &url, &[("if-none-match", &etag)]).await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert_eq!(
        cached.header("cache-control"),
        "public, immutable, max-age=31536000"
    );
}

#[tokio::test]
async fn v3_errors_are_statuses() {
    let router = router();
    let missing = get(&router, "/openapi/v3/apis/nope.example.com/v1", &[]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["kind"], "Status");
    let accept = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf";
    let protobuf = get(
        &router,
        &format!("/openapi/v3/{V1ALPHA1}"),
        &[("accept", accept)],
    )
    .await;
    assert_eq!(protobuf.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(protobuf.json()["code"], 406);
}

#[tokio::test]
async fn kinds_sharing_a_type_or_inline_get_their_own_definitions() {
    let mut groups = groups();
    let version = &mut groups[1].versions[0];
    let mut fish = version.resources[0].clone();
    fish.info = ResourceInfo {
        kind: "Fish",
        plural: "fish",
        singular: "fish",
        ..fish.info
    };
    let mut computed = version.resources[0].clone();
    computed.info = ResourceInfo {
        kind: "Computed",
        plural: "computeds",
        ..computed.info
    };
    computed.schema = |_| {
        schemars::json_schema!({
            "type": "object",
            "description": "Computed on read.",
            "properties": {"value": {"type": "integer"}},
        })
    };
    version.resources.extend([fish, computed]);
    let router = OpenAPIDocuments::build(&groups, &OpenAPIInfo::default()).router();
    let doc = get(&router, "/openapi/v2", &[]).await.json();
    let definitions = &doc["definitions"];
    assert_refs_resolve(&doc, definitions, "#/definitions/", false);
    for kind in ["Fischer", "Fish", "Computed"] {
        let gvk =
            &definitions[format!("com.example.aaa.v1.{kind}")]["x-kubernetes-group-version-kind"];
        assert_eq!(gvk[0]["kind"], kind);
    }
    let computed = &definitions["com.example.aaa.v1.Computed"];
    assert_eq!(computed["description"], "Computed on read.");
    assert_eq!(
        computed["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
}

#[test]
fn all_verbs_fixture_is_sorted() {
    let mut sorted = ALL_VERBS;
    sorted.sort();
    assert_eq!(sorted, ALL_VERBS);
}

/// Runs the real `kubectl explain` (and `kubectl api-resources`) against a server made of these
/// routes. Needs `kubectl` on the PATH: `cargo test -p extension-apiserver --lib openapi::`.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_explain_works() {
    let info = OpenAPIInfo::default();
    let app = Router::new()
        .merge(crate::discovery::DiscoveryDocuments::build(&groups()).router())
        .merge(OpenAPIDocuments::build(&groups(), &info).router())
        .fallback(|| async {
            axum::response::IntoResponse::into_response(crate::Error::path_not_found())
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = std::env::temp_dir().join(format!("apiserver-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    let config = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: t, cluster: {{server: 'http://{address}'}}}}]\ncontexts: [{{name: t, context: {{cluster: t, user: u}}}}]\ncurrent-context: t\nusers: [{{name: u, user: {{}}}}]\n"
    );
    std::fs::write(&kubeconfig, config).unwrap();
    let run = |args: &'static [&'static str]| {
        let kubeconfig = kubeconfig.clone();
        let cache = dir.join("cache");
        tokio::task::spawn_blocking(move || {
            let output = std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--cache-dir")
                .arg(&cache)
                .args(args)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout).to_string();
            let stderr = String::from_utf8_lossy(&output.stderr).to_string();
            assert!(
                output.status.success(),
                "kubectl {args:?}: {stdout}\n{stderr}"
            );
            stdout
        })
    };
    let resources = run(&["api-resources", "--api-group", "wardle.example.com"])
        .await
        .unwrap();
    assert!(
        resources.contains("flunders") && resources.contains("fl"),
        "{resources}"
    );
    let explained = run(&[
        "explain",
        "flunders.spec",
        "--api-version",
        "wardle.example.com/v1alpha1",
    ])
    .await
    .unwrap();
    assert!(
        explained.contains("The desired state of the flunder."),
        "{explained}"
    );
    assert!(explained.contains("replicas"), "{explained}");
    let explained = run(&["explain", "fl.spec.referenceType"]).await.unwrap();
    assert!(explained.contains("Possible enum values"), "{explained}");
    let _ = std::fs::remove_dir_all(&dir);
}
