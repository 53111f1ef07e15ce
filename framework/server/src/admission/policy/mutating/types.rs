//! `admissionregistration.k8s.io/v1beta1` `MutatingAdmissionPolicy` and
//! `MutatingAdmissionPolicyBinding`, as the plugin reads them (kube's
//! `staging/src/k8s.io/api/admissionregistration/v1beta1/types.go`). Written here because
//! k8s-openapi declares them only for Kubernetes 1.34 and later, and the library does not pick
//! a k8s-openapi version; the parts shared with the validating policy are its `v1` types,
//! which have the same shape.

use std::borrow::Cow;

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, ParamKind, ParamRef, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The group version of both kinds.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1beta1";

/// A `MutatingAdmissionPolicy`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct MutatingAdmissionPolicy {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its spec.
    #[serde(default)]
    pub spec: Option<MutatingAdmissionPolicySpec>,
}

/// A `MutatingAdmissionPolicy`'s spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicySpec {
    /// The kind of its params.
    pub param_kind: Option<ParamKind>,
    /// The requests it applies to.
    pub match_constraints: Option<MatchResources>,
    /// Named expressions the others may read as `variables.<name>`.
    pub variables: Option<Vec<Variable>>,
    /// The mutations, applied in order.
    pub mutations: Option<Vec<Mutation>>,
    /// `Fail` (the default) or `Ignore`.
    pub failure_policy: Option<String>,
    /// Conditions a request must meet.
    pub match_conditions: Option<Vec<MatchCondition>>,
    /// `Never` or `IfNeeded`.
    pub reinvocation_policy: Option<String>,
}

/// One mutation: `patchType` `ApplyConfiguration` or `JSONPatch`, with its expression.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mutation {
    /// `ApplyConfiguration` or `JSONPatch`.
    pub patch_type: String,
    /// The expression of an `ApplyConfiguration` mutation.
    pub apply_configuration: Option<Expression>,
    /// The expression of a `JSONPatch` mutation.
    #[serde(rename = "jsonPatch")]
    pub json_patch: Option<Expression>,
}

/// A mutation's CEL expression.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Expression {
    /// The expression.
    #[serde(default)]
    pub expression: String,
}

/// A `MutatingAdmissionPolicyBinding`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct MutatingAdmissionPolicyBinding {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its spec.
    #[serde(default)]
    pub spec: Option<MutatingAdmissionPolicyBindingSpec>,
}

/// A `MutatingAdmissionPolicyBinding`'s spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicyBindingSpec {
    /// The policy it binds.
    #[serde(default)]
    pub policy_name: String,
    /// Its params.
    pub param_ref: Option<ParamRef>,
    /// The requests it narrows the policy to.
    pub match_resources: Option<MatchResources>,
}

macro_rules! cluster_resource {
    ($type:ty, $kind:literal, $plural:literal) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = kube::core::ClusterResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("admissionregistration.k8s.io")
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed("v1beta1")
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

cluster_resource!(
    MutatingAdmissionPolicy,
    "MutatingAdmissionPolicy",
    "mutatingadmissionpolicies"
);
cluster_resource!(
    MutatingAdmissionPolicyBinding,
    "MutatingAdmissionPolicyBinding",
    "mutatingadmissionpolicybindings"
);
