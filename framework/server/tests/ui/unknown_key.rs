use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(
    grup = "wardle.example.com",
    version = "v1",
    kind = "Flunder",
    colour = "blue",
    printcolumn(name = "A", json_path = ".a", width = 3)
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
