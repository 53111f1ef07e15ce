//! How the registry names a type's JSON schema without naming the type: for OpenAPI, from
//! the served kinds, their subresources' options, bodies and answers.

use schemars::{Schema, SchemaGenerator};

/// Produces the JSON schema of a resource's type, registering the types it refers to in the
/// generator's definitions. See [`schema_of`].
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// A [`SchemaFn`] for `T`.
pub fn schema_of<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}
