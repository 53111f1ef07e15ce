//! Impersonation, as kube-apiserver's `WithImpersonation`: a user allowed to `impersonate`
//! may act as another with `Impersonate-User`, `Impersonate-Uid`, `Impersonate-Group` and
//! `Impersonate-Extra-{key}`. Each thing impersonated is authorized first (`impersonate` on
//! `users`, `serviceaccounts`, `groups`, and on `uids` and `userextras/{key}` of
//! `authentication.k8s.io`); then the request goes on as the impersonated user, whom
//! authorization and storage see, and the audit event records as `impersonatedUser`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::HeaderMap;

use super::FilterConfig;
use crate::audit::RequestAudit;
use crate::auth::{Attributes, UserInfo};
use crate::endpoints::RequestInfo;
use crate::endpoints::request_info::Verb;
use crate::error::Error;

const USER: &str = "impersonate-user";
const UID: &str = "impersonate-uid";
const GROUP: &str = "impersonate-group";
const EXTRA_PREFIX: &str = "impersonate-extra-";
/// What every impersonation header starts with (header names are lower-case).
const IMPERSONATE_PREFIX: &str = "impersonate-";
const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// One thing the request asks to impersonate, as the authorizer is asked about it.
#[derive(Clone, Debug, PartialEq)]
struct Wanted {
    api_group: &'static str,
    resource: &'static str,
    subresource: String,
    namespace: String,
    name: String,
}

impl Wanted {
    fn of(resource: &'static str, name: &str) -> Self {
        Self {
            api_group: "",
            resource,
            subresource: String::new(),
            namespace: String::new(),
            name: name.into(),
        }
    }
}

/// What the headers ask for, and the user it makes.
#[derive(Debug)]
struct Impersonation {
    wanted: Vec<Wanted>,
    user: UserInfo,
}

/// Whether `request` has an impersonation header. Nearly every request impersonates no one:
/// one look at the header names, none of them parsed.
pub fn asked(request: &Request) -> bool {
    request
        .headers()
        .keys()
        .any(|name| name.as_str().starts_with(IMPERSONATE_PREFIX))
}

/// The step: no impersonation headers, the request goes on as it is; else every impersonated
/// thing must be allowed (403 as kube-apiserver writes it), and the request goes on as the
/// impersonated user, the headers removed. The chain calls it only when [`asked`].
pub async fn impersonate(config: &FilterConfig, request: Request) -> Result<Request, Response> {
    let (mut parts, body) = request.into_parts();
    let asked = match requested(&parts.headers) {
        Ok(Some(asked)) => asked,
        Ok(None) => return Ok(Request::from_parts(parts, body)),
        Err(e) => return Err(e.into_response()),
    };
    let Some(requestor) = parts.extensions.get::<UserInfo>().cloned() else {
        return Err(Error::internal("no user found for request").into_response());
    };
    for wanted in &asked.wanted {
        allowed(config, &requestor, wanted)
            .await
            .map_err(IntoResponse::into_response)?;
    }
    tracing::debug!(user = %requestor.name, as_user = %asked.user.name, "impersonating");
    if let Some(audit) = parts.extensions.get::<Arc<RequestAudit>>() {
        let user = &asked.user;
        audit.update(|event| {
            event.impersonated_user = Some(crate::audit::UserInfo {
                username: user.name.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
            })
        });
    }
    parts.extensions.insert(asked.user);
    strip_headers(&mut parts.headers);
    Ok(Request::from_parts(parts, body))
}

/// Asks the authorizer whether `requestor` may impersonate `wanted`.
async fn allowed(
    config: &FilterConfig,
    requestor: &UserInfo,
    wanted: &Wanted,
) -> Result<(), Error> {
    let attributes = Attributes {
        user: requestor,
        verb: Verb::Impersonate.as_str(),
        resource_request: true,
        api_group: wanted.api_group,
        api_version: "",
        resource: wanted.resource,
        subresource: &wanted.subresource,
        namespace: &wanted.namespace,
        name: &wanted.name,
        path: "",
    };
    match config.authorizer.authorize(&attributes).await {
        Ok(decision) if decision.is_allowed() => Ok(()),
        Ok(decision) => {
            let info = RequestInfo {
                is_resource_request: true,
                verb: Verb::Impersonate,
                api_group: wanted.api_group.into(),
                namespace: wanted.namespace.clone(),
                resource: wanted.resource.into(),
                subresource: wanted.subresource.clone(),
                name: wanted.name.clone(),
                ..RequestInfo::default()
            };
            Err(super::authorization::forbidden(
                requestor,
                &info,
                &decision.reason,
            ))
        }
        Err(e) => {
            tracing::warn!(error = %e, "authorization of an impersonation failed");
            Err(Error::internal(e))
        }
    }
}

