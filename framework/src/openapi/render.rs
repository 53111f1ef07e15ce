//! Writes path items as Swagger 2.0 or OpenAPI 3.0 JSON, with kube-openapi's layout: shared
//! parameters on the path, `x-kubernetes-action` and `x-kubernetes-group-version-kind` on
//! resource operations, and `401 Unauthorized` on every operation.

use serde_json::{json, Map, Value};

use super::operations::{Body, Operation, PathItem, Reply, OBJECT_TYPES};
use super::params::Param;
use super::schema::Dialect;
use super::OpenApiInfo;

/// A complete Swagger 2.0 document.
pub(crate) fn swagger(
    info: &OpenApiInfo,
    items: &[&PathItem],
    definitions: Map<String, Value>,
) -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": info.title, "version": info.version},
        "paths": paths(items, Dialect::Swagger2),
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": bearer_token()},
        "security": [{"BearerToken": []}],
    })
}

/// A complete OpenAPI 3.0 document.
pub(crate) fn openapi3(
    info: &OpenApiInfo,
    items: &[&PathItem],
    schemas: Map<String, Value>,
) -> Value {
    json!({
        "openapi": "3.0.0",
        "info": {"title": info.title, "version": info.version},
        "paths": paths(items, Dialect::OpenApi3),
        "components": {"schemas": schemas, "securitySchemes": {"BearerToken": bearer_token()}},
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

fn paths(items: &[&PathItem], dialect: Dialect) -> Map<String, Value> {
    items
        .iter()
        .map(|item| (item.path.clone(), path_item(item, dialect)))
        .collect()
}

fn path_item(item: &PathItem, dialect: Dialect) -> Value {
    let mut map = Map::new();
    for op in &item.operations {
        let rendered = match dialect {
            Dialect::Swagger2 => operation_v2(op),
            Dialect::OpenApi3 => operation_v3(op),
        };
        map.insert(op.method.into(), rendered);
    }
    if !item.parameters.is_empty() {
        map.insert("parameters".into(), parameters(&item.parameters, dialect));
    }
    Value::Object(map)
}

fn operation_v2(op: &Operation) -> Value {
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
        "responses": responses(op, Dialect::Swagger2),
    });
    let mut params: Vec<Value> = op.body.iter().map(body_parameter).collect();
    params.extend(
        op.parameters
            .iter()
            .map(|p| parameter(p, Dialect::Swagger2)),
    );
    if !params.is_empty() {
        map["parameters"] = params.into();
    }
    add_extensions(&mut map, op);
    map
}

fn operation_v3(op: &Operation) -> Value {
    let mut map = json!({
        "description": op.description,
        "operationId": op.id,
        "responses": responses(op, Dialect::OpenApi3),
        "tags": [op.tag],
    });
    if !op.parameters.is_empty() {
        map["parameters"] = parameters(&op.parameters, Dialect::OpenApi3);
    }
    if let Some(body) = &op.body {
        map["requestBody"] = request_body(body);
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

fn parameters(params: &[Param], dialect: Dialect) -> Value {
    params.iter().map(|p| parameter(p, dialect)).collect()
}

fn parameter(param: &Param, dialect: Dialect) -> Value {
    let mut map = json!({
        "description": param.description,
        "in": param.location.as_str(),
        "name": param.name,
    });
    match dialect {
        Dialect::Swagger2 => {
            map["type"] = param.type_.into();
            map["uniqueItems"] = true.into();
        }
        Dialect::OpenApi3 => map["schema"] = json!({"type": param.type_, "uniqueItems": true}),
    }
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

fn request_body(body: &Body) -> Value {
    let schema = Dialect::OpenApi3.reference(&body.schema);
    let content: Map<String, Value> = body
        .consumes
        .iter()
        .map(|ct| (ct.to_string(), json!({"schema": schema})))
        .collect();
    let mut map = json!({"content": content});
    if body.required {
        map["required"] = true.into();
    }
    map
}

fn responses(op: &Operation, dialect: Dialect) -> Value {
    let mut map: Map<String, Value> = op
        .responses
        .iter()
        .map(|r| (r.code.to_string(), response(r, op, dialect)))
        .collect();
    map.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(map)
}

fn response(reply: &Reply, op: &Operation, dialect: Dialect) -> Value {
    let schema = dialect.reference(&reply.schema);
    match dialect {
        Dialect::Swagger2 => json!({"description": reply.description, "schema": schema}),
        Dialect::OpenApi3 => {
            let content: Map<String, Value> = op
                .produces
                .iter()
                .map(|mt| (mt.to_string(), json!({"schema": schema})))
                .collect();
            json!({"description": reply.description, "content": content})
        }
    }
}

/// Every definition the operations of `items` name directly.
pub(crate) fn referenced<'a>(items: &'a [&'a PathItem]) -> impl Iterator<Item = &'a str> {
    items
        .iter()
        .flat_map(|item| &item.operations)
        .flat_map(|op| {
            let body = op.body.iter().map(|b| b.schema.as_str());
            body.chain(op.responses.iter().map(|r| r.schema.as_str()))
        })
}
