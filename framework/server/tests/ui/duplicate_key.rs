use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(
    group = "wardle.example.com",
    version = "v1",
    kind = "Flunder",
    namespaced
)]
#[resource(
    group = "other.example.com",
    namespaced,
    printcolumn(name = "A", name = "B", json_path = ".a")
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
