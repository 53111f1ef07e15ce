//! A type's schema enforced as a CRD's structural schema, over TLS with kube-rs: value limits
//! from schemars attributes answered with kube-openapi's words in a 422, the
//! `x-kubernetes-validations` rules of the derive and of schemars' `extend` with the CRD's
//! words (message, messageExpression, reason, fieldPath), transition rules, ratcheting of an
//! unchanged invalid value, both published in `/openapi/v2` and `/openapi/v3`; a rule that
//! does not compile stops the server at start, and a type without limits has no validator.

use std::sync::Arc;

use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::prelude::*;
use extension_apiserver::registry::store::Store;
use extension_apiserver::storage::MemoryBackend;
use extension_apiserver_testing::TestServer;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "schema.example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    validation(
        rule = "self.spec.replicas <= self.spec.maxReplicas",
        message = "may not exceed maxReplicas",
        field_path = ".spec.replicas"
    )
)]
pub struct Gadget {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: GadgetSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.name == oldSelf.name", "message": "name is immutable"},
    {"rule": "self.size != 13", "messageExpression": "'size ' + string(self.size) + ' is unlucky'",
     "reason": "FieldValueForbidden"},
]))]
pub struct GadgetSpec {
    #[schemars(range(min = 0, max = 16384))]
    pub replicas: i32,
    pub max_replicas: i32,
    #[schemars(length(max = 8), regex(pattern = r"^[a-z]+$"))]
    pub name: String,
    #[serde(default)]
    pub size: i64,
    #[serde(default)]
    #[schemars(length(max = 2))]
    pub tags: Vec<String>,
}

