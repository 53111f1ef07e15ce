use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(
    group = "wardle.example.com",
    version = "v1",
    kind = "Flunder",
    printcolumn(type = "string"),
    printcolumn(name = "", json_path = ".spec.x")
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
