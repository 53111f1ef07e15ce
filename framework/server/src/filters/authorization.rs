//! Authorization: asks the authorizer whether the user may do what the request info says.
//! As kube-apiserver's filter: `Allow` proceeds, an authorizer error is 500, anything else is
//! 403 `Forbidden` naming user, verb and resource in kube's wording.

use std::sync::OnceLock;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use prometheus::Histogram;
use tracing::Instrument;

use super::FilterConfig;
use crate::auth::{Attributes, UserInfo};
use crate::endpoints::{RequestInfo, Verb};
use crate::error::Error;
use crate::registry::subresource::SubresourceKind;

/// The step: the request goes on when the authorizer allows it; else 403 (500 when the
/// authorizer fails).
pub async fn authorize(config: &FilterConfig, request: Request) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    if super::authentication::is_always_allowed(config, &parts) {
        return Ok(Request::from_parts(parts, body));
    }
    let (Some(user), Some(info)) = (
        parts.extensions.get::<UserInfo>(),
        parts.extensions.get::<RequestInfo>(),
    ) else {
        return Err(Error::unauthorized().into_response());
    };
    decide(config, &parts, user, info).await?;
    // kube ≥ 1.30 (AuthorizePodWebsocketUpgradeCreatePermission): a connection opened by a
    // GET (a WebSocket upgrade) needs `create` as well, as a POST would.
    let connection = config.long_running.kind(info) == Some(SubresourceKind::Connect);
    if connection && info.verb == Verb::Get {
        let create = RequestInfo {
            verb: Verb::Create,
            ..info.clone()
        };
        decide(config, &parts, user, &create).await?;
    }
    Ok(Request::from_parts(parts, body))
}

/// One decision of the authorizer on `verb`: `Ok` when it allows.
async fn decide(
    config: &FilterConfig,
    parts: &http::request::Parts,
    user: &UserInfo,
    info: &RequestInfo,
) -> Result<(), Response> {
    let attributes = Attributes {
        user,
        verb: info.verb.as_str(),
        resource_request: info.is_resource_request,
        api_group: &info.api_group,
        api_version: &info.api_version,
        resource: &info.resource,
        subresource: &info.subresource,
        namespace: &info.namespace,
        name: &info.name,
        path: &info.path,
    };
    let started = std::time::Instant::now();
    let decided = config
        .authorizer
        .authorize(&attributes)
        .instrument(crate::spans::child_span!("authorization"))
        .await;
    // kube's `authorization_duration_seconds`: `allowed`, `denied`, `error`.
    static RESULTS: [OnceLock<Histogram>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (result, slot) = match &decided {
        Ok(decision) if decision.is_allowed() => ("allowed", 0),
        Ok(_) => ("denied", 1),
        Err(_) => ("error", 2),
    };
    let durations = &crate::metrics::global().authorization_duration;
    super::metrics::one_label(&RESULTS[slot], durations, result)
        .observe(started.elapsed().as_secs_f64());
    annotate_decision(&parts.extensions, &decided);
    match decided {
        Ok(decision) if decision.is_allowed() => Ok(()),
        Ok(decision) => Err(forbidden(user, info, &decision.reason).into_response()),
        Err(e) => {
            tracing::warn!(error = %e, "authorization failed");
            Err(Error::internal(e).into_response())
        }
    }
}

/// kube's audit annotations of the decision: `authorization.k8s.io/decision` (`allow`,
/// `forbid`) and `authorization.k8s.io/reason`.
fn annotate_decision<E>(
    extensions: &http::Extensions,
    decided: &Result<crate::auth::authorizer::Authorization, E>,
) {
    let Ok(decision) = decided else { return };
    let annotations = crate::audit::AuditAnnotations::of(extensions);
    let verdict = if decision.is_allowed() {
        "allow"
    } else {
        "forbid"
    };
    annotations.add("authorization.k8s.io/decision", verdict);
    annotations.add("authorization.k8s.io/reason", &decision.reason);
}

/// kube's `ForbiddenStatusError`: `{resource}.{group} "{name}" is forbidden: User "{user}"
/// cannot {verb} resource "{resource[/sub]}" in API group "{group}" in the namespace "{ns}"`
/// (`at the cluster scope` without a namespace; no name part for collections), or for paths
/// `forbidden: User "{user}" cannot {verb} path "{path}"`; the authorizer's reason follows
/// after `: ` when there is one.
pub fn forbidden_message(user: &UserInfo, info: &RequestInfo, reason: &str) -> String {
    let mut message = if info.is_resource_request {
        let resource = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        let scope = if info.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", info.namespace)
        };
        let qualified = if info.api_group.is_empty() {
            info.resource.clone()
        } else {
            format!("{}.{}", info.resource, info.api_group)
        };
        let subject = if info.name.is_empty() {
            format!("{qualified} is forbidden")
        } else {
            format!("{qualified} {:?} is forbidden", info.name)
        };
        format!(
            "{subject}: User {:?} cannot {} resource {resource:?} in API group {:?} {scope}",
            user.name, info.verb, info.api_group
        )
    } else {
        format!(
            "forbidden: User {:?} cannot {} path {:?}",
            user.name, info.verb, info.path
        )
    };
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    message
}

/// The 403, with kube's details: group, resource (as `kind`) and name of the request.
pub(crate) fn forbidden(user: &UserInfo, info: &RequestInfo, reason: &str) -> Error {
    let resource_request = info.is_resource_request;
    let field = |value: &str| {
        if resource_request {
            value.to_string()
        } else {
            String::new()
        }
    };
    Error::forbidden(forbidden_message(user, info, reason)).with_details(
        kube_core::response::StatusDetails {
            name: field(&info.name),
            group: field(&info.api_group),
            kind: field(&info.resource),
            uid: String::new(),
            causes: Vec::new(),
            retry_after_seconds: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: http::Method, path: &str) -> RequestInfo {
        RequestInfo::parse(&method, path, None)
    }

    #[test]
    fn messages_in_kubes_wording() {
        let bob = UserInfo::new("bob", []);
        let get = info(
            http::Method::GET,
            "/apis/wardle.example.com/v1alpha1/namespaces/ns1/flunders/x",
        );
        assert_eq!(
            forbidden_message(&bob, &get, ""),
            "flunders.wardle.example.com \"x\" is forbidden: User \"bob\" cannot get resource \
             \"flunders\" in API group \"wardle.example.com\" in the namespace \"ns1\""
        );
        let list = info(
            http::Method::GET,
            "/apis/wardle.example.com/v1alpha1/fischers",
        );
        assert_eq!(
            forbidden_message(&bob, &list, "no RBAC policy matched"),
            "fischers.wardle.example.com is forbidden: User \"bob\" cannot list resource \
             \"fischers\" in API group \"wardle.example.com\" at the cluster scope: no RBAC \
             policy matched"
        );
        let status = info(
            http::Method::PUT,
            "/apis/wardle.example.com/v1alpha1/namespaces/ns1/flunders/x/status",
        );
        assert!(
            forbidden_message(&bob, &status, "")
                .contains("cannot update resource \"flunders/status\"")
        );
        let path = info(http::Method::GET, "/metrics");
        assert_eq!(
            forbidden_message(&bob, &path, ""),
            "forbidden: User \"bob\" cannot get path \"/metrics\""
        );
    }
}
