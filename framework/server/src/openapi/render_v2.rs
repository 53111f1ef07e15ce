//! Writes path items as Swagger 2.0 JSON, with kube-openapi's layout: shared parameters on the
//! path, `x-kubernetes-action` and `x-kubernetes-group-version-kind` on resource operations,
//! and `401 Unauthorized` on every operation. (OpenAPI 3.0: `render_v3.rs`, through
//! `openapiv3`'s types; `openapiv3` has no Swagger 2.0 model.)

use serde_json::{Map, Value, json};

use super::OpenAPIInfo;
use super::operations::{Body, OBJECT_TYPES, Operation, PathItem, Reply};
use super::params::Param;
use super::schema::Dialect;

/// A complete Swagger 2.0 document.
pub(crate) fn swagger(
    info: &OpenAPIInfo,
    items: &[&PathItem],
    definitions: Map<String, Value>,
) -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": info.title, "version": info.version},
        "paths": paths(items),
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": bearer_token()},
        "security": [{"BearerToken": []}],
    })
}

fn bearer_token() -> Value {
    json!({
        "description": "Bearer Token authentication",
        "in": "header",
        "name": "authorization",
        "type": "apiKey",
    })
}

fn paths(items: &[&PathItem]) -> Map<String, Value> {
    items
        .iter()
        .map(|item| (item.path.clone(), path_item(item)))
        .collect()
}

fn path_item(item: &PathItem) -> Value {
    let mut map = Map::new();
    for op in &item.operations {
        map.insert(op.method.into(), operation(op));
    }
    if !item.parameters.is_empty() {
        let parameters = item.parameters.iter().map(parameter).collect();
        map.insert("parameters".into(), parameters);
    }
    Value::Object(map)
}

fn operation(op: &Operation) -> Value {
    // Resource routes accept any body type at the HTTP layer (go-restful's `*/*`), discovery
    // routes the types they produce.
    let consumes: &[&str] = match (&op.body, &op.resource) {
        (Some(body), _) => &body.consumes,
        (None, Some(_)) => &["*/*"],
        (None, None) => OBJECT_TYPES,
    };
    let mut map = json!({
        "description": op.description,
        "consumes": consumes,
        "produces": op.produces,
        "schemes": ["https"],
        "tags": [op.tag],
        "operationId": op.id,
        "responses": responses(op),
    });
    let mut params: Vec<Value> = op.body.iter().map(body_parameter).collect();
    params.extend(op.parameters.iter().map(parameter));
    if !params.is_empty() {
        map["parameters"] = params.into();
    }
    add_extensions(&mut map, op);
    map
}

fn add_extensions(map: &mut Value, op: &Operation) {
    if let Some((action, info)) = &op.resource {
        map["x-kubernetes-action"] = (*action).into();
        map["x-kubernetes-group-version-kind"] =
            json!({"group": info.group, "kind": info.kind, "version": info.version});
    }
}

fn parameter(param: &Param) -> Value {
    let mut map = json!({
        "description": param.description,
        "in": param.location.as_str(),
        "name": param.name,
        "type": param.type_,
        "uniqueItems": true,
    });
    if param.location.required() {
        map["required"] = true.into();
    }
    map
}

fn body_parameter(body: &Body) -> Value {
    let mut map = json!({
        "in": "body",
        "name": "body",
        "schema": Dialect::Swagger2.reference(&body.schema),
    });
    if body.required {
        map["required"] = true.into();
    }
    map
}

fn responses(op: &Operation) -> Value {
    let mut map: Map<String, Value> = op
        .responses
        .iter()
        .map(|r| (r.code.to_string(), response(r)))
        .collect();
    map.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(map)
}

fn response(reply: &Reply) -> Value {
    let schema = Dialect::Swagger2.reference(&reply.schema);
    json!({"description": reply.description, "schema": schema})
}