/// kube's `buildImpersonationRequests` and the user they make; `None` without impersonation
/// headers. Groups, a uid or extras without a user are refused (500, as kube answers).
fn requested(headers: &HeaderMap) -> Result<Option<Impersonation>, Error> {
    let text = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let username = text(USER).into_iter().next().filter(|u| !u.is_empty());
    let uid = text(UID).into_iter().next().filter(|u| !u.is_empty());
    let groups = text(GROUP);
    let extra = extras(headers);
    if username.is_none() {
        if groups.is_empty() && extra.is_empty() && uid.is_none() {
            return Ok(None);
        }
        return Err(Error::internal(
            "requested impersonation of groups, a uid or extra values without impersonating a user",
        ));
    }
    let username = username.unwrap_or_default();
    let mut wanted = Vec::new();
    let mut user = UserInfo {
        name: username.clone(),
        ..UserInfo::default()
    };
    match service_account(&username) {
        Some((namespace, name)) => {
            wanted.push(Wanted {
                namespace: namespace.into(),
                ..Wanted::of("serviceaccounts", name)
            });
            if groups.is_empty() {
                user.groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                ];
            }
        }
        None => wanted.push(Wanted::of("users", &username)),
    }
    for group in &groups {
        wanted.push(Wanted::of("groups", group));
        user.groups.push(group.clone());
    }
    for (key, values) in &extra {
        for value in values {
            wanted.push(Wanted {
                api_group: AUTHENTICATION_GROUP,
                subresource: key.clone(),
                ..Wanted::of("userextras", value)
            });
        }
    }
    if let Some(uid) = uid {
        wanted.push(Wanted {
            api_group: AUTHENTICATION_GROUP,
            ..Wanted::of("uids", &uid)
        });
        user.uid = uid;
    }
    user.extra = extra;
    add_implicit_group(&mut user);
    Ok(Some(Impersonation { wanted, user }))
}

/// `Impersonate-Extra-{key}` headers: keys lower-cased and percent-decoded, values in order.
fn extras(headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) else {
            continue;
        };
        let key = percent_decode(key).to_lowercase();
        if let Ok(value) = value.to_str() {
            extra.entry(key).or_default().push(value.to_string());
        }
    }
    extra
}

/// `%2F` and friends decoded (kube's `unescapeExtraKey`); a bad escape is kept as written.
fn percent_decode(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// `system:serviceaccount:{namespace}:{name}` split, as kube's `SplitUsername`.
fn service_account(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    let valid = !namespace.is_empty() && !name.is_empty() && !name.contains(':');
    valid.then_some((namespace, name))
}

/// kube adds `system:authenticated` to an impersonated user (`system:unauthenticated` to
/// `system:anonymous`) unless the groups already say which.
fn add_implicit_group(user: &mut UserInfo) {
    let has = |group: &str| user.groups.iter().any(|g| g == group);
    if user.name == "system:anonymous" {
        if !has("system:unauthenticated") {
            user.groups.push("system:unauthenticated".into());
        }
    } else if !has("system:authenticated") && !has("system:unauthenticated") {
        user.groups.push("system:authenticated".into());
    }
}

fn strip_headers(headers: &mut HeaderMap) {
    let names: Vec<_> = headers
        .keys()
        .filter(|n| {
            let n = n.as_str();
            n == USER || n == UID || n == GROUP || n.starts_with(EXTRA_PREFIX)
        })
        .cloned()
        .collect();
    for name in names {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_user_with_groups_and_extras() {
        let asked = requested(&headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Extra-Scopes%2Fread", "a"),
            ("Impersonate-Uid", "u-1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(asked.user.name, "bob");
        assert_eq!(asked.user.uid, "u-1");
        assert_eq!(asked.user.groups, ["devs", "ops", "system:authenticated"]);
        assert_eq!(asked.user.extra["scopes/read"], ["a"]);
        let resources: Vec<_> = asked
            .wanted
            .iter()
            .map(|w| (w.api_group, w.resource))
            .collect();
        assert_eq!(
            resources,
            [
                ("", "users"),
                ("", "groups"),
                ("", "groups"),
                (AUTHENTICATION_GROUP, "userextras"),
                (AUTHENTICATION_GROUP, "uids")
            ]
        );
        assert_eq!(asked.wanted[3].subresource, "scopes/read");
    }

    #[test]
    fn service_accounts_anonymous_and_refusals() {
        let sa = requested(&headers(&[(
            "Impersonate-User",
            "system:serviceaccount:ns:bot",
        )]))
        .unwrap()
        .unwrap();
        assert_eq!(
            sa.user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        assert_eq!(
            (sa.wanted[0].resource, sa.wanted[0].namespace.as_str()),
            ("serviceaccounts", "ns")
        );
        let anonymous = requested(&headers(&[("Impersonate-User", "system:anonymous")]))
            .unwrap()
            .unwrap();
        assert_eq!(anonymous.user.groups, ["system:unauthenticated"]);
        assert!(requested(&headers(&[])).unwrap().is_none());
        let no_user = requested(&headers(&[("Impersonate-Group", "devs")])).unwrap_err();
        assert_eq!(no_user.code(), 500);
    }
}
