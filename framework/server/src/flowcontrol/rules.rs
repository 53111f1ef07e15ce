//! Whether a FlowSchema matches a request, as kube's `apf_filter`'s `rule.go`: a rule matches
//! when one of its subjects is the user and one of its resource rules (for a resource
//! request) or non-resource rules (otherwise) covers the request.

use k8s_openapi::api::flowcontrol::v1 as fc;

use super::RequestDigest;

/// `*`: every verb, group, resource, namespace or URL.
const ALL: &str = "*";

/// Whether one of `rules` matches `digest`.
pub(super) fn matches(rules: &[fc::PolicyRulesWithSubjects], digest: &RequestDigest<'_>) -> bool {
    rules.iter().any(|rule| {
        rule.subjects.iter().any(|s| matches_subject(s, digest))
            && match &digest.resource {
                Some(target) => rule.resource_rules.iter().flatten().any(|r| {
                    has(&r.verbs, digest.verb)
                        && has(&r.api_groups, target.api_group)
                        && matches_resource(&r.resources, target.resource, target.subresource)
                        && if target.namespace.is_empty() {
                            r.cluster_scope == Some(true)
                        } else {
                            has(
                                r.namespaces.as_deref().unwrap_or_default(),
                                target.namespace,
                            )
                        }
                }),
                None => rule.non_resource_rules.iter().flatten().any(|r| {
                    has(&r.verbs, digest.verb) && matches_url(&r.non_resource_urls, digest.path)
                }),
            }
    })
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == ALL || v == value)
}

/// A subresource is named `resource/subresource`.
fn matches_resource(list: &[String], resource: &str, subresource: &str) -> bool {
    if subresource.is_empty() {
        has(list, resource)
    } else {
        has(list, &format!("{resource}/{subresource}"))
    }
}

/// An exact path, `*`, or a pattern ending in `*` that the path starts with.
fn matches_url(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| {
        p == ALL
            || p == path
            || p.strip_suffix('*')
                .is_some_and(|prefix| path.starts_with(prefix))
    })
}

fn matches_subject(subject: &fc::Subject, digest: &RequestDigest<'_>) -> bool {
    let user = digest.user;
    match subject.kind.as_str() {
        "User" => subject
            .user
            .as_ref()
            .is_some_and(|u| u.name == ALL || u.name == user.name),
        "Group" => subject
            .group
            .as_ref()
            .is_some_and(|g| g.name == ALL || user.groups.contains(&g.name)),
        "ServiceAccount" => subject.service_account.as_ref().is_some_and(|sa| {
            let prefix = format!("system:serviceaccount:{}:", sa.namespace);
            user.name
                .strip_prefix(&prefix)
                .is_some_and(|name| sa.name == ALL || name == sa.name)
        }),
        _ => false,
    }
}