/// No limits and no rules: no validator, so its writes do no schema work.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "schema.example.com",
    version = "v1",
    kind = "Plain",
    namespaced
)]
pub struct Plain {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PlainSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct PlainSpec {
    pub size: Option<i64>,
    pub count: u32,
    pub small: Option<u8>,
    pub kind: Option<PlainKind>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub enum PlainKind {
    A,
    B,
}

/// A rule that does not compile, which `extend` cannot check at build time.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "broken.example.com",
    version = "v1",
    kind = "Broken",
    namespaced
)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self.spec.size >"}]))]
pub struct Broken {
    #[serde(default)]
    pub metadata: ObjectMeta,
}

fn gadget(name: &str, spec: Value) -> Gadget {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn start() -> TestServer {
    let group = APIGroup::new("schema.example.com")
        .version("v1", |v| v.resource::<Gadget>().resource::<Plain>());
    TestServer::builder().memory().group(group).start().await
}

/// The 422's message, which lists every cause.
fn refused(result: kube::Result<Gadget>) -> String {
    match result {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
            e.message
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[tokio::test]
async fn limits_and_rules_answer_as_a_crd_does() {
    let server = start().await;
    let api: Api<Gadget> = Api::namespaced(server.client(), "default");
    let pp = PostParams::default();

    let bad = gadget(
        "g",
        json!({"replicas": 20000, "maxReplicas": 10, "name": "Bad-Name1", "size": 13,
               "tags": ["a", "b", "c"]}),
    );
    assert_eq!(
        refused(api.create(&pp, &bad).await),
        concat!(
            r#"Gadget.schema.example.com "g" is invalid: ["#,
            "spec.name: Too long: may not be more than 8 bytes, ",
            r#"spec.name: Invalid value: "Bad-Name1": spec.name in body should match '^[a-z]+$', "#,
            "spec.replicas: Invalid value: 20000: spec.replicas in body should be less than or equal to 16384, ",
            "spec.tags: Too many: 3: must have at most 2 items, ",
            // The value of the rule's node (the object) is left out, as kube does.
            "spec.replicas: Invalid value: may not exceed maxReplicas, ",
            "spec: Forbidden: size 13 is unlucky]",
        )
    );

    let good = gadget(
        "g",
        json!({"replicas": 1, "maxReplicas": 10, "name": "gadget"}),
    );
    api.create(&pp, &good)
        .await
        .expect("a valid gadget is created");

    // A transition rule: the name may not change; it did not run on create.
    let rename = json!({"spec": {"name": "other"}});
    let result = api
        .patch("g", &PatchParams::default(), &Patch::Merge(&rename))
        .await;
    assert_eq!(
        refused(result),
        r#"Gadget.schema.example.com "g" is invalid: spec: Invalid value: name is immutable"#
    );
    server.stop().await;
}

#[tokio::test]
async fn an_unchanged_invalid_value_ratchets() {
    let server = start().await;
    let api: Api<Gadget> = Api::namespaced(server.client(), "default");
    // Stored before the limits tightened: written to the backend as an older server would.
    let good = gadget("r", json!({"replicas": 1, "maxReplicas": 10, "name": "ok"}));
    api.create(&PostParams::default(), &good).await.unwrap();
    let mut stored: Value = {
        let kv = server
            .backend()
            .get("/registry/schema.example.com/gadgets/default/r")
            .await
            .unwrap()
            .unwrap();
        serde_json::from_slice(&kv.value).unwrap()
    };
    stored["spec"]["tags"] = json!(["a", "b", "c"]);
    let revision = server
        .backend()
        .get("/registry/schema.example.com/gadgets/default/r")
        .await
        .unwrap()
        .unwrap()
        .mod_revision;
    server
        .backend()
        .update(
            "/registry/schema.example.com/gadgets/default/r",
            serde_json::to_vec(&stored).unwrap().into(),
            revision,
        )
        .await
        .unwrap();

    // Another field changes: the unchanged tags are allowed.
    let patch = json!({"spec": {"replicas": 2}});
    let updated = api
        .patch("r", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("an unchanged invalid value ratchets");
    assert_eq!(updated.spec.tags.len(), 3);
    // Changing them to another invalid value is refused.
    let patch = json!({"spec": {"tags": ["a", "b", "c", "d"]}});
    let result = api
        .patch("r", &PatchParams::default(), &Patch::Merge(&patch))
        .await;
    assert!(
        refused(result).contains("spec.tags: Too many: 4: must have at most 2 items"),
        "the changed value is checked"
    );
    server.stop().await;
}

#[tokio::test]
async fn limits_and_rules_are_published_in_openapi() {
    let server = start().await;
    let client = server.client();
    let get = |path: &str| {
        let request = http::Request::get(path).body(Vec::new()).unwrap();
        let client = client.clone();
        async move { client.request::<Value>(request).await.unwrap() }
    };
    let v2 = get("/openapi/v2").await;
    let v3 = get("/openapi/v3/apis/schema.example.com/v1").await;
    for (definitions, prefix) in [
        (&v2["definitions"], "#/definitions/"),
        (&v3["components"]["schemas"], "#/components/schemas/"),
    ] {
        let (name, gadget) = definitions
            .as_object()
            .unwrap()
            .iter()
            .find(|(k, _)| k.ends_with(".Gadget"))
            .expect("Gadget is published");
        assert_eq!(
            gadget["x-kubernetes-validations"],
            json!([{"rule": "self.spec.replicas <= self.spec.maxReplicas",
                    "message": "may not exceed maxReplicas", "fieldPath": ".spec.replicas"}]),
            "{name}"
        );
        let spec_ref = gadget["properties"]["spec"]["$ref"]
            .as_str()
            .or_else(|| gadget["properties"]["spec"]["allOf"][0]["$ref"].as_str())
            .unwrap();
        let spec = &definitions[spec_ref.strip_prefix(prefix).unwrap()];
        assert_eq!(
            spec["x-kubernetes-validations"][0]["rule"],
            "self.name == oldSelf.name"
        );
        assert_eq!(spec["properties"]["replicas"]["maximum"], 16384);
        assert_eq!(spec["properties"]["name"]["maxLength"], 8);
        assert_eq!(spec["properties"]["name"]["pattern"], "^[a-z]+$");
        assert_eq!(spec["properties"]["tags"]["maxItems"], 2);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_type_without_limits_has_no_validator() {
    let plain = Store::<Plain>::new(Arc::new(MemoryBackend::new()), "/registry");
    assert!(plain.schema_validator().is_none());
    let gadget = Store::<Gadget>::new(Arc::new(MemoryBackend::new()), "/registry");
    assert!(gadget.schema_validator().is_some());
}

#[tokio::test]
async fn a_rule_that_does_not_compile_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let group = APIGroup::new("broken.example.com").version("v1", |v| v.resource::<Broken>());
    let result = APIServer::new(TestServer::options(dir.path()))
        .group(group)
        .start()
        .await;
    let Err(ServerError::Config(message)) = result else {
        panic!("a rule that does not compile must be refused");
    };
    assert!(
        message.starts_with(
            "the schema of Broken: <root>: x-kubernetes-validations[0].rule: compilation failed: ERROR:"
        ),
        "{message}"
    );
    assert!(
        message.ends_with(r#"(rule "self.spec.size >")"#),
        "{message}"
    );
}
