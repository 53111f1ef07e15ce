//! API Priority and Fairness over TLS with real clients, the configuration followed from a
//! fake core kube-apiserver that has kube's mandatory and suggested objects and one small
//! level for the test: one user flooding it with slow lists gets 429s with `Retry-After` and
//! the `X-Kubernetes-PF-*` headers while another user of the same level is still served; an
//! exempt user is never refused; and with `--enable-priority-and-fairness=false` the
//! max-in-flight limits apply as before.

use std::time::Duration;

use extension_apiserver::aggregator::AggregatorOptions;
use extension_apiserver_testing::TestServer;
use extension_apiserver_testing::fake_core::FakeCore;
use extension_apiserver_testing::pki::TestCa;
use http::StatusCode;
use serde_json::{Value, json};

use crate::overload::{Answer, SLEEPERS, TICKETS, assert_plain_refusal, client_as, group, send};

/// The flooder and the patient user share this level: 2 seats of the server's 30
/// (`ceil(30 × 10 / (245 + 10))`: kube's levels have 245 shares), 64 queues, hands of 2,
/// at most 2 waiting a queue.
fn small_level() -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": "flood-test"},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 10,
            "limitResponse": {"type": "Queue", "queuing": {
                "queues": 64, "handSize": 2, "queueLengthLimit": 2}}}},
    })
}

fn small_schema() -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": "flood-test"},
        "spec": {
            "priorityLevelConfiguration": {"name": "flood-test"},
            "matchingPrecedence": 500,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [
                    {"kind": "User", "user": {"name": "flooder"}},
                    {"kind": "User", "user": {"name": "patient"}},
                ],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["overload.example.com"],
                                   "resources": ["*"], "namespaces": ["*"],
                                   "clusterScope": true}],
            }],
        },
    })
}

struct Env {
    server: TestServer,
    core: FakeCore,
    users: TestCa,
    _dir: tempfile::TempDir,
}

/// The fake core (with the test's level), and the server following it, with 30 seats in all.
async fn start(priority_and_fairness: bool) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let core = FakeCore::start(&dir.path().join("core")).await;
    core.set_priority_level_configuration(small_level());
    core.set_flow_schema(small_schema());
    let users = TestCa::new("users");
    let ca_file = dir.path().join("users.crt");
    std::fs::write(&ca_file, &users.cert_pem).unwrap();
    let aggregator = AggregatorOptions {
        kubeconfig: Some(core.kubeconfig("system:serviceaccount:overload:apiserver")),
        ..AggregatorOptions::default()
    };
    let mut options = TestServer::options(&dir.path().join("server"));
    options.max_requests_inflight = 20;
    options.max_mutating_requests_inflight = 10;
    options.enable_priority_and_fairness = priority_and_fairness;
    options.auth.client_ca_file = Some(ca_file);
    let server = TestServer::start_configured(options, move |server| {
        server.aggregator_options(aggregator).group(group())
    })
    .await;
    Env {
        server,
        core,
        users,
        _dir: dir,
    }
}

fn uid(object: Option<Value>) -> String {
    object.unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

fn header<'a>(answer: &'a Answer, name: &str) -> Option<&'a str> {
    answer.headers.get(name).and_then(|v| v.to_str().ok())
}

const FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";
const PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_user_is_refused_while_another_is_served() {
    let env = start(true).await;
    let flooder = client_as(&env.server, &env.users.client("flooder", &[])).await;
    let patient = client_as(&env.server, &env.users.client("patient", &[])).await;
    let root = client_as(&env.server, &env.users.client("root", &["system:masters"])).await;
    let schema_uid = uid(env.core.flow_schema("flood-test"));
    let level_uid = uid(env.core.priority_level_configuration("flood-test"));

    // The cluster's configuration is followed: the patient's requests name the test's level.
    let mut synced = false;
    for _ in 0..100 {
        let answer = send(&patient, "GET", SLEEPERS, None).await;
        assert_eq!(answer.code, StatusCode::OK, "{answer:?}");
        if header(&answer, FLOW_SCHEMA_UID) == Some(schema_uid.as_str()) {
            assert_eq!(
                header(&answer, PRIORITY_LEVEL_UID),
                Some(level_uid.as_str())
            );
            synced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(synced, "the FlowSchemas of the core cluster were followed");

    let flood = tokio::spawn({
        let flooder = flooder.clone();
        async move {
            let mut answers = Vec::new();
            for _ in 0..3 {
                let requests = (0..20).map(|_| send(&flooder, "GET", SLEEPERS, None));
                answers.extend(futures::future::join_all(requests).await);
            }
            answers
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let answer = send(&patient, "GET", SLEEPERS, None).await;
        assert_eq!(
            answer.code,
            StatusCode::OK,
            "another flow is served: {answer:?}"
        );
    }
    // An exempt user (system:masters) is never queued nor refused, however many at once.
    let exempt_uid = uid(env.core.flow_schema("exempt"));
    let requests = (0..20).map(|_| send(&root, "GET", SLEEPERS, None));
    for answer in futures::future::join_all(requests).await {
        assert_eq!(answer.code, StatusCode::OK, "exempt: {answer:?}");
        assert_eq!(header(&answer, FLOW_SCHEMA_UID), Some(exempt_uid.as_str()));
    }

    let answers = flood.await.unwrap();
    let served = answers.iter().filter(|a| a.code == StatusCode::OK).count();
    let refused: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.code == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(served + refused.len(), answers.len(), "{answers:?}");
    assert!(served >= 2, "the flooder is served within its share");
    assert!(
        refused.len() >= 20,
        "the excess is refused: {served} served"
    );
    for answer in refused {
        // kube's Retry-After: 1 to begin with, growing while the level keeps refusing.
        let retry_after: u64 = answer.retry_after.as_deref().unwrap().parse().unwrap();
        assert!((1..=32).contains(&retry_after), "{answer:?}");
        assert_plain_refusal(answer);
        assert_eq!(header(answer, FLOW_SCHEMA_UID), Some(schema_uid.as_str()));
        assert_eq!(header(answer, PRIORITY_LEVEL_UID), Some(level_uid.as_str()));
    }

    // kube's metrics, with its labels.
    let text = metrics(&root).await;
    for line in [
        r#"apiserver_flowcontrol_nominal_limit_seats{priority_level="flood-test"} 2"#,
        // No lendablePercent nor borrowingLimitPercent: it lends nothing and may borrow up to
        // the server's 30 seats; borrowing sets its current limit.
        r#"apiserver_flowcontrol_lower_limit_seats{priority_level="flood-test"} 2"#,
        r#"apiserver_flowcontrol_upper_limit_seats{priority_level="flood-test"} 32"#,
        r#"apiserver_flowcontrol_current_limit_seats{priority_level="flood-test"} "#,
        r#"apiserver_flowcontrol_target_seats{priority_level="flood-test"} "#,
        r#"apiserver_flowcontrol_demand_seats_smoothed{priority_level="flood-test"} "#,
        "apiserver_flowcontrol_seat_fair_frac ",
        r#"apiserver_flowcontrol_rejected_requests_total{flow_schema="flood-test",priority_level="flood-test",reason="queue-full"}"#,
        r#"apiserver_flowcontrol_dispatched_requests_total{flow_schema="flood-test",priority_level="flood-test"}"#,
        r#"apiserver_flowcontrol_current_executing_seats{flow_schema="flood-test",priority_level="flood-test"} 0"#,
        r#"apiserver_flowcontrol_current_inqueue_requests{flow_schema="flood-test",priority_level="flood-test"} 0"#,
        r#"apiserver_flowcontrol_request_wait_duration_seconds_count{execute="false",flow_schema="flood-test",priority_level="flood-test"}"#,
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    env.server.stop().await;
}

/// The server's `/metrics`, read by `client`.
async fn metrics(client: &kube::Client) -> String {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let response = client.send(request.map(Into::into)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = http_body_util::BodyExt::collect(response.into_body()).await;
    String::from_utf8(body.unwrap().to_bytes().to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_frees_its_seats_once_its_initial_events_are_queued() {
    let env = start(true).await;
    let patient = client_as(&env.server, &env.users.client("patient", &[])).await;
    let root = client_as(&env.server, &env.users.client("root", &["system:masters"])).await;
    let schema_uid = uid(env.core.flow_schema("flood-test"));
    for _ in 0..100 {
        let answer = send(&patient, "GET", TICKETS, None).await;
        if header(&answer, FLOW_SCHEMA_UID) == Some(schema_uid.as_str()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in ["a", "b", "c"] {
        let ticket = json!({"apiVersion": "overload.example.com/v1", "kind": "Ticket",
                            "metadata": {"name": name}});
        let answer = send(&patient, "POST", TICKETS, Some(ticket)).await;
        assert_eq!(answer.code, StatusCode::CREATED, "{answer:?}");
    }
    // A watch with its initial events, held open and not read.
    let path = format!("{TICKETS}?watch=true&timeoutSeconds=30");
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let watch = patient.send(request.map(Into::into)).await.unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    assert_eq!(
        watch
            .headers()
            .get(FLOW_SCHEMA_UID)
            .and_then(|v| v.to_str().ok()),
        Some(schema_uid.as_str())
    );
    // Its storage queued the initial events: the seat is free while the watch goes on.
    let watching = r#"apiserver_registered_watchers{group="overload.example.com",kind="Ticket",version="v1"} 1"#;
    let idle = r#"apiserver_flowcontrol_current_executing_requests{flow_schema="flood-test",priority_level="flood-test"} 0"#;
    let mut freed = false;
    for _ in 0..100 {
        let text = metrics(&root).await;
        if text.contains(watching) && text.contains(idle) {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(freed, "the watch's seat was given back while it runs");
    drop(watch);
    env.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_flag_off_the_max_in_flight_limits_apply() {
    let env = start(false).await;
    let flooder = client_as(&env.server, &env.users.client("flooder", &[])).await;
    let requests = (0..30).map(|_| send(&flooder, "GET", SLEEPERS, None));
    let answers = futures::future::join_all(requests).await;
    let refused: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.code == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    // One user holds at most half of the 20 read-only seats.
    assert!(refused.len() >= 10, "{answers:?}");
    for answer in answers {
        assert_eq!(header(&answer, FLOW_SCHEMA_UID), None, "{answer:?}");
    }
    env.server.stop().await;
}
