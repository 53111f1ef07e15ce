//! `matchConstraints` of a policy and `matchResources` of a binding, as kube's
//! `policy/matching`: selectors first, then `excludeResourceRules` (as the request names the
//! resource), then `resourceRules` (with `matchPolicy: Equivalent`, also in the server's
//! other versions). The webhooks' rules and selectors do the work.

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, RuleWithOperations,
};

use crate::admission::Attributes;
use crate::admission::namespace::CoreNamespaces;
use crate::admission::webhook::rules::{self, Invocation, Request};
use crate::admission::webhook::selectors;
use crate::error::Result;

/// kube's `RuleMatches` for a named rule: the rule, and the request's name among
/// `resourceNames` when it lists any.
fn named_rule_matches(rule: &NamedRuleWithOperations, request: &Request<'_>, name: &str) -> bool {
    let plain = RuleWithOperations {
        api_groups: rule.api_groups.clone(),
        api_versions: rule.api_versions.clone(),
        operations: rule.operations.clone(),
        resources: rule.resources.clone(),
        scope: rule.scope.clone(),
    };
    let names = rule.resource_names.as_deref().unwrap_or_default();
    rules::rule_matches(&plain, request) && (names.is_empty() || names.iter().any(|n| n == name))
}

/// Whether `resources` match the request, and then in which version.
pub(crate) async fn matches(
    resources: &MatchResources,
    namespaces: &CoreNamespaces,
    attributes: &Attributes,
) -> Result<Option<Invocation>> {
    let default_selector = Default::default();
    let namespace_selector = resources
        .namespace_selector
        .as_ref()
        .unwrap_or(&default_selector);
    if !namespaces.matches(namespace_selector, attributes).await? {
        return Ok(None);
    }
    let object_selector = resources
        .object_selector
        .as_ref()
        .unwrap_or(&default_selector);
    if !selectors::object_matches(object_selector, attributes)? {
        return Ok(None);
    }
    let name = attributes.name.as_str();
    let excluded = resources.exclude_resource_rules.iter().flatten();
    let request = Request {
        operation: attributes.operation,
        resource: &attributes.request_resource,
        subresource: &attributes.subresource,
        namespaced: !attributes.namespace.is_empty(),
    };
    if excluded
        .into_iter()
        .any(|rule| named_rule_matches(rule, &request, name))
    {
        return Ok(None);
    }
    let rules = resources.resource_rules.as_deref().unwrap_or_default();
    let equivalent = resources.match_policy.as_deref() != Some("Exact");
    Ok(rules::matching(
        rules,
        equivalent,
        attributes,
        |rule, request| named_rule_matches(rule, request, name),
    ))
}
