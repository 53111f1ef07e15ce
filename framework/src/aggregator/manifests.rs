//! The objects that run a server in a cluster behind kube-apiserver's aggregator, as one
//! multi-document YAML: what `{server} manifests` prints.
//!
//! The serving certificate is not among them: it is a Secret the user (or cert-manager)
//! creates, `{name}-serving-cert` in the namespace, with `tls.crt`, `tls.key` and `ca.crt`
//! for the DNS name `{name}.{namespace}.svc`. The APIServices carry no `caBundle`: the
//! Deployment runs the server with `--register-apiservice`, which fills it in from `ca.crt`
//! at start (and keeps it current), so the YAML holds no key material and `kubectl apply`
//! can be re-run without undoing the registration.

use clap::Args;
use serde_json::{json, Value};

use crate::aggregator::ApiServiceVersion;
use crate::server::ApiGroup;

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
pub fn manifest_objects(options: &ManifestOptions, groups: &[ApiGroup]) -> Vec<Value> {
    let versions: Vec<ApiServiceVersion> = groups
        .iter()
        .flat_map(ApiGroup::apiservice_versions)
        .collect();
    manifest_objects_for(options, &versions)
}

/// [`manifest_objects`] for explicit group versions.
pub fn manifest_objects_for(
    options: &ManifestOptions,
    versions: &[ApiServiceVersion],
) -> Vec<Value> {
    let name = options.name();
    let ns = options.namespace.as_str();
    let labels = json!({"app.kubernetes.io/name": name});
    let meta = |object_name: &str, namespace: Option<&str>| {
        let mut m = json!({"name": object_name, "labels": labels});
        if let Some(namespace) = namespace {
            m["namespace"] = json!(namespace);
        }
        m
    };
    let service_account = json!([{"kind": "ServiceAccount", "name": name, "namespace": ns}]);
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(ns, None)}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(&name, Some(ns))}),
        // TokenReview and SubjectAccessReview: delegated authentication and authorization.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(&format!("{name}:system:auth-delegator"), None),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:auth-delegator"},
            "subjects": service_account,
        }),
        // kube-system/extension-apiserver-authentication: the client and front-proxy CAs.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(&format!("{name}-auth-reader"), Some("kube-system")),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "extension-apiserver-authentication-reader"},
            "subjects": service_account,
        }),
        // What the server reads and writes itself: namespaces for the NamespaceLifecycle
        // admission, its APIServices for --register-apiservice.
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta(&name, None),
            "rules": [
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apiregistration.k8s.io"], "resources": ["apiservices"],
                 "verbs": ["get", "create", "update"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(&name, None),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": service_account,
        }),
    ];
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
    let probe = |path: &str, period: u32| {
        json!({
            "httpGet": {"path": path, "port": "https", "scheme": "HTTPS"},
            "periodSeconds": period,
            "failureThreshold": 3,
        })
    };
    objects.push(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(&name, Some(ns)),
        "spec": {
            // SQLite has one writer: never two pods on the same data.
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    "containers": [{
                        "name": "apiserver",
                        "image": options.image,
                        "args": args,
                        "ports": [{"name": "https", "containerPort": CONTAINER_PORT}],
                        "readinessProbe": probe("/readyz", 5),
                        "livenessProbe": probe("/livez", 10),
                        // The server writes only to the volumes below.
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [
                            {"name": "serving-cert", "mountPath": SERVING_CERT_DIR, "readOnly": true},
                            {"name": "certs", "mountPath": "/var/run/apiserver/certs"},
                            {"name": "data", "mountPath": "/var/lib/apiserver"},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }],
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [
                        // Yours (or cert-manager's) to create: tls.crt, tls.key, ca.crt for
                        // {name}.{namespace}.svc.
                        {"name": "serving-cert", "secret": {"secretName": format!("{name}-serving-cert")}},
                        {"name": "certs", "emptyDir": {}},
                        // Replace with a PersistentVolumeClaim to keep objects across pods,
                        // or run on etcd (--arg=--storage-backend=etcd3 ...).
                        {"name": "data", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }));
    objects.push(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(&name, Some(ns)),
        "spec": {
            "selector": labels,
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": "https"}],
        },
    }));
    for v in versions {
        objects.push(json!({
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": meta(&v.apiservice_name(), None),
            "spec": {
                "group": v.group,
                "version": v.version,
                "groupPriorityMinimum": v.group_priority_minimum,
                "versionPriority": v.version_priority,
                "service": {"namespace": ns, "name": name, "port": 443},
            },
        }));
    }
    objects
}

/// The manifests as multi-document YAML, with a header saying what to create first.
///
/// ```
/// use apiserver::aggregator::{manifests, ManifestOptions};
/// use apiserver::ApiGroup;
/// let groups = [ApiGroup::new("example.com").version("v1", |v| v)];
/// let yaml = manifests(&ManifestOptions::new("things", "example/things:1", "things"), &groups);
/// assert!(yaml.contains("kind: APIService"));
/// assert!(yaml.contains("name: v1.example.com"));
/// ```
pub fn manifests(options: &ManifestOptions, groups: &[ApiGroup]) -> String {
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
    for object in manifest_objects(options, groups) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&object).unwrap_or_default());
    }
    out
}
