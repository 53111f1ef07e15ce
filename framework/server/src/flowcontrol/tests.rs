use std::time::Duration;

use super::*;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo::new(name, groups.iter().map(|g| g.to_string())).with_authenticated_group()
}

fn read<'a>(user: &'a UserInfo, namespace: &'a str) -> RequestDigest<'a> {
    RequestDigest {
        user,
        verb: "list",
        path: "/apis/g/v1/things",
        resource: Some(ResourceTarget {
            api_group: "g",
            resource: "things",
            namespace,
            ..ResourceTarget::default()
        }),
    }
}

/// What a real kube-apiserver has: the mandatory and the suggested objects.
fn kube_defaults(server_concurrency: u32) -> Arc<FlowControl> {
    let engine = FlowControl::new(server_concurrency);
    let mut schemas = bootstrap::mandatory_flow_schemas();
    schemas.extend(bootstrap::suggested_flow_schemas());
    let mut levels = bootstrap::mandatory_priority_levels();
    levels.extend(bootstrap::suggested_priority_levels());
    for (i, s) in schemas.iter_mut().enumerate() {
        s.metadata.uid = Some(format!("fs-{i}"));
    }
    for (i, l) in levels.iter_mut().enumerate() {
        l.metadata.uid = Some(format!("pl-{i}"));
    }
    engine.seen().schemas = Some(schemas);
    engine.seen().levels = Some(levels);
    engine.reconfigure();
    engine
}

#[test]
fn requests_are_classified_as_kube_apiserver_classifies_them() {
    let engine = kube_defaults(600);
    let class = |user: &UserInfo, digest: RequestDigest<'_>| {
        let c = engine.classify(&RequestDigest { user, ..digest });
        (c.flow_schema().to_string(), c.priority_level().to_string())
    };
    let pair = |fs: &str, pl: &str| (fs.to_string(), pl.to_string());
    let alice = user("alice", &[]);
    assert_eq!(
        class(&alice, read(&alice, "ns")),
        pair("global-default", "global-default")
    );
    let admin = user("admin", &["system:masters"]);
    assert_eq!(class(&admin, read(&admin, "ns")), pair("exempt", "exempt"));
    assert!(engine.classify(&read(&admin, "")).exempt());
    let sa = user(
        "system:serviceaccount:kube-system:generic-garbage-collector",
        &["system:serviceaccounts"],
    );
    assert_eq!(
        class(&sa, read(&sa, "ns")),
        pair("kube-system-service-accounts", "workload-high")
    );
    let other_sa = user(
        "system:serviceaccount:apps:web",
        &["system:serviceaccounts"],
    );
    assert_eq!(
        class(&other_sa, read(&other_sa, "ns")),
        pair("service-accounts", "workload-low")
    );
    let node = user("system:node:n1", &["system:nodes"]);
    let nodes = RequestDigest {
        resource: Some(ResourceTarget {
            resource: "nodes",
            subresource: "status",
            ..ResourceTarget::default()
        }),
        ..read(&node, "")
    };
    assert_eq!(class(&node, nodes), pair("system-node-high", "node-high"));
    assert_eq!(
        class(&node, read(&node, "ns")),
        pair("system-nodes", "system")
    );
    let probe = RequestDigest {
        verb: "get",
        path: "/readyz",
        resource: None,
        user: &alice,
    };
    assert_eq!(class(&alice, probe), pair("probes", "exempt"));
    // The UIDs of the objects are what the headers carry.
    let c = engine.classify(&read(&alice, "ns"));
    assert!(c.flow_schema_uid().starts_with("fs-"), "{c:?}");
    assert!(c.priority_level_uid().starts_with("pl-"), "{c:?}");
    // ByUser: one flow a user; ByNamespace: one a namespace.
    let bob = user("bob", &[]);
    assert_ne!(
        engine.classify(&read(&alice, "ns")).flow,
        engine.classify(&read(&bob, "ns")).flow
    );
    assert_eq!(
        engine.classify(&read(&sa, "a")).flow,
        engine.classify(&read(&sa, "a")).flow
    );
    assert_ne!(
        engine.classify(&read(&sa, "a")).flow,
        engine.classify(&read(&sa, "b")).flow
    );
}

