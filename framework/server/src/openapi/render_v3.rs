//! Writes an OpenAPI 3.0 document through `openapiv3`'s types, with kube-openapi's layout:
//! parameters shared by a path's operations on the path, `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind` on resource operations, and `401 Unauthorized` on every
//! operation. Schemas come from the catalog as JSON and are read into `openapiv3::Schema`.

use openapiv3::{
    APIKeyLocation, AnySchema, Components, Info, MediaType, OpenAPI, Parameter, ParameterData,
    ParameterSchemaOrContent, PathItem as ItemV3, Paths, ReferenceOr, RequestBody, Response,
    Responses, Schema, SchemaData, SchemaKind, SecurityScheme, StatusCode,
};
use serde_json::{Map, Value};

use super::OpenAPIInfo;
use super::operations::{Body, Operation, PathItem, Reply};
use super::params::{Location, Param};

/// A complete OpenAPI 3.0 document. `schemas` are the catalog's definitions in the 3.0
/// dialect; one that `openapiv3` cannot read is a bug in the catalog, not in the request.
pub(crate) fn openapi3(
    info: &OpenAPIInfo,
    items: &[&PathItem],
    schemas: Map<String, Value>,
) -> OpenAPI {
    let schemas = schemas
        .into_iter()
        .map(|(name, schema)| {
            let typed = serde_json::from_value(schema)
                .unwrap_or_else(|e| panic!("definition {name} is no OpenAPI 3.0 schema: {e}"));
            (name, typed)
        })
        .collect();
    let bearer = SecurityScheme::APIKey {
        location: APIKeyLocation::Header,
        name: "authorization".into(),
        description: Some("Bearer Token authentication".into()),
        extensions: Default::default(),
    };
    OpenAPI {
        openapi: "3.0.0".into(),
        info: Info {
            title: info.title.clone(),
            version: info.version.clone(),
            ..Default::default()
        },
        paths: Paths {
            paths: items
                .iter()
                .map(|item| (item.path.clone(), ReferenceOr::Item(path_item(item))))
                .collect(),
            ..Default::default()
        },
        components: Some(Components {
            schemas,
            security_schemes: [("BearerToken".to_string(), ReferenceOr::Item(bearer))]
                .into_iter()
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn path_item(item: &PathItem) -> ItemV3 {
    let mut typed = ItemV3 {
        parameters: item.parameters.iter().map(parameter).collect(),
        ..Default::default()
    };
    for op in &item.operations {
        let rendered = Some(operation(op));
        match op.method {
            "get" => typed.get = rendered,
            "put" => typed.put = rendered,
            "post" => typed.post = rendered,
            "patch" => typed.patch = rendered,
            "delete" => typed.delete = rendered,
            other => unreachable!("no operation is served with method {other}"),
        }
    }
    typed
}

fn operation(op: &Operation) -> openapiv3::Operation {
    let mut extensions = indexmap::IndexMap::new();
    if let Some((action, info)) = &op.resource {
        extensions.insert("x-kubernetes-action".into(), Value::from(*action));
        let gvk =
            serde_json::json!({"group": info.group, "kind": info.kind, "version": info.version});
        extensions.insert("x-kubernetes-group-version-kind".into(), gvk);
    }
    openapiv3::Operation {
        description: Some(op.description.clone()),
        operation_id: Some(op.id.clone()),
        tags: vec![op.tag.clone()],
        parameters: op.parameters.iter().map(parameter).collect(),
        request_body: op.body.as_ref().map(|b| ReferenceOr::Item(request_body(b))),
        responses: responses(op),
        extensions,
        ..Default::default()
    }
}

fn parameter(param: &Param) -> ReferenceOr<Parameter> {
    // kube-openapi writes `uniqueItems` on every parameter's schema, whatever its type.
    let schema = Schema {
        schema_data: SchemaData::default(),
        schema_kind: SchemaKind::Any(AnySchema {
            typ: Some(param.type_.to_string()),
            unique_items: Some(true),
            ..Default::default()
        }),
    };
    let data = ParameterData {
        name: param.name.to_string(),
        description: Some(param.description.clone()),
        required: param.location.required(),
        deprecated: None,
        format: ParameterSchemaOrContent::Schema(ReferenceOr::Item(schema)),
        example: None,
        examples: Default::default(),
        explode: None,
        extensions: Default::default(),
    };
    ReferenceOr::Item(match param.location {
        Location::Path => Parameter::Path {
            parameter_data: data,
            style: Default::default(),
        },
        Location::Query => Parameter::Query {
            parameter_data: data,
            allow_reserved: false,
            style: Default::default(),
            allow_empty_value: None,
        },
    })
}

fn reference(name: &str) -> ReferenceOr<Schema> {
    if let Some(type_) = super::schema::inline_type(name) {
        let schema = serde_json::from_value(serde_json::json!({ "type": type_ }))
            .expect("a schema of one type");
        return ReferenceOr::Item(schema);
    }
    ReferenceOr::Reference {
        reference: format!("#/components/schemas/{name}"),
    }
}

fn content(types: &[&'static str], schema: &str) -> indexmap::IndexMap<String, MediaType> {
    types
        .iter()
        .map(|media_type| {
            let media = MediaType {
                schema: Some(reference(schema)),
                ..Default::default()
            };
            (media_type.to_string(), media)
        })
        .collect()
}

fn request_body(body: &Body) -> RequestBody {
    RequestBody {
        content: content(&body.consumes, &body.schema),
        required: body.required,
        ..Default::default()
    }
}

fn responses(op: &Operation) -> Responses {
    let mut responses: indexmap::IndexMap<StatusCode, ReferenceOr<Response>> = op
        .responses
        .iter()
        .map(|r| (StatusCode::Code(r.code), ReferenceOr::Item(response(r, op))))
        .collect();
    let unauthorized = Response {
        description: "Unauthorized".into(),
        ..Default::default()
    };
    responses.insert(StatusCode::Code(401), ReferenceOr::Item(unauthorized));
    Responses {
        responses,
        ..Default::default()
    }
}

fn response(reply: &Reply, op: &Operation) -> Response {
    Response {
        description: reply.description.to_string(),
        content: content(op.produces, &reply.schema),
        ..Default::default()
    }
}
