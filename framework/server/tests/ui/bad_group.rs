use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(group = "Wardle_Example.com", version = "v1", kind = "Flunder")]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
