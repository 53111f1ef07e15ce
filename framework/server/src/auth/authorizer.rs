//! Authorization: after authentication, the authorization filter describes the request as
//! [`Attributes`] and asks an [`Authorizer`] for a [`Decision`] (`k8s.io/apiserver`'s
//! `authorizer.Attributes` and `authorizer.Decision`); anything but `Allow` is a 403.

use async_trait::async_trait;

use super::{AuthError, user::UserInfo};

/// What a request wants to do, borrowed from the request so no per-request copies are made.
///
/// Empty strings mean "not applicable", as in Go (e.g. `namespace` of a cluster-scoped
/// resource, `resource` of a non-resource request).
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// Who makes the request.
    pub user: &'a UserInfo,
    /// The Kubernetes verb (`get`, `list`, `watch`, `create`, …) or, for non-resource
    /// requests, the lower-cased HTTP method.
    pub verb: &'a str,
    /// Whether the request is for an API resource (as opposed to a path like `/healthz`).
    pub resource_request: bool,
    /// The API group (empty for the core group).
    pub api_group: &'a str,
    /// The API version.
    pub api_version: &'a str,
    /// The resource plural name.
    pub resource: &'a str,
    /// The subresource (`status`, `scale`, …).
    pub subresource: &'a str,
    /// The namespace of a namespaced request.
    pub namespace: &'a str,
    /// The object name, for requests on one object.
    pub name: &'a str,
    /// The request path.
    pub path: &'a str,
}

/// The kind of an authorizer's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is forbidden; later authorizers are not asked.
    Deny,
    /// This authorizer has no opinion; the next one is asked, and if none allows, it is denied.
    NoOpinion,
}

/// An authorizer's verdict and the reason shown in the 403 message and the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// The verdict.
    pub decision: Decision,
    /// Why, for humans; may be empty.
    pub reason: String,
}

impl Authorization {
    /// A verdict with a reason.
    pub fn new(decision: Decision, reason: impl Into<String>) -> Self {
        Self {
            decision,
            reason: reason.into(),
        }
    }

