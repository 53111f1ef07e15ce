use extension_apiserver::{FieldError, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Resource, Clone, Serialize, Deserialize, JsonSchema)]
#[resource(group = "wardle.example.com", version = "v1", kind = "Flunder",
           validate = validate_flunder, defaults = default_flunder)]
pub struct Flunder {
    pub metadata: String,
}

fn validate_flunder(_: &Flunder) -> Result<(), FieldError> {
    Ok(())
}

fn default_flunder(_: &Flunder) {}

fn main() {}
