//! The fake core kube-apiserver of `extension_apiserver_testing::fake_core`, driven by kube-rs with the
//! real API types: what it answers must parse as kube-apiserver's answers do.

use std::collections::BTreeMap;

use extension_apiserver::core_api::{CoreAPISource, core_client};
use extension_apiserver_testing::fake_core::{AuthenticationConfig, FakeCore, Rule, TokenUser};
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
    assert_eq!(source, CoreAPISource::Kubeconfig);
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

/// Whether `call` is a list (not a watch) of `path`.
fn is_list(call: &extension_apiserver_testing::fake_core::Call, path: &str) -> bool {
    call.path == path && !call.query.contains("watch=")
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_gets_410_expired() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client = client(&core, "system:serviceaccount:wardle:apiserver").await;
    let namespaces: Api<Namespace> = Api::all(client);
    let old = namespaces
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    core.set_namespace("later", "Active");
    core.compact();
    let mut events = namespaces
        .watch(&WatchParams::default(), &old)
        .await
        .expect("the watch starts: 200, as kube-apiserver's watch cache answers")
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            let now: u64 = old.parse::<u64>().unwrap() + 1;
            assert_eq!(
                status.message,
                format!("too old resource version: {old} ({now})")
            );
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    assert!(events.try_next().await.unwrap().is_none(), "the watch ends");

    // From the current resourceVersion the watch goes on.
    let mut events = namespaces
        .watch(
            &WatchParams::default(),
            &(old.parse::<u64>().unwrap() + 1).to_string(),
        )
        .await
        .unwrap()
        .boxed();
    core.set_namespace("newest", "Active");
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(ns)) => assert_eq!(ns.metadata.name.as_deref(), Some("newest")),
        other => panic!("expected ADDED, got {other:?}"),
    }

    // A window of N events forgets older ones the same way.
    core.set_history_window(1);
    core.set_namespace("a", "Active");
    core.set_namespace("b", "Active");
    let mut events = namespaces
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        events.try_next().await.unwrap(),
        Some(WatchEvent::Error(status)) if status.code == 410
    ));
}

/// The next item of a watcher stream, within 30 s.
async fn next<S: futures::Stream + Unpin>(events: &mut S) -> S::Item {
    tokio::time::timeout(std::time::Duration::from_secs(30), events.next())
        .await
        .expect("watcher event in time")
        .expect("the watcher never ends")
}

