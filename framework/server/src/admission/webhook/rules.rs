//! Which webhooks a request goes to, by their `rules` and `matchPolicy`, as kube's
//! `predicates/rules` and `generic.Webhook.ShouldCallHook`.

use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::RuleWithOperations;

use super::hook::Hook;
use crate::admission::attributes::{GroupVersionKind, GroupVersionResource};
use crate::admission::{Attributes, Operation};
use crate::codec::VersionConvertor;

/// What a matched webhook is sent: the resource and kind of the version its rules matched,
/// and how to convert the object (in the storage version) to it.
#[derive(Clone)]
pub(crate) struct Invocation {
    pub(crate) resource: GroupVersionResource,
    pub(crate) kind: GroupVersionKind,
    /// `None`: the object as stored is already in this version.
    pub(crate) convertor: Option<Arc<dyn VersionConvertor>>,
}

/// The request as one rule sees it.
pub(crate) struct Request<'a> {
    pub(crate) operation: Operation,
    pub(crate) resource: &'a GroupVersionResource,
    pub(crate) subresource: &'a str,
    pub(crate) namespaced: bool,
}

fn exact_or_wildcard(items: &Option<Vec<String>>, requested: &str) -> bool {
    items
        .iter()
        .flatten()
        .any(|item| item == "*" || item == requested)
}

/// kube's `rules.Matcher.Matches`: scope, operation, group, version and resource (with its
/// subresource: `flunders`, `flunders/status`, `*`, `*/status`, `flunders/*`, `*/*`).
pub(crate) fn rule_matches(rule: &RuleWithOperations, request: &Request<'_>) -> bool {
    let scope = match rule.scope.as_deref() {
        None | Some("*") => true,
        Some("Namespaced") => request.namespaced,
        Some("Cluster") => !request.namespaced,
        Some(_) => false,
    };
    let operation = rule
        .operations
        .iter()
        .flatten()
        .any(|op| op == "*" || op == request.operation.as_str());
    let resource = rule.resources.iter().flatten().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == request.resource.resource)
            && (sub == "*" || sub == request.subresource)
    });
    scope
        && operation
        && exact_or_wildcard(&rule.api_groups, &request.resource.group)
        && exact_or_wildcard(&rule.api_versions, &request.resource.version)
        && resource
}

/// Whether and how `hook` is called for `attributes`: first on the resource as the request
/// named it; with `matchPolicy: Equivalent`, then on the same resource in the server's other
/// versions, earlier rules first (kube's order).
pub(crate) fn invocation(hook: &Hook, attributes: &Attributes) -> Option<Invocation> {
    matching(&hook.rules, hook.equivalent, attributes, rule_matches)
}

