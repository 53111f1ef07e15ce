//! The `{{group}}/{{version}}` API: the {% if namespaced %}namespaced{% else %}cluster-scoped{% endif %} kind `{{kind}}`.
//!
//! `#[derive(Resource)]` makes the type a Kubernetes kind: its plural (from the kind, as
//! kubebuilder forms it), discovery, OpenAPI, `kubectl get` columns, the `status`
//! subresource and storage all come from the `#[resource(...)]` attribute.

use extension_apiserver::prelude::*;

/// The API group.
pub const GROUP: &str = "{{group}}";

/// The API version.
pub const VERSION: &str = "{{version}}";

/// The largest `spec.replicas` accepted.
pub const MAX_REPLICAS: i32 = 100;

/// A {{kind}}: what a user asks for in `spec`, what the server (or a controller) saw in
/// `status`.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "{{group}}",
    version = "{{version}}",
    kind = "{{kind}}",
{%- if namespaced %}
    namespaced,
{%- endif %}
    status = "{{kind}}Status",
    shortnames = ["{{shortname}}"],
    printcolumn(name = "Replicas", type = "integer", json_path = ".spec.replicas",
                description = "How many are wanted"),
    printcolumn(name = "Phase", type = "string", json_path = ".status.phase",
                description = "What the server last saw"),
    printcolumn(name = "Message", type = "string", json_path = ".spec.message", priority = 1,
                description = "A free-form message (kubectl get -o wide)"),
    defaults = set_defaults,
    validate = validate
)]
pub struct {{kind}} {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    #[serde(default)]
    pub spec: {{kind}}Spec,
    /// The observed state: written only through the `status` subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<{{kind}}Status>,
}

/// The desired state of a {{kind}}.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Spec {
    /// How many are wanted: 0 to 100, 1 when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// A free-form message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The observed state of a {{kind}}.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Status {
    /// `Pending`, `Ready`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// Defaulting, on every create and update before validation. For hooks that need the
/// request (the user, dry run), warnings or canonicalization, write `impl Strategy for
/// {{kind}}` yourself and say `custom_strategy` in `#[resource(...)]`.
fn set_defaults(object: &mut {{kind}}) {
    object.spec.replicas.get_or_insert(1);
}

/// Validation: each error is one cause of the 422 `Invalid` answer kubectl prints.
fn validate(object: &{{kind}}) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(replicas) = object.spec.replicas {
        if replicas < 0 {
            errors.push(FieldError::invalid(
                "spec.replicas",
                replicas,
                "must be greater than or equal to 0",
            ));
        } else if replicas > MAX_REPLICAS {
            errors.push(FieldError::invalid(
                "spec.replicas",
                replicas,
                &format!("must be less than or equal to {MAX_REPLICAS}"),
            ));
        }
    }
    errors
}

/// The `{{group}}` group with its one version: what `main` serves and the tests start.
pub fn api_group() -> APIGroup {
    APIGroup::new(GROUP).version(VERSION, |v| v.resource::<{{kind}}>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_replicas(replicas: Option<i32>) -> {{kind}} {
        {{kind}} {
            spec: {{kind}}Spec {
                replicas,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn names_and_scope() {
        let info = {{kind}}::INFO;
        assert_eq!(info.api_version(), "{{group}}/{{version}}");
        assert_eq!(info.kind, "{{kind}}");
        assert_eq!(info.singular, "{{kind | downcase}}");
        assert_eq!(info.short_names, ["{{shortname}}"]);
        assert_eq!(
            info.scope,
            Scope::{% if namespaced %}Namespaced{% else %}Cluster{% endif %}
        );
        assert!(info.status, "has a status subresource");
    }

    #[test]
    fn replicas_default_to_one() {
        let mut object = with_replicas(None);
        object.default_fields();
        assert_eq!(object.spec.replicas, Some(1));

        let mut object = with_replicas(Some(0));
        object.default_fields();
        assert_eq!(object.spec.replicas, Some(0), "an explicit value is kept");
    }

    #[test]
    fn replicas_are_validated() {
        assert!(validate(&with_replicas(Some(3))).is_empty());
        for bad in [-1, MAX_REPLICAS + 1] {
            let errors = validate(&with_replicas(Some(bad)));
            assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
            assert_eq!(errors[0].field, "spec.replicas");
        }
    }
}
