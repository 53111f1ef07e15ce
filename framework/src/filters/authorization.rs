//! Authorization: asks the authorizer whether the user may do what the request info says;
//! a denial is 403 `Forbidden` naming user, verb and resource, as kube-apiserver words it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::FilterConfig;
use crate::auth::{Attributes, UserInfo};
use crate::endpoints::RequestInfo;
use crate::error::Error;

/// The middleware.
pub async fn authorize(
    State(config): State<Arc<FilterConfig>>,
    request: Request,
    next: Next,
) -> Response {
    if config.is_always_allowed(request.uri().path()) {
        return next.run(request).await;
    }
    let (Some(user), Some(info)) = (
        request.extensions().get::<UserInfo>(),
        request.extensions().get::<RequestInfo>(),
    ) else {
        return Error::unauthorized().into_response();
    };
    let attributes = Attributes {
        user,
        verb: &info.verb,
        resource_request: info.is_resource_request,
        api_group: &info.api_group,
        api_version: &info.api_version,
        resource: &info.resource,
        subresource: &info.subresource,
        namespace: &info.namespace,
        name: &info.name,
        path: &info.path,
    };
    match config.authorizer.authorize(&attributes).await {
        Ok(decision) if decision.is_allowed() => next.run(request).await,
        Ok(decision) => forbidden(user, info, &decision.reason).into_response(),
        Err(e) => forbidden(user, info, &e.to_string()).into_response(),
    }
}

fn forbidden(user: &UserInfo, info: &RequestInfo, reason: &str) -> Error {
    let mut message =
        if info.is_resource_request {
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
            format!(
            "{}.{} {:?} is forbidden: User {:?} cannot {} resource {:?} in API group {:?} {scope}",
            info.resource, info.api_group, info.name, user.name, info.verb, resource, info.api_group
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
    Error::forbidden(message)
}
