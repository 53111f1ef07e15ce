//! kube-apiserver's bootstrap configuration (`apis/flowcontrol/bootstrap/default.go`): the
//! mandatory objects (`exempt`, `catch-all`), which the server uses until the cluster's
//! configuration arrives and adds when the cluster lacks them, and the suggested ones a real
//! kube-apiserver creates beside them (what the testing kit's fake core serves).

use std::collections::BTreeMap;

use k8s_openapi::api::flowcontrol::v1 as fc;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// `exempt` and `catch-all`, the levels every configuration has.
pub fn mandatory_priority_levels() -> Vec<fc::PriorityLevelConfiguration> {
    vec![
        limited("catch-all", 5, 0, None),
        level(
            "exempt",
            fc::PriorityLevelConfigurationSpec {
                type_: "Exempt".into(),
                exempt: Some(fc::ExemptPriorityLevelConfiguration {
                    nominal_concurrency_shares: Some(0),
                    lendable_percent: Some(0),
                }),
                limited: None,
            },
        ),
    ]
}

/// `exempt` (`system:masters`) and `catch-all` (everyone, by user).
pub fn mandatory_flow_schemas() -> Vec<fc::FlowSchema> {
    vec![
        schema(
            "exempt",
            "exempt",
            1,
            None,
            groups(&["system:masters"]),
            everything(),
        ),
        schema(
            "catch-all",
            "catch-all",
            10000,
            Some("ByUser"),
            groups(&["system:unauthenticated", "system:authenticated"]),
            everything(),
        ),
    ]
}

/// kube-apiserver's suggested levels: `system`, `node-high`, `leader-election`,
/// `workload-high`, `workload-low`, `global-default`.
pub fn suggested_priority_levels() -> Vec<fc::PriorityLevelConfiguration> {
    vec![
        limited("system", 30, 33, Some((64, 6, 50))),
        limited("node-high", 40, 25, Some((64, 6, 50))),
        limited("leader-election", 10, 0, Some((16, 4, 50))),
        limited("workload-high", 40, 50, Some((128, 6, 50))),
        limited("workload-low", 100, 90, Some((128, 6, 50))),
        limited("global-default", 20, 50, Some((128, 6, 50))),
    ]
}

/// kube-apiserver's suggested flow schemas, in its order.
pub fn suggested_flow_schemas() -> Vec<fc::FlowSchema> {
    let all = everything;
    let kube_system_sas = || {
        vec![fc::Subject {
            kind: "ServiceAccount".into(),
            service_account: Some(fc::ServiceAccountSubject {
                name: "*".into(),
                namespace: "kube-system".into(),
            }),
            ..fc::Subject::default()
        }]
    };
    let leases = |cluster_scope| fc::ResourcePolicyRule {
        verbs: vec!["get".into(), "create".into(), "update".into()],
        api_groups: vec!["coordination.k8s.io".into()],
        resources: vec!["leases".into()],
        namespaces: Some(vec!["*".into()]),
        cluster_scope: Some(cluster_scope),
    };
    let mut leader_subjects = users(&["system:kube-controller-manager", "system:kube-scheduler"]);
    leader_subjects.extend(kube_system_sas());
    let probes = Rules {
        resource: Vec::new(),
        non_resource: vec![fc::NonResourcePolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
        }],
    };
    let node_high = Rules {
        resource: vec![
            fc::ResourcePolicyRule {
                verbs: vec!["*".into()],
                api_groups: vec![String::new()],
                resources: vec!["nodes".into(), "nodes/status".into()],
                namespaces: Some(vec!["*".into()]),
                cluster_scope: Some(true),
            },
            fc::ResourcePolicyRule {
                verbs: vec!["*".into()],
                ..leases(false)
            },
        ],
        non_resource: Vec::new(),
    };
    let leader_election = Rules {
        resource: vec![leases(false)],
        non_resource: Vec::new(),
    };
    let nodes = || groups(&["system:nodes"]);
    let everyone = || groups(&["system:unauthenticated", "system:authenticated"]);
    vec![
        schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            nodes(),
            all(),
        ),
        schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            nodes(),
            node_high,
        ),
        schema("probes", "exempt", 2, None, everyone(), probes),
        schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            leader_subjects,
            leader_election,
        ),
        schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            users(&["system:kube-controller-manager"]),
            all(),
        ),
        schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            users(&["system:kube-scheduler"]),
            all(),
        ),
        schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            kube_system_sas(),
            all(),
        ),
        schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            groups(&["system:serviceaccounts"]),
            all(),
        ),
        schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            everyone(),
            all(),
        ),
    ]
}