#[test]
fn before_the_configuration_syncs_the_mandatory_objects_rule() {
    let engine = FlowControl::new(600);
    assert!(!engine.synced());
    let alice = user("alice", &[]);
    let c = engine.classify(&read(&alice, "ns"));
    assert_eq!(
        (c.flow_schema(), c.priority_level()),
        ("catch-all", "catch-all")
    );
    // catch-all has every seat: exempt's shares are 0.
    assert_eq!(engine.limits()["catch-all"], 600);
    // Seats split by shares, rounded up: 600 × 20 / 245 for global-default.
    let engine = kube_defaults(600);
    assert!(engine.synced());
    assert_eq!(engine.limits()["global-default"], 49);
    assert_eq!(engine.limits()["workload-low"], 245);
}

#[test]
fn dealing_gives_distinct_cards_as_kubes_dealer() {
    for hash in [0u64, 1, 42, u64::MAX, 0xdead_beef_cafe] {
        let mut hand = Vec::new();
        queueset::deal(hash, 128, 6, |card| hand.push(card));
        let mut sorted = hand.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "{hand:?}");
        assert!(hand.iter().all(|&c| c < 128));
    }
    // kube's own example (shufflesharding_test.go): hash 0 deals 0, 1, 2, ….
    let mut hand = Vec::new();
    queueset::deal(0, 8, 3, |card| hand.push(card));
    assert_eq!(hand, [0, 1, 2]);
}

fn level(kind: Kind, limit: u32) -> Arc<Level> {
    Level::new("l", "uid", kind, limit)
}

const QUEUED: Kind = Kind::Queue {
    queues: 16,
    hand_size: 1,
    queue_length_limit: 2,
};

#[tokio::test]
async fn a_flooding_flow_is_refused_while_another_flow_is_served_first() {
    let level = level(QUEUED, 1);
    let labels = Labels::new("fs", "l");
    let wait = Duration::from_secs(30);
    let (flood, other) = (hash_flow("fs", "flood"), hash_flow("fs", "other"));
    let mut other_queue = Vec::new();
    queueset::deal(other, 16, 1, |c| other_queue.push(c));
    let mut flood_queue = Vec::new();
    queueset::deal(flood, 16, 1, |c| flood_queue.push(c));
    assert_ne!(
        flood_queue, other_queue,
        "the flows have queues of their own"
    );

    let running = level.admit(flood, 1, wait, labels.clone()).await.unwrap();
    // Two of the flood wait in its queue; the third finds it full.
    let first = tokio::spawn({
        let (level, labels) = (level.clone(), labels.clone());
        async move { level.admit(flood, 1, wait, labels).await }
    });
    let second = tokio::spawn({
        let (level, labels) = (level.clone(), labels.clone());
        async move { level.admit(flood, 1, wait, labels).await }
    });
    while level.load().0 < 2 {
        tokio::task::yield_now().await;
    }
    let refused = level.admit(flood, 1, wait, labels.clone()).await;
    assert_eq!(refused.unwrap_err(), Rejection::QueueFull);
    // The other flow, which has had nothing yet, is served before the flood's waiting two.
    let patient = tokio::spawn({
        let (level, labels) = (level.clone(), labels.clone());
        async move { level.admit(other, 1, wait, labels).await }
    });
    while level.load().0 < 3 {
        tokio::task::yield_now().await;
    }
    drop(running);
    let seat = patient.await.unwrap().unwrap();
    assert!(!first.is_finished() && !second.is_finished());
    drop(seat);
    drop(first.await.unwrap().unwrap());
    drop(second.await.unwrap().unwrap());
    assert_eq!(level.load(), (0, 0));
}

#[tokio::test]
async fn a_wait_past_the_limit_is_a_time_out_and_reject_levels_never_queue() {
    let level = level(QUEUED, 1);
    let labels = Labels::new("fs", "l");
    let held = level
        .admit(1, 1, Duration::ZERO, labels.clone())
        .await
        .unwrap();
    let late = level
        .admit(1, 1, Duration::from_millis(20), labels.clone())
        .await;
    assert_eq!(late.unwrap_err(), Rejection::TimeOut);
    assert_eq!(level.load().0, 0);
    drop(held);

    let rejecting = self::level(Kind::Reject, 2);
    let wide = rejecting
        .admit(1, 5, Duration::ZERO, labels.clone())
        .await
        .unwrap();
    assert_eq!(wide.width(), 2, "no wider than the level");
    let refused = rejecting
        .admit(2, 1, Duration::from_secs(5), labels.clone())
        .await;
    assert_eq!(refused.unwrap_err(), Rejection::ConcurrencyLimit);
    drop(wide);
    assert!(rejecting.admit(2, 1, Duration::ZERO, labels).await.is_ok());
}