    /// Whether the request may proceed.
    pub fn is_allowed(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// Decides whether a user may do what a request asks.
#[async_trait]
pub trait Authorizer: Send + Sync {
    /// The verdict for one request; `Err` when the decision could not be made (e.g. a
    /// SubjectAccessReview call failed), which the filter treats as a denial.
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError>;
}

#[async_trait]
impl<A: Authorizer + ?Sized> Authorizer for std::sync::Arc<A> {
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError> {
        (**self).authorize(attributes).await
    }
}

/// Standalone mode's authorizer: any authenticated user may do anything, anonymous users get
/// no opinion (and so a 403). With no cluster to delegate to, there is no RBAC to ask.
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysAllowAuthenticated;

#[async_trait]
impl Authorizer for AlwaysAllowAuthenticated {
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError> {
        Ok(if attributes.user.is_authenticated() {
            Authorization::new(Decision::Allow, "")
        } else {
            Authorization::new(Decision::NoOpinion, "anonymous requests are not authorized")
        })
    }
}

/// `k8s.io/apiserver`'s privileged-groups authorizer: members of these groups may do
/// anything (`--authorization-always-allow-groups`, `system:masters` by default), other users
/// get no opinion.
#[derive(Debug, Clone, Default)]
pub struct PrivilegedGroups {
    groups: Vec<String>,
}

impl PrivilegedGroups {
    /// Allows members of `groups`.
    pub fn new(groups: Vec<String>) -> Self {
        Self { groups }
    }
}

#[async_trait]
impl Authorizer for PrivilegedGroups {
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError> {
        let privileged = self.groups.iter().any(|g| attributes.user.in_group(g));
        Ok(Authorization::new(
            if privileged {
                Decision::Allow
            } else {
                Decision::NoOpinion
            },
            "",
        ))
    }
}

/// `k8s.io/apiserver`'s path authorizer (`--authorization-always-allow-paths`): allows
/// non-resource requests to these paths (a trailing `*` matches any suffix), has no opinion
/// on anything else.
#[derive(Debug, Clone, Default)]
pub struct AlwaysAllowPaths {
    paths: Vec<String>,
}

impl AlwaysAllowPaths {
    /// Allows `paths`.
    pub fn new(paths: Vec<String>) -> Self {
        Self { paths }
    }

    /// Whether `path` is one of the paths (or under a `prefix*`).
    pub fn matches(&self, path: &str) -> bool {
        path_matches(&self.paths, path)
    }
}

/// Whether `path` equals one of `patterns` or starts with a pattern's part before a trailing
/// `*` (leading slashes ignored, as Go's path authorizer trims them).
pub fn path_matches(patterns: &[String], path: &str) -> bool {
    let path = path.trim_start_matches('/');
    patterns.iter().any(|p| {
        let p = p.trim_start_matches('/');
        match p.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => p == path,
        }
    })
}

#[async_trait]
impl Authorizer for AlwaysAllowPaths {
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError> {
        let allowed = !attributes.resource_request && self.matches(attributes.path);
        Ok(Authorization::new(
            if allowed {
                Decision::Allow
            } else {
                Decision::NoOpinion
            },
            "",
        ))
    }
}

/// Asks authorizers in order: the first `Allow` or `Deny` decides; errors and reasons of
/// those with no opinion are collected (`k8s.io/apiserver`'s union authorizer). If none
/// decides, the verdict is no opinion, or the collected error if any failed.
#[derive(Default, Clone)]
pub struct UnionAuthorizer {
    authorizers: Vec<std::sync::Arc<dyn Authorizer>>,
}

impl UnionAuthorizer {
    /// An empty union, which has no opinion on anything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an authorizer, asked after the ones already added.
    pub fn with(mut self, authorizer: impl Authorizer + 'static) -> Self {
        self.authorizers.push(std::sync::Arc::new(authorizer));
        self
    }
}

#[async_trait]
impl Authorizer for UnionAuthorizer {
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError> {
        let mut reasons = Vec::new();
        let mut errors = Vec::new();
        for authorizer in &self.authorizers {
            match authorizer.authorize(attributes).await {
                Ok(verdict) if verdict.decision != Decision::NoOpinion => return Ok(verdict),
                Ok(verdict) => {
                    if !verdict.reason.is_empty() {
                        reasons.push(verdict.reason);
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if errors.is_empty() {
            Ok(Authorization::new(Decision::NoOpinion, reasons.join("\n")))
        } else {
            Err(AuthError::Unavailable(errors.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(user: &UserInfo) -> Attributes<'_> {
        Attributes {
            user,
            verb: "list",
            resource_request: true,
            api_group: "wardle.example.com",
            api_version: "v1alpha1",
            resource: "flunders",
            subresource: "",
            namespace: "default",
            name: "",
            path: "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders",
        }
    }

    fn decide(user: &UserInfo) -> Authorization {
        let attributes = attributes(user);
        futures::executor::block_on(AlwaysAllowAuthenticated.authorize(&attributes)).unwrap()
    }

    #[test]
    fn authenticated_users_are_allowed() {
        let user = UserInfo::new("jane", []).with_authenticated_group();
        assert!(decide(&user).is_allowed());
    }

    #[test]
    fn paths_and_groups() {
        let paths = AlwaysAllowPaths::new(vec!["/healthz".into(), "/metrics/*".into()]);
        assert!(paths.matches("/healthz"));
        assert!(!paths.matches("/healthz/etcd"));
        assert!(paths.matches("/metrics/x"));
        assert!(!paths.matches("/livez"));
        let user = UserInfo::new("root", ["system:masters".to_string()]);
        let union = UnionAuthorizer::new()
            .with(PrivilegedGroups::new(vec!["system:masters".into()]))
            .with(paths);
        let decide = |user: &UserInfo, path: &'static str, resource_request: bool| {
            let attributes = Attributes {
                path,
                resource_request,
                ..attributes(user)
            };
            futures::executor::block_on(union.authorize(&attributes))
                .unwrap()
                .decision
        };
        assert_eq!(decide(&user, "/apis/x", true), Decision::Allow);
        let jane = UserInfo::new("jane", []);
        assert_eq!(decide(&jane, "/healthz", false), Decision::Allow);
        assert_eq!(decide(&jane, "/healthz", true), Decision::NoOpinion);
        assert_eq!(decide(&jane, "/version", false), Decision::NoOpinion);
    }

    #[test]
    fn anonymous_gets_no_opinion() {
        assert_eq!(decide(&UserInfo::anonymous()).decision, Decision::NoOpinion);
        assert_eq!(
            decide(&UserInfo::new("raw", [])).decision,
            Decision::NoOpinion
        );
    }
}
