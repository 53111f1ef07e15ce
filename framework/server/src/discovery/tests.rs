use axum::Router;
use axum::routing::get as route_get;
use http::StatusCode;
use serde_json::json;

use super::DiscoveryDocuments;
use super::fixtures::{GROUP, Reply, get, groups};

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2BETA1: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
/// What client-go sends to `/apis` (protobuf first, JSON fallbacks with lower quality).
const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.8,application/json;q=0.7";

fn router() -> Router {
    DiscoveryDocuments::build(&groups()).router()
}

async fn fetch(uri: &str, accept: &str) -> Reply {
    get(&router(), uri, &[("accept", accept)]).await
}

#[tokio::test]
async fn apis_lists_groups_in_registration_order() {
    let reply = fetch("/apis", "application/json").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), "application/json");
    let body = reply.json();
    assert_eq!(body["kind"], "APIGroupList");
    assert_eq!(body["apiVersion"], "v1");
    let wardle = &body["groups"][0];
    assert_eq!(
        wardle,
        &json!({
            "name": GROUP,
            "versions": [
                {"groupVersion": "wardle.example.com/v1beta1", "version": "v1beta1"},
                {"groupVersion": "wardle.example.com/v1alpha1", "version": "v1alpha1"},
            ],
            "preferredVersion": {"groupVersion": "wardle.example.com/v1beta1", "version": "v1beta1"},
        })
    );
    assert_eq!(body["groups"][1]["name"], "aaa.example.com");
}

#[tokio::test]
async fn group_document_has_type_meta() {
    let body = fetch("/apis/wardle.example.com", "*/*").await.json();
    assert_eq!(body["kind"], "APIGroup");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["name"], GROUP);
    assert_eq!(body["preferredVersion"]["version"], "v1beta1");
    assert!(body.get("serverAddressByClientCIDRs").is_none());
}

#[tokio::test]
async fn resource_list_has_resources_and_subresources() {
    let body = fetch("/apis/wardle.example.com/v1alpha1", "application/json")
        .await
        .json();
    assert_eq!(body["kind"], "APIResourceList");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["groupVersion"], "wardle.example.com/v1alpha1");
    let all = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    assert_eq!(
        body["resources"],
        json!([
            {"name": "fischers", "singularName": "fischer", "namespaced": false, "kind": "Fischer",
             "verbs": all, "storageVersionHash": "YS5qRiSxzNM="},
            {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
             "verbs": all, "shortNames": ["fl"], "categories": ["all"],
             "storageVersionHash": "UHqNx5H3K7A="},
            {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder",
             "verbs": ["get", "patch", "update"]},
        ])
    );
}

#[tokio::test]
async fn unknown_group_or_version_is_a_404_status() {
    for uri in [
        "/apis/nope.example.com",
        "/apis/wardle.example.com/v9",
        "/apis/nope/v1",
    ] {
        let reply = fetch(uri, "application/json").await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{uri}");
        let body = reply.json();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "NotFound");
        assert_eq!(body["code"], 404);
    }
}

#[tokio::test]
async fn trailing_slashes_are_served() {
    for uri in [
        "/apis/",
        "/apis/wardle.example.com/",
        "/apis/wardle.example.com/v1beta1/",
    ] {
        assert_eq!(
            fetch(uri, "application/json").await.status,
            StatusCode::OK,
            "{uri}"
        );
    }
}

#[tokio::test]
async fn yaml_on_request() {
    let reply = fetch("/apis/wardle.example.com", "application/yaml").await;
    assert_eq!(reply.header("content-type"), "application/yaml");
    let body: serde_json::Value = serde_norway::from_slice(&reply.body).unwrap();
    assert_eq!(body["kind"], "APIGroup");
}

