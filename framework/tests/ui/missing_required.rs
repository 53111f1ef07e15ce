use apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use apiserver::Resource;

#[derive(Resource)]
#[resource(namespaced)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
