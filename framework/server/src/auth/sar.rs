//! Authorization through `SubjectAccessReview` on the core kube-apiserver
//! (`k8s.io/apiserver`'s `plugin/pkg/authorizer/webhook` as the delegating authorizer uses it).
//!
//! The review's spec is what kube-apiserver builds from a request: user, UID, groups and
//! extras, and `resourceAttributes` (namespace, verb, group, version, resource, subresource,
//! name) for resource requests or `nonResourceAttributes` (path, verb) for others. Answers are
//! cached under a digest of that spec: allowed ones for
//! `--authorization-webhook-cache-authorized-ttl`, others for
//! `--authorization-webhook-cache-unauthorized-ttl`; concurrent identical requests share one
//! review. A failed call is an error (no opinion;
//! the filter answers 500 as Go's does), never cached.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::token_webhook::create;
use super::ttl_cache::{Flights, TtlCache};
use super::{Attributes, AuthError, Authorization, Authorizer, Decision};

const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Asks the core kube-apiserver with `SubjectAccessReview`s.
pub struct SubjectAccessReviewAuthorizer {
    client: kube::Client,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: TtlCache<Authorization>,
    flights: Flights<Result<Authorization, AuthError>>,
}

impl std::fmt::Debug for SubjectAccessReviewAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectAccessReviewAuthorizer")
            .field("authorized_ttl", &self.authorized_ttl)
            .field("unauthorized_ttl", &self.unauthorized_ttl)
            .finish_non_exhaustive()
    }
}

/// The `spec` of the `SubjectAccessReview` for `attributes`, with Go's `omitempty` fields.
pub fn review_spec(attributes: &Attributes<'_>) -> Value {
    let mut spec = Map::new();
    let user = attributes.user;
    let put = |map: &mut Map<String, Value>, key: &str, value: &str| {
        if !value.is_empty() {
            map.insert(key.into(), Value::String(value.into()));
        }
    };
    put(&mut spec, "user", &user.name);
    put(&mut spec, "uid", &user.uid);
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
    if attributes.resource_request {
        let mut resource = Map::new();
        put(&mut resource, "namespace", attributes.namespace);
        put(&mut resource, "verb", attributes.verb);
        put(&mut resource, "group", attributes.api_group);
        put(&mut resource, "version", attributes.api_version);
        put(&mut resource, "resource", attributes.resource);
        put(&mut resource, "subresource", attributes.subresource);
        put(&mut resource, "name", attributes.name);
        spec.insert("resourceAttributes".into(), Value::Object(resource));
    } else {
        let mut non_resource = Map::new();
        put(&mut non_resource, "path", attributes.path);
        put(&mut non_resource, "verb", attributes.verb);
        spec.insert("nonResourceAttributes".into(), Value::Object(non_resource));
    }
    Value::Object(spec)
}

impl SubjectAccessReviewAuthorizer {
    /// An authorizer asking the kube-apiserver behind `client`.
    pub fn new(client: kube::Client, authorized_ttl: Duration, unauthorized_ttl: Duration) -> Self {
        Self {
            client,
            authorized_ttl,
            unauthorized_ttl,
            cache: TtlCache::new(),
            flights: Flights::default(),
        }
    }
}

#[async_trait]
impl Authorizer for SubjectAccessReviewAuthorizer {
    async fn authorize(&self, attributes: &Attributes<'_>) -> Result<Authorization, AuthError> {
        let spec = review_spec(attributes);
        let spec_bytes = serde_json::to_vec(&spec).unwrap_or_default();
        let key = TtlCache::<()>::key([spec_bytes.as_slice()]);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        });
        let client = self.client.clone();
        let call = || async move {
            let answer = create(&client, SUBJECT_ACCESS_REVIEWS, &review)
                .await
                .map_err(|e| AuthError::Unavailable(format!("SubjectAccessReview: {e}")))?;
            verdict(&answer)
        };
        let remember = |verdict: &Result<Authorization, AuthError>| {
            if let Ok(verdict) = verdict {
                let ttl = if verdict.decision == Decision::Allow {
                    self.authorized_ttl
                } else {
                    self.unauthorized_ttl
                };
                self.cache.insert(key, verdict.clone(), ttl);
            }
        };
        self.flights.run(key, call, remember).await
    }
}

/// What a `SubjectAccessReview` answer decides, as k8s.io/apiserver's webhook authorizer
/// reads it (both allowed and denied is an error).
fn verdict(answer: &Value) -> Result<Authorization, AuthError> {
    let status = &answer["status"];
    let allowed = status["allowed"].as_bool().unwrap_or(false);
    let denied = status["denied"].as_bool().unwrap_or(false);
    let reason = status["reason"].as_str().unwrap_or("").to_string();
    if allowed && denied {
        return Err(AuthError::Unavailable(
            "webhook subject access review returned both allow and deny response".into(),
        ));
    }
    let decision = match (allowed, denied) {
        (true, _) => Decision::Allow,
        (_, true) => Decision::Deny,
        _ => Decision::NoOpinion,
    };
    Ok(Authorization::new(decision, reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;

    #[test]
    fn specs_as_kube_apiserver_builds_them() {
        let mut user = UserInfo::new("jane", ["devs".to_string()]).with_authenticated_group();
        user.uid = "u-1".into();
        user.extra.insert("scopes".into(), vec!["a".into()]);
        let attributes = Attributes {
            user: &user,
            verb: "list",
            resource_request: true,
            api_group: "wardle.example.com",
            api_version: "v1alpha1",
            resource: "flunders",
            subresource: "",
            namespace: "ns1",
            name: "",
            path: "/apis/wardle.example.com/v1alpha1/namespaces/ns1/flunders",
        };
        assert_eq!(
            review_spec(&attributes),
            json!({
                "user": "jane", "uid": "u-1", "groups": ["devs", "system:authenticated"],
                "extra": {"scopes": ["a"]},
                "resourceAttributes": {"namespace": "ns1", "verb": "list",
                    "group": "wardle.example.com", "version": "v1alpha1", "resource": "flunders"},
            })
        );
        let healthz = Attributes {
            verb: "get",
            resource_request: false,
            api_group: "",
            api_version: "",
            resource: "",
            namespace: "",
            path: "/healthz/etcd",
            ..attributes
        };
        assert_eq!(
            review_spec(&healthz)["nonResourceAttributes"],
            json!({"path": "/healthz/etcd", "verb": "get"})
        );
    }
}
