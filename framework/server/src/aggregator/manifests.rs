//! The objects that run a server in a cluster behind kube-apiserver's aggregator, as one
//! multi-document YAML: what `{server} manifests` prints.
//!
//! The serving certificate is not among them: it is a Secret the user (or cert-manager)
//! creates, `{name}-serving-cert` in the namespace, with `tls.crt`, `tls.key` and `ca.crt`
//! for the DNS name `{name}.{namespace}.svc`. The APIServices carry no `caBundle`: the
//! Deployment runs the server with `--register-apiservice`, which fills it in from `ca.crt`
//! at start (and keeps it current), so the YAML holds no key material and `kubectl apply`
//! can be re-run without undoing the registration.

use std::collections::BTreeMap;

use clap::Args;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, Namespace,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecretVolumeSource,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde::Serialize;
use serde_json::Value;

use crate::aggregator::APIServiceVersion;

/// Where the serving Secret is mounted in the container.
pub const SERVING_CERT_DIR: &str = "/var/run/apiserver/serving-cert";
/// The container port the server listens on.
pub const CONTAINER_PORT: u16 = 8443;

/// What the manifests are for: `{server} manifests --namespace NS --image IMAGE [--name N]`.
#[derive(Clone, Debug, Args)]
pub struct ManifestOptions {
    /// The namespace the server runs in (created by the manifests).
    #[arg(long = "namespace")]
    pub namespace: String,

    /// The container image of the server.
    #[arg(long = "image")]
    pub image: String,

    /// The name of the Deployment, Service, ServiceAccount and RBAC objects (default: the
    /// program's name).
    #[arg(long = "name")]
    pub name: Option<String>,

    /// Extra arguments for the server container (repeat the flag), e.g.
    /// `--arg=--storage-backend=etcd3 --arg=--etcd-servers=https://etcd:2379`.
    #[arg(long = "arg", allow_hyphen_values = true)]
    pub args: Vec<String>,
}

impl ManifestOptions {
    /// Options for `name` in `namespace`, running `image`.
    pub fn new(namespace: &str, image: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            image: image.into(),
            name: Some(name.into()),
            args: Vec::new(),
        }
    }

    /// The name of the objects: `--name`, else the program's file name.
    pub fn name(&self) -> String {
        self.name.clone().unwrap_or_else(program_name)
    }
}

/// The file name of the running program, as a Kubernetes object name.
fn program_name() -> String {
    let name = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .unwrap_or_default()
        .to_lowercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "-");
    let name = name.trim_matches('-').to_string();
    if name.is_empty() {
        "apiserver".into()
    } else {
        name
    }
}

