use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(group = "wardle.example.com", version = "v1", kind = "Flunder",
           printcolumn(name = "A", json_path = "spec.a", type = "str", format = "int"),
           printcolumn(name = "B", json_path = ".spec.b", priority = "1"),
           printcolumn(name = "C", json_path = ".spec.c", priority = -1),
           printcolumn(name = "D", json_path = ".spec.d", priority = 99999999999))]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
