use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(group = "wardle.example.com", version = "v1", kind = "Flunder")]
pub struct Flunder {
    pub meta: ObjectMeta,
}
fn main() {}
