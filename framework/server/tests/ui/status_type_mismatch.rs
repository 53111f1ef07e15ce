use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct FlunderStatus {}

#[derive(Resource, Clone, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1",
    kind = "Flunder",
    status = "FlunderStatus"
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
    pub status: Option<String>,
}

fn main() {}
