//! The policy: which level and stages a request gets, as kube's `policy.Checker`: the first
//! rule that matches wins; no rule matching means `None`.

use std::path::Path;

use super::AuditError;
use super::types::{API_VERSION, Level, Policy, PolicyRule, Stage};

/// What the policy checks a request by (kube's `authorizer.Attributes`).
#[derive(Clone, Debug, Default)]
pub struct Attributes<'a> {
    /// The user's name (empty when unauthenticated).
    pub user: &'a str,
    /// The user's groups.
    pub groups: &'a [String],
    /// The verb.
    pub verb: &'a str,
    /// Whether it is a resource request.
    pub resource_request: bool,
    /// The API group.
    pub api_group: &'a str,
    /// The resource (plural).
    pub resource: &'a str,
    /// The subresource.
    pub subresource: &'a str,
    /// The namespace.
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The path (non-resource requests).
    pub path: &'a str,
}

/// What the policy decided for one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestAuditConfig {
    /// The level.
    pub level: Level,
    /// Stages not written: the policy's and the rule's.
    pub omit_stages: Vec<Stage>,
    /// Whether `metadata.managedFields` is dropped from the bodies.
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Reads and checks a policy file (YAML or JSON).
    pub fn load(path: &Path) -> Result<Self, AuditError> {
        let invalid = |reason: String| AuditError::Policy {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| invalid(e.to_string()))?;
        let policy: Policy = serde_norway::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        policy.validate().map_err(|e| invalid(e.to_string()))?;
        Ok(policy)
    }

    /// kube's checks: `audit.k8s.io/v1` `Policy`, at least one rule, rules naming either
    /// resources or non-resource URLs.
    pub fn validate(&self) -> Result<(), PolicyError> {
        self.check().map_err(PolicyError)
    }

    fn check(&self) -> Result<(), String> {
        if self.api_version != API_VERSION || self.kind != "Policy" {
            return Err(format!(
                "expected apiVersion {API_VERSION} and kind Policy, got {:?} {:?}",
                self.api_version, self.kind
            ));
        }
        if self.rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let resource_side = !rule.resources.is_empty() || !rule.namespaces.is_empty();
            if resource_side && !rule.non_resource_urls.is_empty() {
                return Err(format!(
                    "rules[{i}]: rules cannot apply to both regular resources and non-resource URLs"
                ));
            }
            for url in &rule.non_resource_urls {
                if url.trim_end_matches('*').contains('*') {
                    return Err(format!(
                        "rules[{i}].nonResourceURLs: {url:?}: '*' is only allowed at the end"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The level and stages of a request: the first matching rule's, or `None`.
    pub fn evaluate(&self, attributes: &Attributes<'_>) -> RequestAuditConfig {
        match self.rules.iter().find(|r| rule_matches(r, attributes)) {
            Some(rule) => {
                let mut omit_stages = self.omit_stages.clone();
                omit_stages.extend(rule.omit_stages.iter().copied());
                omit_stages.dedup();
                RequestAuditConfig {
                    level: rule.level,
                    omit_stages,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                }
            }
            None => RequestAuditConfig {
                level: Level::None,
                omit_stages: self.omit_stages.clone(),
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

fn has(list: &[String], s: &str) -> bool {
    list.iter().any(|x| x == s)
}

fn rule_matches(rule: &PolicyRule, a: &Attributes<'_>) -> bool {
    if !rule.users.is_empty() && !has(&rule.users, a.user) {
        return false;
    }
    if !rule.user_groups.is_empty() && !a.groups.iter().any(|g| has(&rule.user_groups, g)) {
        return false;
    }
    if !rule.verbs.is_empty() && !has(&rule.verbs, a.verb) {
        return false;
    }
    if !rule.namespaces.is_empty() || !rule.resources.is_empty() {
        return matches_resource(rule, a);
    }
    if !rule.non_resource_urls.is_empty() {
        return !a.resource_request
            && rule
                .non_resource_urls
                .iter()
                .any(|u| path_matches(a.path, u));
    }
    true
}

fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || (spec.ends_with('*') && path.starts_with(spec.trim_end_matches('*')))
}

fn matches_resource(rule: &PolicyRule, a: &Attributes<'_>) -> bool {
    if !a.resource_request {
        return false;
    }
    // Cluster-scoped resources have the namespace "".
    if !rule.namespaces.is_empty() && !has(&rule.namespaces, a.namespace) {
        return false;
    }
    if rule.resources.is_empty() {
        return true;
    }
    let combined = if a.subresource.is_empty() {
        a.resource.to_string()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    rule.resources
        .iter()
        .filter(|gr| gr.group == a.api_group)
        .any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !has(&gr.resource_names, a.name) {
                return false;
            }
            gr.resources.iter().any(|res| {
                res == &combined
                    || res == "*"
                    || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource))
                    || res.strip_suffix("/*") == Some(a.resource)
            })
        })
}

/// Why an audit policy was refused (kube's validation of `audit.k8s.io/v1` `Policy`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(String);

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: None
  userGroups: ["system:nodes"]
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["pods/log", "*/scale"]
- level: Request
  namespaces: ["kube-system"]
  resources:
  - group: "apps"
    resources: ["deployments/*"]
    resourceNames: ["web"]
  omitStages: [ResponseStarted]
- level: Metadata
  omitManagedFields: true
"#;

    fn policy() -> Policy {
        let policy: Policy = serde_norway::from_str(POLICY).unwrap();
        policy.validate().unwrap();
        policy
    }

    fn resource<'a>(
        group: &'a str,
        resource: &'a str,
        sub: &'a str,
        ns: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            user: "alice",
            verb: "get",
            resource_request: true,
            api_group: group,
            resource,
            subresource: sub,
            namespace: ns,
            name: "web",
            ..Attributes::default()
        }
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let p = policy();
        let proxy = Attributes {
            user: "system:kube-proxy",
            verb: "watch",
            ..resource("", "pods", "", "default")
        };
        assert_eq!(p.evaluate(&proxy).level, Level::None);
        let node_groups = ["system:nodes".to_string()];
        let health = Attributes {
            groups: &node_groups,
            path: "/healthz/ready",
            ..Attributes::default()
        };
        assert_eq!(p.evaluate(&health).level, Level::None);
        // Resources and subresources in all their forms.
        let log = resource("", "pods", "log", "default");
        assert_eq!(p.evaluate(&log).level, Level::RequestResponse);
        let scale = resource("", "replicationcontrollers", "scale", "x");
        assert_eq!(p.evaluate(&scale).level, Level::RequestResponse);
        let status = resource("apps", "deployments", "status", "kube-system");
        let config = p.evaluate(&status);
        assert_eq!(config.level, Level::Request);
        assert_eq!(
            config.omit_stages,
            [Stage::RequestReceived, Stage::ResponseStarted]
        );
        // Another namespace, or another name, falls through to the catch-all.
        let elsewhere = resource("apps", "deployments", "status", "default");
        let config = p.evaluate(&elsewhere);
        assert_eq!(config.level, Level::Metadata);
        assert!(config.omit_managed_fields);
        assert_eq!(config.omit_stages, [Stage::RequestReceived]);
        let other = Attributes {
            name: "db",
            ..status
        };
        assert_eq!(p.evaluate(&other).level, Level::Metadata);
        // The non-resource rule does not match a resource request, nor another group's user.
        let nodes_reading = Attributes {
            groups: &node_groups,
            ..log
        };
        assert_eq!(p.evaluate(&nodes_reading).level, Level::RequestResponse);
        let version = Attributes {
            path: "/version",
            ..Attributes::default()
        };
        assert_eq!(p.evaluate(&version).level, Level::Metadata);
    }

    #[test]
    fn no_matching_rule_is_level_none() {
        let mut p = policy();
        p.rules.pop();
        let config = p.evaluate(&resource("x", "y", "", "z"));
        assert_eq!(config.level, Level::None);
    }

    #[test]
    fn bad_policies_are_refused() {
        let mut p = policy();
        p.rules.clear();
        assert!(p.validate().is_err());
        let mut p = policy();
        p.api_version = "audit.k8s.io/v2".into();
        assert!(p.validate().is_err());
        let mut p = policy();
        p.rules[1].namespaces = vec!["x".into()];
        assert!(p.validate().is_err());
        assert!(serde_norway::from_str::<Policy>("rules: [{level: Everything}]").is_err());
    }
}
