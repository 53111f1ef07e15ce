use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::{FieldError, Resource};

#[derive(Resource, Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[resource(group = "wardle.example.com", version = "v1alpha1", kind = "Flunder",
           custom_strategy, validate = validate_flunder, allow_create_on_update)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}

fn validate_flunder(_: &Flunder) -> Vec<FieldError> {
    Vec::new()
}

fn main() {}