/// kube's bootstrap objects carry `apf.kubernetes.io/autoupdate-spec: "true"`.
fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        annotations: Some(BTreeMap::from([(
            "apf.kubernetes.io/autoupdate-spec".to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

fn level(name: &str, spec: fc::PriorityLevelConfigurationSpec) -> fc::PriorityLevelConfiguration {
    fc::PriorityLevelConfiguration {
        metadata: meta(name),
        spec: Some(spec),
        status: None,
    }
}

/// A Limited level; `queuing` (queues, handSize, queueLengthLimit) or `Reject`.
fn limited(
    name: &str,
    shares: i32,
    lendable: i32,
    queuing: Option<(i32, i32, i32)>,
) -> fc::PriorityLevelConfiguration {
    let limit_response = match queuing {
        Some((queues, hand_size, queue_length_limit)) => fc::LimitResponse {
            type_: "Queue".into(),
            queuing: Some(fc::QueuingConfiguration {
                queues: Some(queues),
                hand_size: Some(hand_size),
                queue_length_limit: Some(queue_length_limit),
            }),
        },
        None => fc::LimitResponse {
            type_: "Reject".into(),
            queuing: None,
        },
    };
    level(
        name,
        fc::PriorityLevelConfigurationSpec {
            type_: "Limited".into(),
            limited: Some(fc::LimitedPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(shares),
                lendable_percent: Some(lendable),
                borrowing_limit_percent: None,
                limit_response: Some(limit_response),
            }),
            exempt: None,
        },
    )
}

struct Rules {
    resource: Vec<fc::ResourcePolicyRule>,
    non_resource: Vec<fc::NonResourcePolicyRule>,
}

/// Every verb on every resource (any namespace, and cluster-scoped) and every URL.
fn everything() -> Rules {
    Rules {
        resource: vec![fc::ResourcePolicyRule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            namespaces: Some(vec!["*".into()]),
            cluster_scope: Some(true),
        }],
        non_resource: vec![fc::NonResourcePolicyRule {
            verbs: vec!["*".into()],
            non_resource_urls: vec!["*".into()],
        }],
    }
}

fn schema(
    name: &str,
    level: &str,
    precedence: i32,
    distinguisher: Option<&str>,
    subjects: Vec<fc::Subject>,
    rules: Rules,
) -> fc::FlowSchema {
    fc::FlowSchema {
        metadata: meta(name),
        spec: Some(fc::FlowSchemaSpec {
            priority_level_configuration: fc::PriorityLevelConfigurationReference {
                name: level.into(),
            },
            matching_precedence: Some(precedence),
            distinguisher_method: distinguisher
                .map(|d| fc::FlowDistinguisherMethod { type_: d.into() }),
            rules: Some(vec![fc::PolicyRulesWithSubjects {
                subjects,
                resource_rules: some(rules.resource),
                non_resource_rules: some(rules.non_resource),
            }]),
        }),
        status: None,
    }
}

fn some<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn groups(names: &[&str]) -> Vec<fc::Subject> {
    names
        .iter()
        .map(|name| fc::Subject {
            kind: "Group".into(),
            group: Some(fc::GroupSubject {
                name: (*name).into(),
            }),
            ..fc::Subject::default()
        })
        .collect()
}

fn users(names: &[&str]) -> Vec<fc::Subject> {
    names
        .iter()
        .map(|name| fc::Subject {
            kind: "User".into(),
            user: Some(fc::UserSubject {
                name: (*name).into(),
            }),
            ..fc::Subject::default()
        })
        .collect()
}
