use std::collections::VecDeque;
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
    let catch_all = engine.limits()["catch-all"];
    assert_eq!((catch_all.nominal, catch_all.current), (600, 600));
    // Seats split by shares, rounded up: 600 × 20 / 245 for global-default.
    let engine = kube_defaults(600);
    assert!(engine.synced());
    assert_eq!(engine.limits()["global-default"].nominal, 49);
    assert_eq!(engine.limits()["workload-low"].nominal, 245);
    // lendablePercent 50 and 90: the lower limits; no borrowingLimitPercent: at most the
    // server's seats more.
    assert_eq!(engine.limits()["global-default"].lower, 24);
    assert_eq!(engine.limits()["workload-low"].lower, 24);
    assert_eq!(engine.limits()["workload-low"].upper, 245 + 600);
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
    let limits = SeatLimits {
        nominal: limit,
        lower: limit,
        upper: limit,
        current: limit,
    };
    Level::new("l", "uid", kind, limits)
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
    assert_eq!(
        wide.width(),
        5,
        "wider than the level: it runs alone, as kube's"
    );
    let refused = rejecting
        .admit(2, 1, Duration::from_secs(5), labels.clone())
        .await;
    assert_eq!(refused.unwrap_err(), Rejection::ConcurrencyLimit);
    drop(wide);
    assert!(rejecting.admit(2, 1, Duration::ZERO, labels).await.is_ok());
}

#[tokio::test]
async fn a_busy_level_borrows_the_seats_idle_levels_lend() {
    let engine = kube_defaults(600);
    let alice = user("alice", &[]);
    let class = engine.classify(&read(&alice, "ns"));
    assert_eq!(class.priority_level(), "global-default");
    let level = engine.current().levels["global-default"].clone();
    let limits = engine.limits()["global-default"];
    assert_eq!((limits.nominal, limits.lower), (49, 24));
    let wait = Duration::from_secs(30);
    // Everything the level has now, and 100 more waiting.
    let mut held = Vec::new();
    for _ in 0..limits.current {
        held.push(engine.admit(&class, 1, wait).await.unwrap());
    }
    let waiting: Vec<_> = (0..100)
        .map(|_| {
            let (engine, class) = (engine.clone(), class.clone());
            tokio::spawn(async move { engine.admit(&class, 1, wait).await })
        })
        .collect();
    for _ in 0..1000 {
        if level.load().0 == 100 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(level.load(), (100, limits.current));
    // One period with the demand steady (kube's period is 10 s; the test's is a moment).
    engine.adjust_borrowing();
    tokio::time::sleep(Duration::from_millis(20)).await;
    engine.adjust_borrowing();
    let demand = limits.current + 100;
    let grown = engine.limits()["global-default"];
    assert!(
        grown.current >= demand && grown.current > 2 * limits.nominal,
        "borrowed from the idle levels: {grown:?}"
    );
    assert_eq!(
        level.load(),
        (0, demand),
        "the waiting requests were dispatched"
    );
    let workload_low = engine.limits()["workload-low"];
    assert!(
        workload_low.current < workload_low.nominal,
        "{workload_low:?}"
    );
    assert!(
        workload_low.current >= workload_low.lower,
        "{workload_low:?}"
    );
    for task in waiting {
        held.push(task.await.unwrap().unwrap());
    }
    drop(held);
    assert_eq!(level.load(), (0, 0));
}

#[test]
fn a_flow_of_long_requests_gets_fewer_dispatches_than_a_flow_of_short_ones() {
    let kind = Kind::Queue {
        queues: 16,
        hand_size: 1,
        queue_length_limit: 10,
    };
    let level = level(kind, 1);
    let labels = Labels::new("fs", "l");
    let (long, short) = (hash_flow("fs", "long"), hash_flow("fs", "short"));
    let queue = |flow| {
        let mut hand = Vec::new();
        queueset::deal(flow, 16, 1, |c| hand.push(c));
        hand
    };
    assert_ne!(
        queue(long),
        queue(short),
        "the flows have queues of their own"
    );
    // A clock of the test's own: long requests run 30 ms, short ones 3 ms.
    let mut now = std::time::Instant::now();
    let mut flows = [
        (long, 30, VecDeque::new(), 0),
        (short, 3, VecDeque::new(), 0),
    ];
    let enter = |flow, now| match level.enter(flow, 1, &labels, now) {
        queueset::Entry::Queued { receiver, .. } => receiver,
        _ => panic!("queued"),
    };
    for (flow, _, waiting, _) in &mut flows {
        for _ in 0..3 {
            waiting.push_back(enter(*flow, now));
        }
    }
    for _ in 0..66 {
        // The one request executing: the head of one flow's queue.
        let (seat, i) = flows
            .iter_mut()
            .enumerate()
            .find_map(|(i, (_, _, waiting, _))| {
                let seat = waiting.front_mut()?.try_recv().ok()?;
                waiting.pop_front();
                Some((seat, i))
            })
            .expect("one request is executing");
        let (flow, millis, waiting, dispatched) = &mut flows[i];
        *dispatched += 1;
        now += Duration::from_millis(*millis);
        seat.finish_at(now);
        waiting.push_back(enter(*flow, now));
    }
    let (long, short) = (flows[0].3, flows[1].3);
    // Kube's fair queuing gives each queue the same seat-seconds: ten short ones a long one.
    assert!(short >= 5 * long, "{short} short and {long} long");
    assert!(long >= 3, "the long flow is served too: {long}");
}
