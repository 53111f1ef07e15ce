//! One webhook of a `MutatingWebhookConfiguration` or `ValidatingWebhookConfiguration`, read
//! once into the shape both dispatchers use, with the API's defaults for fields left out.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::admission::cel::MatchConditions;

/// kube's `timeoutSeconds` default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// kube refuses larger timeouts at validation; one read from elsewhere is capped.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// A webhook, ready to match and call.
#[derive(Clone, Debug)]
pub(crate) struct Hook {
    /// `webhooks[].name`.
    pub(crate) name: String,
    /// The configuration it belongs to.
    pub(crate) configuration: String,
    pub(crate) rules: Vec<RuleWithOperations>,
    /// `matchPolicy: Equivalent` (the v1 default) rather than `Exact`.
    pub(crate) equivalent: bool,
    pub(crate) namespace_selector: LabelSelector,
    pub(crate) object_selector: LabelSelector,
    pub(crate) side_effects: String,
    pub(crate) timeout: Duration,
    pub(crate) review_versions: Vec<String>,
    /// `failurePolicy: Ignore` (the default is `Fail`).
    pub(crate) ignore_failures: bool,
    pub(crate) client_config: WebhookClientConfig,
    /// `reinvocationPolicy: IfNeeded` (mutating only; the default is `Never`).
    pub(crate) reinvoke_if_needed: bool,
    /// `matchConditions`, compiled once per configuration seen.
    pub(crate) match_conditions: Arc<MatchConditions>,
}

impl Hook {
    fn timeout(seconds: Option<i32>) -> Duration {
        match seconds {
            Some(s) if s > 0 => Duration::from_secs(s as u64).min(MAX_TIMEOUT),
            _ => DEFAULT_TIMEOUT,
        }
    }

    fn mutating(configuration: &str, hook: &MutatingWebhook) -> Self {
        Self {
            name: hook.name.clone(),
            configuration: configuration.into(),
            rules: hook.rules.clone().unwrap_or_default(),
            equivalent: hook.match_policy.as_deref() != Some("Exact"),
            namespace_selector: hook.namespace_selector.clone().unwrap_or_default(),
            object_selector: hook.object_selector.clone().unwrap_or_default(),
            side_effects: hook.side_effects.clone(),
            timeout: Self::timeout(hook.timeout_seconds),
            review_versions: hook.admission_review_versions.clone(),
            ignore_failures: hook.failure_policy.as_deref() == Some("Ignore"),
            client_config: hook.client_config.clone(),
            reinvoke_if_needed: hook.reinvocation_policy.as_deref() == Some("IfNeeded"),
            match_conditions: Arc::new(MatchConditions::compile(
                hook.match_conditions.as_deref().unwrap_or_default(),
            )),
        }
    }

    fn validating(configuration: &str, hook: &ValidatingWebhook) -> Self {
        Self {
            name: hook.name.clone(),
            configuration: configuration.into(),
            rules: hook.rules.clone().unwrap_or_default(),
            equivalent: hook.match_policy.as_deref() != Some("Exact"),
            namespace_selector: hook.namespace_selector.clone().unwrap_or_default(),
            object_selector: hook.object_selector.clone().unwrap_or_default(),
            side_effects: hook.side_effects.clone(),
            timeout: Self::timeout(hook.timeout_seconds),
            review_versions: hook.admission_review_versions.clone(),
            ignore_failures: hook.failure_policy.as_deref() == Some("Ignore"),
            client_config: hook.client_config.clone(),
            reinvoke_if_needed: false,
            match_conditions: Arc::new(MatchConditions::compile(
                hook.match_conditions.as_deref().unwrap_or_default(),
            )),
        }
    }

    /// Whether it may be called for a dry run: `sideEffects` `None` or `NoneOnDryRun`.
    pub(crate) fn dry_run_safe(&self) -> bool {
        matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun")
    }
}

/// The webhooks of `configurations` in the order kube calls them: configurations sorted by
/// name, webhooks in their order.
pub(crate) fn mutating_hooks(mut configurations: Vec<MutatingWebhookConfiguration>) -> Vec<Hook> {
    configurations.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    configurations
        .iter()
        .flat_map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            let hooks = c.webhooks.iter().flatten();
            hooks.map(move |h| Hook::mutating(&name, h))
        })
        .collect()
}

/// [`mutating_hooks`] of validating configurations.
pub(crate) fn validating_hooks(
    mut configurations: Vec<ValidatingWebhookConfiguration>,
) -> Vec<Hook> {
    configurations.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    configurations
        .iter()
        .flat_map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            let hooks = c.webhooks.iter().flatten();
            hooks.map(move |h| Hook::validating(&name, h))
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A webhook with the API's defaults.
    pub(crate) fn hook(name: &str) -> Hook {
        let webhook: ValidatingWebhook = serde_json::from_value(json!({
            "name": name, "clientConfig": {"url": "https://127.0.0.1:1/"},
            "sideEffects": "None", "admissionReviewVersions": ["v1"],
        }))
        .unwrap();
        Hook::validating("configuration", &webhook)
    }

    #[test]
    fn defaults_as_the_api_gives_them() {
        let hook = hook("h");
        assert!(hook.equivalent, "matchPolicy Equivalent");
        assert!(!hook.ignore_failures, "failurePolicy Fail");
        assert_eq!(hook.timeout, DEFAULT_TIMEOUT);
        assert!(!hook.reinvoke_if_needed);
        assert!(hook.dry_run_safe());
        assert_eq!(Hook::timeout(Some(300)), MAX_TIMEOUT);
    }

    #[test]
    fn configurations_by_name_then_webhooks_in_order() {
        let configuration = |name: &str, hooks: &[&str]| -> MutatingWebhookConfiguration {
            let webhooks: Vec<_> = hooks
                .iter()
                .map(|h| {
                    json!({"name": h, "clientConfig": {}, "sideEffects": "None",
                                "admissionReviewVersions": ["v1"]})
                })
                .collect();
            serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": webhooks}))
                .unwrap()
        };
        let hooks = mutating_hooks(vec![
            configuration("b", &["b2", "b1"]),
            configuration("a", &["a1"]),
            configuration("c", &[]),
        ]);
        let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["a1", "b2", "b1"]);
        assert_eq!(hooks[1].configuration, "b");
    }
}