/// [`invocation`] for any kind of rule (a policy's `NamedRuleWithOperations` too), `matches`
/// saying whether one rule matches a request.
pub(crate) fn matching<R>(
    rules: &[R],
    equivalent: bool,
    attributes: &Attributes,
    matches: impl Fn(&R, &Request<'_>) -> bool,
) -> Option<Invocation> {
    let equivalents = attributes.equivalent_resources();
    let request = Request {
        operation: attributes.operation,
        resource: &attributes.request_resource,
        subresource: &attributes.subresource,
        namespaced: !attributes.namespace.is_empty(),
    };
    if rules.iter().any(|r| matches(r, &request)) {
        let own = equivalents
            .iter()
            .find(|e| e.resource == attributes.request_resource);
        return Some(Invocation {
            resource: attributes.request_resource.clone(),
            kind: attributes.request_kind.clone(),
            convertor: own.and_then(|e| e.convertor.clone()),
        });
    }
    if !equivalent {
        return None;
    }
    for rule in rules {
        for equivalent in equivalents
            .iter()
            .filter(|e| e.resource != attributes.request_resource)
        {
            let other = Request {
                resource: &equivalent.resource,
                ..request
            };
            if matches(rule, &other) {
                return Some(Invocation {
                    resource: equivalent.resource.clone(),
                    kind: equivalent.kind.clone(),
                    convertor: equivalent.convertor.clone(),
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        ops: &[&str],
        groups: &[&str],
        versions: &[&str],
        resources: &[&str],
    ) -> RuleWithOperations {
        let list = |items: &[&str]| Some(items.iter().map(|s| s.to_string()).collect());
        RuleWithOperations {
            operations: list(ops),
            api_groups: list(groups),
            api_versions: list(versions),
            resources: list(resources),
            scope: None,
        }
    }

    fn flunders(version: &str) -> GroupVersionResource {
        GroupVersionResource::gvr("wardle.example.com", version, "flunders")
    }

    fn request<'a>(resource: &'a GroupVersionResource, subresource: &'a str) -> Request<'a> {
        Request {
            operation: Operation::Create,
            resource,
            subresource,
            namespaced: true,
        }
    }

    #[test]
    fn operations_groups_versions_and_wildcards() {
        let gvr = flunders("v1alpha1");
        let req = request(&gvr, "");
        let all = ["*"];
        assert!(rule_matches(&rule(&all, &all, &all, &all), &req));
        assert!(rule_matches(
            &rule(
                &["CREATE"],
                &["wardle.example.com"],
                &["v1alpha1"],
                &["flunders"]
            ),
            &req
        ));
        assert!(!rule_matches(
            &rule(&["UPDATE", "DELETE"], &all, &all, &all),
            &req
        ));
        assert!(!rule_matches(&rule(&all, &["apps"], &all, &all), &req));
        assert!(!rule_matches(&rule(&all, &all, &["v1beta1"], &all), &req));
        assert!(!rule_matches(&rule(&all, &all, &all, &["fischers"]), &req));
        assert!(!rule_matches(&rule(&[], &all, &all, &all), &req));
        let delete = Request {
            operation: Operation::Delete,
            ..request(&gvr, "")
        };
        assert!(rule_matches(&rule(&["DELETE"], &all, &all, &all), &delete));
    }

    #[test]
    fn subresources() {
        let gvr = flunders("v1alpha1");
        let main = request(&gvr, "");
        let status = request(&gvr, "status");
        let any = ["*"];
        let on = |resources: &[&str], req: &Request<'_>| {
            rule_matches(&rule(&any, &any, &any, resources), req)
        };
        // `*` and `flunders` are main resources only.
        assert!(on(&["*"], &main) && !on(&["*"], &status));
        assert!(on(&["flunders"], &main) && !on(&["flunders"], &status));
        assert!(on(&["flunders/status"], &status) && !on(&["flunders/status"], &main));
        assert!(on(&["*/status"], &status) && !on(&["*/status"], &main));
        assert!(!on(&["*/scale"], &status));
        assert!(on(&["*/*"], &status) && on(&["*/*"], &main));
        assert!(on(&["flunders/*"], &status) && on(&["flunders/*"], &main));
    }

    #[test]
    fn scope() {
        let gvr = flunders("v1alpha1");
        let namespaced = request(&gvr, "");
        let cluster = Request {
            namespaced: false,
            ..request(&gvr, "")
        };
        let any = ["*"];
        let scoped = |scope: &str| RuleWithOperations {
            scope: Some(scope.into()),
            ..rule(&any, &any, &any, &any)
        };
        assert!(rule_matches(&scoped("*"), &namespaced) && rule_matches(&scoped("*"), &cluster));
        assert!(rule_matches(&scoped("Namespaced"), &namespaced));
        assert!(!rule_matches(&scoped("Namespaced"), &cluster));
        assert!(rule_matches(&scoped("Cluster"), &cluster));
        assert!(!rule_matches(&scoped("Cluster"), &namespaced));
    }

    fn hook(rules: Vec<RuleWithOperations>, equivalent: bool) -> Hook {
        let mut hook = crate::admission::webhook::hook::tests::hook("h");
        hook.rules = rules;
        hook.equivalent = equivalent;
        hook
    }

    fn attributes() -> Attributes {
        use crate::admission::EquivalentResource;
        let equivalent = |version: &str| EquivalentResource {
            resource: flunders(version),
            kind: GroupVersionKind::gvk("wardle.example.com", version, "Flunder"),
            convertor: None,
        };
        Attributes::new(
            Operation::Create,
            &crate::test_kinds::TEST_INFO,
            "default",
            "a",
        )
        .with_equivalents(vec![equivalent("v1alpha1"), equivalent("v1beta1")])
    }

    #[test]
    fn match_policy_picks_the_version_the_rules_name() {
        let attributes = attributes();
        let any = ["*"];
        let beta_only = || vec![rule(&any, &any, &["v1beta1"], &any)];
        // Exact: only the request's version.
        assert!(invocation(&hook(beta_only(), false), &attributes).is_none());
        // Equivalent: the other version, with its kind.
        let matched = invocation(&hook(beta_only(), true), &attributes).unwrap();
        assert_eq!(matched.resource, flunders("v1beta1"));
        assert_eq!(matched.kind.version, "v1beta1");
        // The request's own version first, whatever the policy.
        let both = vec![rule(&any, &any, &["v1beta1", "v1alpha1"], &any)];
        let own = invocation(&hook(both, true), &attributes).unwrap();
        assert_eq!(own.resource, flunders("v1alpha1"));
        // Equivalence is per resource: another group does not match.
        let apps = vec![rule(&any, &["apps"], &any, &any)];
        assert!(invocation(&hook(apps, true), &attributes).is_none());
    }
}
