//! The Kubernetes API conventions clients rely on (resourceVersion, 409 on stale updates,
//! `Status` shapes, generateName, finalizers, dry run, selectors, pagination, watch, tables),
//! checked against this server by the test kit's suite: one test per convention.

use {{crate_name}}::{ {{kind}}, {{kind}}Spec};

/// A valid {{kind}}; its message differs per name.
fn sample(name: &str) -> {{kind}} {
    {{kind}} {
        spec: {{kind}}Spec {
            replicas: Some(1),
            message: format!("hello {name}"),
        },
        ..Default::default()
    }
}

extension_apiserver_testing::conformance!(
    conventions,
    group: {{crate_name}}::api_group(),
    resource: {{kind}},
    sample: sample,
    // Validation refuses negative replicas: the 422 `Invalid` Status.
    invalid: |name| {
        let mut object = sample(name);
        object.spec.replicas = Some(-1);
        object
    },
);
