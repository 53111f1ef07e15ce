use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(group = "Wardle", version = "1", kind = "flunder", scope = "Namespaced",
           status = "FlunderStatus", plural = "Flunders", shortnames = ["FL"],
           printcolumn(name = "Reference", json_path = "spec.reference", type = "text"))]
pub struct Flunder {
    pub spec: String,
}
fn main() {}