/// The manifests as a list of objects (Namespace, ServiceAccount, RBAC, Deployment, Service,
/// one APIService per group version), in the order `kubectl apply` should create them.
/// `versions` are the served group versions, e.g. from
/// [`APIGroup::apiservice_versions`](crate::server::APIGroup::apiservice_versions).
pub fn manifest_objects(options: &ManifestOptions, versions: &[APIServiceVersion]) -> Vec<Value> {
    let m = Names::new(options);
    let mut objects = vec![
        to_value(Namespace {
            metadata: m.meta(&m.namespace, None),
            ..Default::default()
        }),
        to_value(ServiceAccount {
            metadata: m.meta(&m.name, Some(&m.namespace)),
            ..Default::default()
        }),
        // TokenReview and SubjectAccessReview: delegated authentication and authorization.
        to_value(ClusterRoleBinding {
            metadata: m.meta(&format!("{}:system:auth-delegator", m.name), None),
            role_ref: role_ref("ClusterRole", "system:auth-delegator"),
            subjects: Some(m.service_account()),
        }),
        // kube-system/extension-apiserver-authentication: the client and front-proxy CAs.
        to_value(RoleBinding {
            metadata: m.meta(&format!("{}-auth-reader", m.name), Some("kube-system")),
            role_ref: role_ref("Role", "extension-apiserver-authentication-reader"),
            subjects: Some(m.service_account()),
        }),
        // What the server reads and writes itself: namespaces for the NamespaceLifecycle
        // admission and webhooks' namespaceSelectors, the webhook configurations the
        // admission webhook plugins follow, the Validating- and MutatingAdmissionPolicies and
        // bindings the policy plugins follow, its APIServices for --register-apiservice, the
        // FlowSchemas and PriorityLevelConfigurations priority and fairness follows.
        to_value(ClusterRole {
            metadata: m.meta(&m.name, None),
            rules: Some(vec![
                rule("", "namespaces", &["get", "list", "watch"]),
                rule(
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations",
                    &["get", "list", "watch"],
                ),
                rule(
                    "admissionregistration.k8s.io",
                    "validatingwebhookconfigurations",
                    &["get", "list", "watch"],
                ),
                rule(
                    "admissionregistration.k8s.io",
                    "validatingadmissionpolicies",
                    &["get", "list", "watch"],
                ),
                rule(
                    "admissionregistration.k8s.io",
                    "validatingadmissionpolicybindings",
                    &["get", "list", "watch"],
                ),
                rule(
                    "admissionregistration.k8s.io",
                    "mutatingadmissionpolicies",
                    &["get", "list", "watch"],
                ),
                rule(
                    "admissionregistration.k8s.io",
                    "mutatingadmissionpolicybindings",
                    &["get", "list", "watch"],
                ),
                rule(
                    "apiregistration.k8s.io",
                    "apiservices",
                    &["get", "create", "update"],
                ),
                // API Priority and Fairness: its configuration (sample-apiserver's
                // rbac.yaml grants list and watch of these too).
                rule(
                    "flowcontrol.apiserver.k8s.io",
                    "flowschemas",
                    &["get", "list", "watch"],
                ),
                rule(
                    "flowcontrol.apiserver.k8s.io",
                    "prioritylevelconfigurations",
                    &["get", "list", "watch"],
                ),
            ]),
            ..Default::default()
        }),
        to_value(ClusterRoleBinding {
            metadata: m.meta(&m.name, None),
            role_ref: role_ref("ClusterRole", &m.name),
            subjects: Some(m.service_account()),
        }),
        to_value(deployment(&m, options)),
        to_value(service(&m)),
    ];
    objects.extend(versions.iter().map(|v| to_value(apiservice(&m, v))));
    objects
}

/// The names every object shares: the server's name, its namespace and its labels.
struct Names {
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
}

impl Names {
    fn new(options: &ManifestOptions) -> Self {
        let name = options.name();
        let labels = BTreeMap::from([("app.kubernetes.io/name".to_owned(), name.clone())]);
        Self {
            name,
            namespace: options.namespace.clone(),
            labels,
        }
    }

    fn meta(&self, name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: namespace.map(str::to_owned),
            labels: Some(self.labels.clone()),
            ..Default::default()
        }
    }

    fn service_account(&self) -> Vec<Subject> {
        vec![Subject {
            kind: "ServiceAccount".into(),
            name: self.name.clone(),
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        }]
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    }
}

fn rule(api_group: &str, resource: &str, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![api_group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    }
}

/// The server's flags in the container: serving files from the Secret, SQLite on the data
/// volume, and registration of its APIServices with the serving CA.
fn server_args(m: &Names, options: &ManifestOptions) -> Vec<String> {
    let (name, ns) = (&m.name, &m.namespace);
    let mut args = vec![
        format!("--secure-port={CONTAINER_PORT}"),
        "--bind-address=0.0.0.0".to_string(),
        format!("--tls-cert-file={SERVING_CERT_DIR}/tls.crt"),
        format!("--tls-private-key-file={SERVING_CERT_DIR}/tls.key"),
        "--cert-dir=/var/run/apiserver/certs".to_string(),
        "--sqlite-path=/var/lib/apiserver/apiserver.db".to_string(),
        "--register-apiservice".to_string(),
        format!("--apiservice-service-namespace={ns}"),
        format!("--apiservice-service-name={name}"),
        "--apiservice-service-port=443".to_string(),
        format!("--apiservice-ca-file={SERVING_CERT_DIR}/ca.crt"),
    ];
    args.extend(options.args.iter().cloned());
    args
}

