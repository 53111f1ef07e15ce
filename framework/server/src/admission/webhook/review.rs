//! The `admission.k8s.io/v1` `AdmissionReview` sent to a webhook and the checks of its answer,
//! as kube's `request/admissionreview.go`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Value, json};

use super::rules::Invocation;
use crate::admission::Attributes;

/// The only AdmissionReview version spoken.
pub(crate) const REVIEW_VERSION: &str = "v1";
const API_VERSION: &str = "admission.k8s.io/v1";

/// The review of `attributes` for an invocation, with the objects in its version.
pub(crate) fn review(
    uid: &str,
    attributes: &Attributes,
    invocation: &Invocation,
    object: Option<&Value>,
    old_object: Option<&Value>,
) -> Value {
    let mut request =
        crate::admission::cel::request(attributes, &invocation.resource, &invocation.kind);
    request["uid"] = json!(uid);
    request["object"] = json!(object);
    request["oldObject"] = json!(old_object);
    json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request})
}

/// What a webhook answered, checked.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    pub(crate) allowed: bool,
    /// `response.status`, for a refusal.
    pub(crate) result: Option<Value>,
    /// The JSON patch, decoded from base64.
    pub(crate) patch: Option<Vec<u8>>,
    pub(crate) patch_type: Option<String>,
    pub(crate) warnings: Vec<String>,
    pub(crate) audit_annotations: BTreeMap<String, String>,
}

/// kube's `VerifyAdmissionResponse`: the answer must be a v1 AdmissionReview with a
/// response for `uid`; only a mutating webhook may patch, and then with a `patchType`.
pub(crate) fn verify(uid: &str, mutating: bool, review: &Value) -> Result<Answer, String> {
    let api_version = review["apiVersion"].as_str().unwrap_or_default();
    let kind = review["kind"].as_str().unwrap_or_default();
    if api_version != API_VERSION || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of {API_VERSION}, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let response = &review["response"];
    if !response.is_object() {
        return Err("webhook response was absent".into());
    }
    let got = response["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let patch = match response["patch"].as_str().filter(|p| !p.is_empty()) {
        Some(b64) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("decoding response.patch: {e}"))?,
        ),
        None => None,
    };
    let patch_type = response["patchType"].as_str().map(str::to_string);
    if mutating {
        match (&patch, &patch_type) {
            (None, Some(_)) => {
                return Err("webhook returned response.patchType but not response.patch".into());
            }
            (Some(_), None) => {
                return Err("webhook returned response.patch but not response.patchType".into());
            }
            _ => {}
        }
    } else if patch.is_some() || patch_type.is_some() {
        return Err("validating webhooks may not return patches".into());
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let audit_annotations = response["auditAnnotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    Ok(Answer {
        allowed: response["allowed"].as_bool().unwrap_or(false),
        result: response.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        patch_type,
        warnings: strings(&response["warnings"]),
        audit_annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(response: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})
    }

    #[test]
    fn answers_kube_refuses() {
        let wrong_uid = verify("a", false, &answer(json!({"uid": "b", "allowed": true})));
        assert_eq!(
            wrong_uid.unwrap_err(),
            r#"expected response.uid="a", got "b""#
        );
        let v1beta1 = json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                             "response": {"uid": "a", "allowed": true}});
        assert_eq!(
            verify("a", false, &v1beta1).unwrap_err(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview"
        );
        let patch = json!({"uid": "a", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"});
        assert_eq!(
            verify("a", false, &answer(patch.clone())).unwrap_err(),
            "validating webhooks may not return patches"
        );
        assert_eq!(
            verify("a", true, &answer(patch)).unwrap().patch.unwrap(),
            b"[]"
        );
        let untyped = json!({"uid": "a", "allowed": true, "patch": "W10="});
        assert!(verify("a", true, &answer(untyped)).is_err());
        assert!(
            verify(
                "a",
                true,
                &json!({"apiVersion": API_VERSION, "kind": "AdmissionReview"})
            )
            .is_err()
        );
    }
}
