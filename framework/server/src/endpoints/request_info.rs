//! Request info: the verb, group, version, namespace, resource, name and subresource a
//! request is for, read from method, path and query as kube-apiserver's `RequestInfoFactory`
//! does. Routing, authorization and audit all read it.

use http::Method;

/// The verb of a request, as kube-apiserver's `RequestInfo` names it: a resource request's API
/// verb (`get`, `list`, `watch`, ...), or a non-resource request's lower-cased HTTP method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Verb {
    /// GET of one object, or GET of a non-resource path.
    #[default]
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch`.
    Watch,
    /// POST of a resource.
    Create,
    /// PUT of an object.
    Update,
    /// PATCH of an object, or of a non-resource path.
    Patch,
    /// DELETE of an object, or of a non-resource path.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// POST of a non-resource path.
    Post,
    /// PUT of a non-resource path.
    Put,
    /// HEAD of a non-resource path.
    Head,
    /// OPTIONS.
    Options,
    /// Any other method.
    Unknown,
    /// Not a request's verb: what the impersonation filter asks the authorizer about
    /// (`impersonate` on users, groups, service accounts, uids, user extras).
    Impersonate,
}

impl Verb {
    /// The verb as authorization and audit write it (`deletecollection`, `post`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Post => "post",
            Self::Put => "put",
            Self::Head => "head",
            Self::Options => "options",
            Self::Unknown => "unknown",
            Self::Impersonate => "impersonate",
        }
    }

    /// The verb upper-cased, as kube's request metrics write it (`DELETECOLLECTION`, ...).
    pub(crate) const fn as_upper_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::List => "LIST",
            Self::Watch => "WATCH",
            Self::Create => "CREATE",
            Self::Update => "UPDATE",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
            Self::DeleteCollection => "DELETECOLLECTION",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Head => "HEAD",
            Self::Options => "OPTIONS",
            Self::Unknown => "UNKNOWN",
            Self::Impersonate => "IMPERSONATE",
        }
    }

    /// The verb of a non-resource request: its method, lower-cased.
    fn of_method(method: &Method) -> Self {
        match *method {
            Method::GET => Self::Get,
            Method::POST => Self::Post,
            Method::PUT => Self::Put,
            Method::PATCH => Self::Patch,
            Method::DELETE => Self::Delete,
            Method::HEAD => Self::Head,
            Method::OPTIONS => Self::Options,
            _ => Self::Unknown,
        }
    }

    /// Whether the verb reads a collection (`list`, `watch`).
    pub fn reads_collection(self) -> bool {
        matches!(self, Self::List | Self::Watch)
    }
}

impl std::fmt::Display for Verb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Verb {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What a resource request is about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// Whether the path is a resource path (`/apis/{g}/{v}/...`) rather than e.g. `/healthz`.
    pub is_resource_request: bool,
    /// The request path.
    pub path: String,
    /// The API verb, or the lower-cased HTTP method for non-resource requests.
    pub verb: Verb,
    /// API group.
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Namespace, empty when none.
    pub namespace: String,
    /// Resource (plural), e.g. `flunders`.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: String,
    /// Object name, empty for collections.
    pub name: String,
}

impl RequestInfo {
    /// Reads the request info of `method path?query`.
    pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
        let mut info = RequestInfo {
            path: path.to_string(),
            verb: Verb::of_method(method),
            ..RequestInfo::default()
        };
        // A resource path has at most 8 segments (`apis/g/v/namespaces/ns/r/name/sub`): they
        // are kept on the stack; only a longer path is collected.
        let mut segments = path.trim_matches('/').split('/');
        let mut first = [""; 8];
        let mut n = 0;
        for segment in segments.by_ref().take(first.len()) {
            first[n] = segment;
            n += 1;
        }
        let longer: Vec<&str>;
        let parts: &[&str] = if segments.next().is_none() {
            &first[..n]
        } else {
            longer = path.trim_matches('/').split('/').collect();
            &longer
        };
        if parts.len() < 4 || parts[0] != "apis" {
            return info;
        }
        info.api_group = parts[1].to_string();
        info.api_version = parts[2].to_string();
        let mut rest = &parts[3..];
        if rest[0] == "namespaces" && rest.len() >= 2 {
            info.namespace = rest[1].to_string();
            rest = &rest[2..];
            if rest.is_empty() {
                // `/apis/g/v/namespaces/x` names the namespace object itself.
                return info;
            }
        }
        if rest.len() > 3 {
            return info;
        }
        info.is_resource_request = true;
        info.resource = rest[0].to_string();
        info.name = rest.get(1).map(|s| s.to_string()).unwrap_or_default();
        info.subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();
        info.verb = resource_verb(method, !info.name.is_empty(), is_watch(query));
        info
    }
}

/// Whether the first `watch` parameter is set, decoded as kube-apiserver decodes flags.
fn is_watch(query: Option<&str>) -> bool {
    let Some(query) = query.filter(|q| q.contains("watch")) else {
        return false;
    };
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "watch")
        .is_some_and(|(_, v)| flag(&v))
}

fn resource_verb(method: &Method, has_name: bool, watch: bool) -> Verb {
    match (method.as_str(), has_name) {
        ("GET" | "HEAD", _) if watch => Verb::Watch,
        ("GET" | "HEAD", true) => Verb::Get,
        ("GET" | "HEAD", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", _) => Verb::Update,
        ("PATCH", _) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => Verb::Unknown,
    }
}

/// A flag's value as kube-apiserver decodes it: false only for `0`, `f` and `false` (any
/// case); any other value, even an empty one (`?watch`), is true, never an error.
pub(crate) fn flag(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("f") || value.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: Method, path: &str, query: Option<&str>) -> RequestInfo {
        RequestInfo::parse(&method, path, query)
    }

    #[test]
    fn namespaced_paths() {
        let i = parse(
            Method::GET,
            "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders/x/status",
            None,
        );
        assert!(i.is_resource_request);
        assert_eq!(
            (
                i.verb.as_str(),
                i.namespace.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.subresource.as_str()
            ),
            ("get", "ns", "flunders", "x", "status")
        );
        let w = parse(
            Method::GET,
            "/apis/g/v/namespaces/ns/flunders",
            Some("watch=true&labelSelector=a"),
        );
        assert_eq!(w.verb, "watch");
        for (query, verb) in [
            ("watch", "watch"),
            ("watch=True", "watch"),
            ("watch=false", "list"),
            ("watch=0&watch=1", "list"),
        ] {
            let info = parse(Method::GET, "/apis/g/v/fischers", Some(query));
            assert_eq!(info.verb, verb, "{query}");
        }
        assert_eq!(
            parse(Method::DELETE, "/apis/g/v/namespaces/ns/flunders", None).verb,
            "deletecollection"
        );
        assert!(!parse(Method::GET, "/apis/g/v/namespaces/ns", None).is_resource_request);
    }

    #[test]
    fn cluster_paths() {
        let i = parse(Method::PUT, "/apis/g/v/fischers/f", None);
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.name.as_str()),
            ("update", "fischers", "f")
        );
        assert_eq!(parse(Method::GET, "/apis/g/v/flunders", None).verb, "list");
        assert!(!parse(Method::GET, "/healthz", None).is_resource_request);
        assert!(!parse(Method::GET, "/apis/g/v/a/b/c/d", None).is_resource_request);
    }

    #[test]
    fn paths_longer_than_a_resource_path_are_read_as_before() {
        // Eight segments at most are kept on the stack; a longer path reads the same.
        let eight = parse(Method::GET, "/apis/g/v/namespaces/ns/r/n/s", None);
        assert!(eight.is_resource_request);
        assert_eq!(eight.subresource, "s");
        for long in [
            "/apis/g/v/namespaces/ns/r/n/s/x",
            "/apis/g/v/namespaces/ns/r/n/s/x/y/z",
        ] {
            let i = parse(Method::GET, long, None);
            assert!(!i.is_resource_request, "{long}");
            assert_eq!(
                (
                    i.api_group.as_str(),
                    i.api_version.as_str(),
                    i.namespace.as_str()
                ),
                ("g", "v", "ns"),
                "{long}"
            );
            assert_eq!(i.path, long);
        }
    }
}