fn probe(path: &str, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("https".into()),
            scheme: Some("HTTPS".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

fn deployment(m: &Names, options: &ManifestOptions) -> Deployment {
    let container = Container {
        name: "apiserver".into(),
        image: Some(options.image.clone()),
        args: Some(server_args(m, options)),
        ports: Some(vec![ContainerPort {
            name: Some("https".into()),
            container_port: i32::from(CONTAINER_PORT),
            ..Default::default()
        }]),
        readiness_probe: Some(probe("/readyz", 5)),
        liveness_probe: Some(probe("/livez", 10)),
        // The server writes only to the volumes below.
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            mount("serving-cert", SERVING_CERT_DIR, true),
            mount("certs", "/var/run/apiserver/certs", false),
            mount("data", "/var/lib/apiserver", false),
            mount("tmp", "/tmp", false),
        ]),
        ..Default::default()
    };
    let volumes = vec![
        // Yours (or cert-manager's) to create: tls.crt, tls.key, ca.crt for
        // {name}.{namespace}.svc.
        Volume {
            name: "serving-cert".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(format!("{}-serving-cert", m.name)),
                ..Default::default()
            }),
            ..Default::default()
        },
        empty_dir("certs"),
        // Replace with a PersistentVolumeClaim to keep objects across pods, or run on etcd
        // (--arg=--storage-backend=etcd3 ...).
        empty_dir("data"),
        empty_dir("tmp"),
    ];
    Deployment {
        metadata: m.meta(&m.name, Some(&m.namespace)),
        spec: Some(DeploymentSpec {
            // SQLite has one writer: never two pods on the same data.
            replicas: Some(1),
            strategy: Some(DeploymentStrategy {
                type_: Some("Recreate".into()),
                ..Default::default()
            }),
            selector: LabelSelector {
                match_labels: Some(m.labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(m.labels.clone()),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(m.name.clone()),
                    containers: vec![container],
                    security_context: Some(PodSecurityContext {
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    volumes: Some(volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn service(m: &Names) -> Service {
    Service {
        metadata: m.meta(&m.name, Some(&m.namespace)),
        spec: Some(ServiceSpec {
            selector: Some(m.labels.clone()),
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: 443,
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::String("https".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn apiservice(m: &Names, v: &APIServiceVersion) -> APIService {
    APIService {
        metadata: m.meta(&v.apiservice_name(), None),
        spec: Some(v.spec(&m.namespace, &m.name, 443)),
        ..Default::default()
    }
}

/// A typed object as JSON (k8s-openapi's types write their own `apiVersion` and `kind`).
fn to_value(object: impl Serialize) -> Value {
    serde_json::to_value(object).expect("k8s-openapi objects serialize to JSON")
}

/// The manifests as multi-document YAML, with a header saying what to create first.
///
/// ```
/// use extension_apiserver::aggregator::{manifests, ManifestOptions};
/// use extension_apiserver::APIGroup;
/// let versions = APIGroup::new("example.com").version("v1", |v| v).apiservice_versions();
/// let yaml = manifests(&ManifestOptions::new("things", "example/things:1", "things"), &versions);
/// assert!(yaml.contains("kind: APIService"));
/// assert!(yaml.contains("name: v1.example.com"));
/// ```
pub fn manifests(options: &ManifestOptions, versions: &[APIServiceVersion]) -> String {
    let name = options.name();
    let ns = &options.namespace;
    let mut out = format!(
        "# {name}: an extension API server behind kube-apiserver's aggregator.\n\
         #\n\
         # Not included: the serving certificate. Create the Secret {name}-serving-cert in\n\
         # namespace {ns} first (or let cert-manager do it), with tls.crt, tls.key and ca.crt\n\
         # for the DNS name {name}.{ns}.svc, e.g.\n\
         #   kubectl create namespace {ns}\n\
         #   kubectl -n {ns} create secret generic {name}-serving-cert \\\n\
         #     --from-file=tls.crt --from-file=tls.key --from-file=ca.crt\n\
         # The server fills each APIService's caBundle from ca.crt (--register-apiservice).\n"
    );
    for object in manifest_objects(options, versions) {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&object).unwrap_or_default());
    }
    out
}
