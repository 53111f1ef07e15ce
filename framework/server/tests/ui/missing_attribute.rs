use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
