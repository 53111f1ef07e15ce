//! Authorization: after authentication, the authorization filter describes the request as
//! [`Attributes`] and asks an [`Authorizer`] for a [`Decision`] (`k8s.io/apiserver`'s
//! `authorizer.Attributes` and `authorizer.Decision`); anything but `Allow` is a 403.

use async_trait::async_trait;

use super::{user::UserInfo, AuthError};

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
    fn anonymous_gets_no_opinion() {
        assert_eq!(decide(&UserInfo::anonymous()).decision, Decision::NoOpinion);
        assert_eq!(
            decide(&UserInfo::new("raw", [])).decision,
            Decision::NoOpinion
        );
    }
}
