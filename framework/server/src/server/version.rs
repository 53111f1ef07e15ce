//! `/version`: the `version.Info` kube-apiserver and sample-apiserver serve, which
//! `kubectl version` prints and compares with its own version (more than one minor version
//! apart, it warns about skew).

use serde::Serialize;

/// The Kubernetes release whose API this framework serves, reported by default.
pub const KUBERNETES_VERSION: (u32, u32, u32) = (1, 33, 0);

/// `version.Info`, as served at `/version`.
///
/// The default reports the Kubernetes release the framework follows ([`KUBERNETES_VERSION`]),
/// as sample-apiserver reports the release it was built from; set your own with
/// [`APIServer::version_info`](crate::APIServer::version_info).
///
/// ```
/// use extension_apiserver::server::VersionInfo;
/// let info = VersionInfo { git_commit: "0123abc".into(), ..VersionInfo::default() };
/// assert_eq!(info.git_version, "v1.33.0");
/// assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "33"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    /// Major version, e.g. `1`.
    pub major: String,
    /// Minor version, e.g. `33`.
    pub minor: String,
    /// Semantic version with a `v`, e.g. `v1.33.0`.
    pub git_version: String,
    /// The commit built.
    pub git_commit: String,
    /// `clean` or `dirty` (empty when unknown).
    pub git_tree_state: String,
    /// When it was built, RFC 3339 (`1970-01-01T00:00:00Z` when unknown, as Go's default).
    pub build_date: String,
    /// The toolchain (Go's field name; here the Rust compiler's version).
    pub go_version: String,
    /// The compiler, `rustc`.
    pub compiler: String,
    /// `os/arch` in Go's names, e.g. `linux/amd64`.
    pub platform: String,
}

impl Default for VersionInfo {
    fn default() -> Self {
        let (major, minor, patch) = KUBERNETES_VERSION;
        Self {
            major: major.to_string(),
            minor: minor.to_string(),
            git_version: format!("v{major}.{minor}.{patch}"),
            git_commit: String::new(),
            git_tree_state: String::new(),
            build_date: "1970-01-01T00:00:00Z".into(),
            go_version: env!("APISERVER_RUSTC_VERSION").into(),
            compiler: "rustc".into(),
            platform: platform(),
        }
    }
}

/// `os/arch` as Go names them (`GOOS/GOARCH`).
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_kubernetes_field_names() {
        let json = serde_json::to_value(VersionInfo::default()).unwrap();
        for key in [
            "major",
            "minor",
            "gitVersion",
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(json[key].is_string(), "{key} in {json}");
        }
        assert!(json["goVersion"].as_str().unwrap().starts_with("rustc "));
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        assert_eq!(json["platform"], "linux/amd64");
    }
}