#[tokio::test]
async fn aggregated_v2_document() {
    let reply = fetch("/apis", V2).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), V2);
    assert_eq!(reply.header("cache-control"), "public");
    let body = reply.json();
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
    assert_eq!(body["metadata"], json!({}));
    // Sorted by name, like kube's resource manager with equal priorities.
    assert_eq!(
        body["items"][0]["metadata"],
        json!({"name": "aaa.example.com"})
    );
    let wardle = &body["items"][1];
    assert_eq!(wardle["metadata"]["name"], GROUP);
    assert_eq!(wardle["versions"][0]["version"], "v1beta1");
    let v1alpha1 = &wardle["versions"][1];
    assert_eq!(v1alpha1["freshness"], "Current");
    let gvk = json!({"group": GROUP, "version": "v1alpha1", "kind": "Flunder"});
    assert_eq!(
        v1alpha1["resources"],
        json!([
            {"resource": "fischers", "scope": "Cluster", "singularResource": "fischer",
             "responseKind": {"group": GROUP, "version": "v1alpha1", "kind": "Fischer"},
             "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
            {"resource": "flunders", "scope": "Namespaced", "singularResource": "flunder",
             "responseKind": gvk,
             "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
             "shortNames": ["fl"], "categories": ["all"],
             "subresources": [{"subresource": "status", "responseKind": gvk,
                               "verbs": ["get", "patch", "update"]}]},
        ])
    );
}

#[tokio::test]
async fn aggregated_v2beta1_has_the_same_shape() {
    let v2 = fetch("/apis", V2).await.json();
    let reply = fetch("/apis", V2BETA1).await;
    assert_eq!(reply.header("content-type"), V2BETA1);
    let mut beta = reply.json();
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    beta["apiVersion"] = v2["apiVersion"].clone();
    assert_eq!(beta, v2);
}

#[tokio::test]
async fn client_go_accept_header_gets_aggregated_v2() {
    let reply = fetch("/apis", CLIENT_GO).await;
    assert_eq!(reply.header("content-type"), V2);
}

#[tokio::test]
async fn aggregated_is_only_for_apis() {
    let reply = fetch("/apis/wardle.example.com", V2).await;
    assert_eq!(reply.status, StatusCode::NOT_ACCEPTABLE);
    // With a plain fallback the plain document is served.
    let reply = fetch("/apis/wardle.example.com", CLIENT_GO).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["kind"], "APIGroup");
}

#[tokio::test]
async fn unsupported_accept_is_a_406_status() {
    for accept in [
        "application/vnd.kubernetes.protobuf",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "text/html",
        "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
    ] {
        let reply = fetch("/apis", accept).await;
        assert_eq!(reply.status, StatusCode::NOT_ACCEPTABLE, "{accept}");
        let body = reply.json();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "NotAcceptable");
        assert_eq!(body["code"], 406);
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("application/json")
        );
    }
}

#[tokio::test]
async fn etag_and_304() {
    let router = router();
    for (uri, accept) in [
        ("/apis", "application/json"),
        ("/apis", V2),
        ("/apis/wardle.example.com/v1alpha1", "*/*"),
    ] {
        let first = get(&router, uri, &[("accept", accept)]).await;
        let etag = first.header("etag").to_string();
        assert!(
            etag.starts_with('"') && etag.ends_with('"') && etag.len() == 130,
            "{etag}"
        );
        assert_eq!(first.header("vary"), "Accept");
        let again = get(
            &router,
            uri,
            &[("accept", accept), ("if-none-match", &etag)],
        )
        .await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED);
        assert!(again.body.is_empty());
        assert_eq!(again.header("etag"), etag);
        let stale = get(
            &router,
            uri,
            &[("accept", accept), ("if-none-match", "\"old\"")],
        )
        .await;
        assert_eq!(stale.status, StatusCode::OK);
    }
}

#[tokio::test]
async fn representations_have_their_own_etags() {
    let plain = fetch("/apis", "application/json").await;
    let aggregated = fetch("/apis", V2).await;
    assert_ne!(plain.header("etag"), aggregated.header("etag"));
}

