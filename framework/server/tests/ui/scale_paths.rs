use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(
    group = "wardle.example.com",
    version = "v1",
    kind = "Flunder",
    scale(spec_replicas_path = ".status.replicas", label_selector_path = "status.selector")
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}

#[derive(Resource)]
#[resource(
    group = "wardle.example.com",
    version = "v1",
    kind = "Fischer",
    scale(spec_replicas_path = ".spec.items[0]", status_replicas_path = ".status.replicas", replicas = 3)
)]
pub struct Fischer {
    pub metadata: ObjectMeta,
}
fn main() {}