#[tokio::test]
async fn kube_rs_watcher_relists_after_410_and_bookmarks_avoid_it() {
    use kube::runtime::watcher;

    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client = client(&core, "system:serviceaccount:wardle:apiserver").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // The watcher's default configuration: list (limit=500), then watch with bookmarks.
    let mut events = watcher(namespaces.clone(), watcher::Config::default()).boxed();
    assert!(matches!(next(&mut events).await, Ok(watcher::Event::Init)));
    let mut listed = Vec::new();
    while let Ok(watcher::Event::InitApply(ns)) = next(&mut events).await {
        listed.push(ns.metadata.name.unwrap());
    }
    listed.sort();
    assert_eq!(listed, ["default", "kube-system"]);
    core.set_namespace("seen", "Active");
    match next(&mut events).await {
        Ok(watcher::Event::Apply(ns)) => assert_eq!(ns.metadata.name.as_deref(), Some("seen")),
        other => panic!("expected Apply, got {other:?}"),
    }

    // A change the namespace watch does not see moves the resourceVersion past it; once the
    // history is gone and the watch restarts, its resourceVersion has expired: 410, relist.
    core.set_configmap("other", "cm", BTreeMap::new());
    core.compact();
    core.close_watches();
    match next(&mut events).await {
        Err(watcher::Error::WatchError(status)) => assert_eq!(status.code, 410),
        other => panic!("expected the 410 to reach the watcher, got {other:?}"),
    }
    assert!(matches!(next(&mut events).await, Ok(watcher::Event::Init)));
    while !matches!(next(&mut events).await, Ok(watcher::Event::InitDone)) {}
    let lists = core
        .calls()
        .iter()
        .filter(|c| is_list(c, "/api/v1/namespaces"))
        .count();
    assert_eq!(lists, 2, "listed again after the 410");

    // With bookmarks the idle watch keeps a current resourceVersion, and no relist is needed.
    core.set_bookmark_interval(std::time::Duration::from_millis(100));
    drop(events);
    let mut events = watcher(namespaces, watcher::Config::default()).boxed();
    while !matches!(next(&mut events).await, Ok(watcher::Event::InitDone)) {}
    // An unrelated change, then bookmarks carry its resourceVersion to the idle watch.
    core.set_configmap("other", "cm2", BTreeMap::new());
    let lists_before = core
        .calls()
        .iter()
        .filter(|c| is_list(c, "/api/v1/namespaces"))
        .count();
    // Poll the watcher so that it takes in bookmarks (they yield no event) for a while.
    let idle = tokio::time::timeout(std::time::Duration::from_millis(500), events.next()).await;
    assert!(idle.is_err(), "no event expected, got {idle:?}");
    core.compact();
    core.close_watches();
    core.set_namespace("after", "Active");
    match next(&mut events).await {
        Ok(watcher::Event::Apply(ns)) => assert_eq!(ns.metadata.name.as_deref(), Some("after")),
        other => panic!("expected Apply without a relist, got {other:?}"),
    }
    let lists_after = core
        .calls()
        .iter()
        .filter(|c| is_list(c, "/api/v1/namespaces"))
        .count();
    assert_eq!(lists_after, lists_before, "the bookmark spared a relist");
}

#[tokio::test]
async fn streaming_lists_are_refused_as_kube_apiserver_1_33_does() {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client = client(&core, "system:serviceaccount:wardle:apiserver").await;
    let namespaces: Api<Namespace> = Api::all(client);
    let params = WatchParams::streaming_lists();
    let err = namespaces.watch(&params, "0").await.err().expect("refused");
    let kube::Error::Api(status) = err else {
        panic!("expected a Status, got {err}");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    );
}

#[tokio::test]
async fn webhook_configurations_are_defaulted_listed_and_watched() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(dir.path()).await;
    let client = client(&core, "system:serviceaccount:wardle:apiserver").await;
    let hook = serde_json::json!({
        "name": "check.example.com",
        "clientConfig": {"url": "https://127.0.0.1:1/check"},
        "rules": [{"operations": ["CREATE"], "apiGroups": ["*"], "apiVersions": ["*"],
                   "resources": ["*"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    core.set_mutating_webhook_configuration(serde_json::json!({
        "metadata": {"name": "m"}, "webhooks": [hook.clone()],
    }));
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let list = mutating.list(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let webhook = &list.items[0].webhooks.as_ref().unwrap()[0];
    assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(webhook.match_policy.as_deref(), Some("Equivalent"));
    assert_eq!(webhook.timeout_seconds, Some(10));
    assert_eq!(webhook.reinvocation_policy.as_deref(), Some("Never"));
    assert_eq!(webhook.namespace_selector, Some(Default::default()));
    let rules = webhook.rules.as_ref().unwrap();
    assert_eq!(rules[0].scope.as_deref(), Some("*"));

    // Watched from the list's resourceVersion: a new configuration, then its deletion.
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client);
    let from = validating
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = validating
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    core.set_validating_webhook_configuration(serde_json::json!({
        "metadata": {"name": "v"}, "webhooks": [hook],
    }));
    match next(&mut events).await.unwrap() {
        WatchEvent::Added(v) => {
            assert_eq!(v.metadata.name.as_deref(), Some("v"));
            let webhook = &v.webhooks.unwrap()[0];
            assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
        }
        other => panic!("{other:?}"),
    }
    core.delete_validating_webhook_configuration("v");
    assert!(matches!(
        next(&mut events).await.unwrap(),
        WatchEvent::Deleted(_)
    ));
}