#[tokio::test]
async fn merges_with_resource_routes() {
    let resources = Router::new()
        .route(
            "/apis/{group}/{version}/{resource}",
            route_get(|| async { "list" }),
        )
        .route(
            "/apis/{group}/{version}/namespaces/{ns}/{resource}",
            route_get(|| async { "ns" }),
        );
    let app = router().merge(resources);
    let reply = get(&app, "/apis/wardle.example.com/v1alpha1/flunders", &[]).await;
    assert_eq!(&reply.body[..], b"list");
    let reply = get(&app, "/apis/wardle.example.com/v1alpha1", &[]).await;
    assert_eq!(reply.json()["kind"], "APIResourceList");
}

/// A lister whose resources the test changes.
struct Listed(std::sync::Mutex<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource>>);

impl super::APIResourceLister for Listed {
    fn list_api_resources(
        &self,
    ) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource> {
        self.0.lock().unwrap().clone()
    }
}

fn listed(
    name: &str,
    namespaced: bool,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource {
        name: name.into(),
        namespaced,
        kind: "MetricValueList".into(),
        verbs: vec!["get".into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_dynamic_group_follows_its_lister_and_converts_as_kube_does() {
    let lister = std::sync::Arc::new(Listed(std::sync::Mutex::new(vec![
        listed("pods/hits", true),
        listed("nodes", false),
        listed("nodes/load", false),
    ])));
    let dynamic = super::DynamicGroup::new("m.example.com").version("v1", lister.clone());
    let router = DiscoveryDocuments::with_dynamic(&groups(), vec![dynamic]).router();
    let names = |list: &serde_json::Value| -> Vec<String> {
        let resources = list["resources"].as_array().unwrap();
        resources
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    let first = get(&router, "/apis/m.example.com/v1", &[]).await;
    assert_eq!(names(&first.json()), ["nodes", "nodes/load", "pods/hits"]);
    let etag = first.header("etag").to_string();
    assert_eq!(
        get(
            &router,
            "/apis/m.example.com/v1",
            &[("if-none-match", &etag)]
        )
        .await
        .status,
        StatusCode::NOT_MODIFIED
    );
    let root = get(&router, "/apis", &[("accept", "application/json")])
        .await
        .json();
    assert_eq!(root["groups"][2]["name"], "m.example.com");

    let aggregated = get(&router, "/apis", &[("accept", V2)]).await.json();
    let group = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "m.example.com")
        .unwrap()
        .clone();
    let resources = &group["versions"][0]["resources"];
    // A listed parent keeps its kind; a parent made for a subresource has an empty one.
    assert_eq!(resources[0]["resource"], "nodes");
    assert_eq!(resources[0]["responseKind"]["kind"], "MetricValueList");
    assert_eq!(resources[0]["subresources"][0]["subresource"], "load");
    assert_eq!(resources[1]["resource"], "pods");
    assert_eq!(
        resources[1]["responseKind"],
        json!({"group": "", "version": "", "kind": ""})
    );
    assert_eq!(
        resources[1]["subresources"][0]["responseKind"],
        json!({"group": "m.example.com", "version": "v1", "kind": "MetricValueList"})
    );

    // The list changes: new bytes, a new ETag; a subresource whose scope differs from its
    // parent's leaves the version out of aggregated discovery, as kube leaves it out.
    lister.0.lock().unwrap().push(listed("pods/errors", false));
    let changed = get(
        &router,
        "/apis/m.example.com/v1",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(changed.status, StatusCode::OK);
    assert_ne!(changed.header("etag"), etag);
    assert!(names(&changed.json()).contains(&"pods/errors".to_string()));
    let aggregated = get(&router, "/apis", &[("accept", V2)]).await.json();
    let group = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "m.example.com")
        .unwrap()
        .clone();
    assert!(
        group
            .get("versions")
            .is_none_or(|v| v.as_array().unwrap().is_empty()),
        "{group}"
    );
}
