//! The fake core kube-apiserver of `apiserver::testing::fake_core`, driven by kube-rs with the
//! real API types: what it answers must parse as kube-apiserver's answers do.

use std::collections::BTreeMap;

use apiserver::server::core_api::{core_client, CoreApiSource};
use apiserver::testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{APIService, APIServiceSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

async fn client(core: &FakeCore, user: &str) -> kube::Client {
    let path = core.kubeconfig(user);
    let (client, source) = core_client(Some(&path)).await.unwrap().unwrap();
    assert_eq!(source, CoreApiSource::Kubeconfig);
    client
}

fn status_code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn token_and_access_reviews_have_the_real_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client = client(&core, "system:serviceaccount:wardle:apiserver").await;
    core.add_token(
        "good",
        TokenUser {
            username: "alice".into(),
            uid: "u-1".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            extra: BTreeMap::from([("scopes".into(), vec!["a".into()])]),
        },
    );
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.into()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let good = reviews
        .create(&PostParams::default(), &review("good"))
        .await
        .unwrap();
    let status = good.status.unwrap();
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.unwrap();
    assert_eq!(user.username.as_deref(), Some("alice"));
    assert_eq!(user.groups.unwrap(), ["devs", "system:authenticated"]);
    assert_eq!(user.extra.unwrap()["scopes"], ["a"]);
    let bad = reviews
        .create(&PostParams::default(), &review("bad"))
        .await
        .unwrap();
    let status = bad.status.unwrap();
    assert_ne!(status.authenticated, Some(true));
    assert!(status.error.is_some());

    core.allow(
        Rule::user(
            "alice",
            &["get", "list"],
            "wardle.example.com",
            &["flunders"],
        )
        .in_namespace("ns1"),
    );
    let sars: Api<SubjectAccessReview> = Api::all(client.clone());
    let sar = |user: &str, groups: &[&str], verb: &str, ns: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.into()),
                verb: Some(verb.into()),
                group: Some("wardle.example.com".into()),
                version: Some("v1alpha1".into()),
                resource: Some("flunders".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let pp = PostParams::default();
    let allowed = |r: SubjectAccessReview| r.status.unwrap().allowed;
    assert!(allowed(
        sars.create(&pp, &sar("alice", &[], "list", "ns1"))
            .await
            .unwrap()
    ));
    assert!(!allowed(
        sars.create(&pp, &sar("alice", &[], "delete", "ns1"))
            .await
            .unwrap()
    ));
    assert!(!allowed(
        sars.create(&pp, &sar("alice", &[], "list", "ns2"))
            .await
            .unwrap()
    ));
    assert!(!allowed(
        sars.create(&pp, &sar("bob", &[], "list", "ns1"))
            .await
            .unwrap()
    ));
    assert!(allowed(
        sars.create(&pp, &sar("root", &["system:masters"], "delete", "x"))
            .await
            .unwrap()
    ));
    assert_eq!(core.count("/subjectaccessreviews"), 5);

    // A caller without its binding is refused, as RBAC would.
    core.forbid("system:serviceaccount:wardle:apiserver", "tokenreviews");
    let err = reviews.create(&pp, &review("good")).await.unwrap_err();
    assert_eq!(status_code(err), 403);
    // Unknown callers are not let in at all.
    let bad_kubeconfig = std::fs::read_to_string(core.kubeconfig("x"))
        .unwrap()
        .replace("caller-", "unknown-");
    let bad_path = dir.path().join("bad.kubeconfig");
    std::fs::write(&bad_path, bad_kubeconfig).unwrap();
    let (stranger, _) = core_client(Some(&bad_path)).await.unwrap().unwrap();
    let err = Api::<Namespace>::all(stranger)
        .list(&Default::default())
        .await
        .unwrap_err();
    assert_eq!(status_code(err), 401);
}

#[tokio::test]
async fn configmaps_are_watched_and_apiservices_updated_with_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client = client(&core, "system:serviceaccount:wardle:apiserver").await;
    core.set_authentication_config(&AuthenticationConfig::with_front_proxy("CA1", "FP1"));

    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let map = maps
        .get("extension-apiserver-authentication")
        .await
        .unwrap();
    let data = map.data.unwrap();
    assert_eq!(data["client-ca-file"], "CA1");
    assert_eq!(
        data["requestheader-allowed-names"],
        r#"["front-proxy-client"]"#
    );
    assert_eq!(
        data["requestheader-username-headers"],
        r#"["X-Remote-User"]"#
    );
    let rv = map.metadata.resource_version.unwrap();

    let params = WatchParams::default().fields("metadata.name=extension-apiserver-authentication");
    let mut events = maps.watch(&params, &rv).await.unwrap().boxed();
    core.set_authentication_config(&AuthenticationConfig::with_front_proxy("CA2", "FP1"));
    match events.try_next().await.unwrap().unwrap() {
        WatchEvent::Modified(m) => assert_eq!(m.data.unwrap()["client-ca-file"], "CA2"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    let namespaces: Api<Namespace> = Api::all(client.clone());
    core.set_namespace("gone", "Terminating");
    let ns = namespaces.get("gone").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert_eq!(status_code(namespaces.get("nope").await.unwrap_err()), 404);

    let apiservices: Api<APIService> = Api::all(client);
    let service = APIService {
        metadata: ObjectMeta {
            name: Some("v1alpha1.wardle.example.com".into()),
            ..ObjectMeta::default()
        },
        spec: Some(APIServiceSpec {
            group: Some("wardle.example.com".into()),
            version: Some("v1alpha1".into()),
            group_priority_minimum: 1000,
            version_priority: 15,
            ..APIServiceSpec::default()
        }),
        status: None,
    };
    let pp = PostParams::default();
    let created = apiservices.create(&pp, &service).await.unwrap();
    assert_eq!(
        status_code(apiservices.create(&pp, &service).await.unwrap_err()),
        409
    );
    let mut stale = created.clone();
    let mut fresh = created.clone();
    fresh.spec.as_mut().unwrap().version_priority = 20;
    let replaced = apiservices
        .replace("v1alpha1.wardle.example.com", &pp, &fresh)
        .await
        .unwrap();
    assert_eq!(replaced.spec.unwrap().version_priority, 20);
    stale.spec.as_mut().unwrap().version_priority = 30;
    let err = apiservices
        .replace("v1alpha1.wardle.example.com", &pp, &stale)
        .await
        .unwrap_err();
    assert_eq!(status_code(err), 409);
    let patch = serde_json::json!({"spec": {"insecureSkipTLSVerify": true}});
    apiservices
        .patch(
            "v1alpha1.wardle.example.com",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let stored = core.apiservice("v1alpha1.wardle.example.com").unwrap();
    assert_eq!(stored["spec"]["insecureSkipTLSVerify"], true);
    assert_eq!(stored["spec"]["versionPriority"], 20);
    assert_eq!(
        apiservices
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}
