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

/// A [`SchemaFn`] for the resource `T`: its schema with the rules of
/// [`Resource::VALIDATIONS`](crate::runtime::Resource::VALIDATIONS) at its root, where a CRD
/// carries root rules.
pub fn resource_schema_of<T: crate::runtime::Resource>(generator: &mut SchemaGenerator) -> Schema {
    let schema = generator.subschema_for::<T>();
    if T::VALIDATIONS.is_empty() {
        return schema;
    }
    let name = schema
        .get("$ref")
        .and_then(serde_json::Value::as_str)
        .and_then(|r| r.rsplit('/').next())
        .map(str::to_string);
    if let Some(definition) = name.and_then(|n| generator.definitions_mut().get_mut(&n)) {
        super::schema_validation::add_type_rules(definition, T::VALIDATIONS);
        return schema;
    }
    let mut value = schema.to_value();
    super::schema_validation::add_type_rules(&mut value, T::VALIDATIONS);
    Schema::try_from(value).unwrap_or_else(|_| generator.subschema_for::<T>())
}
