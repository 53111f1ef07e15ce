use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::Resource;

#[derive(Resource)]
#[resource(
    group = "wardle.example.com",
    version = "v1",
    kind = "Flunder",
    validation(rule = "self.spec.size >"),
    validation(message = "no rule"),
    validation(rule = "self.a == 1", reason = "FieldValueWrong", field_path = "spec.a"),
    validation(rule = "self.a == 1", message_expression = "'a is ' +", optional_old_self)
)]
pub struct Flunder {
    pub metadata: ObjectMeta,
}
fn main() {}
