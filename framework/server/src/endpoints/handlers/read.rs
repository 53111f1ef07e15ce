//! get and list.

use axum::response::Response;
use http::{StatusCode, header};

use super::{Call, require};
use crate::endpoints::negotiation::{Encoding, Endpoint, Shape, negotiate};
use crate::endpoints::response::{respond, respond_list, respond_object, shape_object};
use crate::error::Result;

pub(crate) fn accept(call: &Call) -> Option<&str> {
    call.parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
}

pub(crate) async fn get(call: Call) -> Result<Response> {
    let target = negotiate(accept(&call), Endpoint::Object)?;
    let include = call.query.include_object(target.shape)?;
    let getter = require(&call.resource.storage.getter, &call)?;
    let options = call.query.get_options()?;
    if target.shape == Shape::Object && target.encoding == Encoding::Json {
        // The storage's bytes as they are, when it has them.
        let object = getter
            .get_object(&call.ctx, &call.info.name, &options)
            .await?;
        return respond_object(StatusCode::OK, target, object);
    }
    let object = getter.get(&call.ctx, &call.info.name, &options).await?;
    let body = shape_object(target, object, &call.resource.table, include);
    respond(StatusCode::OK, target, &body)
}

pub(crate) async fn list(call: Call) -> Result<Response> {
    let target = negotiate(accept(&call), Endpoint::List)?;
    let include = call.query.include_object(target.shape)?;
    let lister = require(&call.resource.storage.lister, &call)?;
    let options = call.query.list_options()?;
    let list = lister.list(&call.ctx, &options).await?;
    let info = &call.resource.storage.info;
    respond_list(
        StatusCode::OK,
        target,
        info,
        list,
        &call.resource.table,
        include,
    )
}

pub(crate) use accept as accept_header;
