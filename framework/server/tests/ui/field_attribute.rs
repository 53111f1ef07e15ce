use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(group = "wardle.example.com", version = "v1", kind = "Flunder")]
pub struct Flunder {
    #[resource(namespaced)]
    pub metadata: ObjectMeta,
}
fn main() {}
