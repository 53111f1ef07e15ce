use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(group = 1, version = "v1", kind = "Flunder", namespaced = true, shortnames = "fl",
           categories = ["all", 2], validate = "validate_flunder", printcolumn = "Reference",
           selectable_field = "spec.reference", selectable_field = ".spec.", crate = "not a path",
           status = "Not A Type")]
pub struct Flunder {
    pub metadata: ObjectMeta,
    pub status: Option<String>,
}
fn main() {}
