//! The subresources of [`registry::subresource`](crate::registry::subresource): query
//! parameters to options, the action's body, admission, and the answer (an object, a
//! chunked stream, or an upgraded connection in [`connect`](super::connect)).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::{HeaderValue, StatusCode, header};
use serde_json::Value;

use super::Call;
use super::admit::admit;
use super::read::accept_header;
use super::write::{content_type, read_body};
use crate::admission::Operation;
use crate::endpoints::negotiation::{Endpoint, body_encoding, negotiate, read_value};
use crate::endpoints::response::respond;
use crate::error::{Error, Result};
use crate::registry::subresource::{ActionVerb, Subresource, SubresourceKind, SubresourceRequest};

/// Serves `sub` at `{plural}/{name}/{subresource}`.
pub(crate) async fn serve(mut call: Call, sub: Subresource) -> Result<Response> {
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(call.parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let options = sub.handler().decode(&pairs)?;
    let request = SubresourceRequest {
        name: call.info.name.clone(),
        namespace: call.ctx.namespace.clone(),
        options,
        ctx: call.ctx.clone(),
    };
    match sub.kind() {
        SubresourceKind::Action => action(&mut call, &sub, request).await,
        SubresourceKind::View => {
            only_get(&call, &sub)?;
            let target = negotiate(accept_header(&call), Endpoint::Object)?;
            let answer = sub.handler().get(request).await?;
            respond(StatusCode::OK, target, &answer)
        }
        SubresourceKind::Stream => {
            only_get(&call, &sub)?;
            let shutdown = call.state.shutdown.clone();
            stream(shutdown, &sub, request).await
        }
        SubresourceKind::Connect => super::connect::connect(call, sub, request).await,
    }
}

fn only_get(call: &Call, sub: &Subresource) -> Result<()> {
    if call.parts.method == http::Method::GET {
        return Ok(());
    }
    let _ = sub;
    Err(Error::method_not_supported(
        &call.resource.storage.info,
        call.info.verb.as_str(),
    ))
}

/// The verb of an action's method, or 405 when it does not answer that method.
fn action_verb(call: &Call, sub: &Subresource) -> Result<ActionVerb> {
    let verb = match call.parts.method {
        http::Method::GET => ActionVerb::Get,
        http::Method::POST => ActionVerb::Create,
        http::Method::PUT => ActionVerb::Update,
        http::Method::DELETE => ActionVerb::Delete,
        _ => None.ok_or_else(Error::method_not_allowed)?,
    };
    if !sub.verbs().contains(&verb.as_str()) {
        return Err(Error::method_not_supported(
            &call.resource.storage.info,
            verb.as_str(),
        ));
    }
    Ok(verb)
}

async fn action(
    call: &mut Call,
    sub: &Subresource,
    request: SubresourceRequest<Value>,
) -> Result<Response> {
    let verb = action_verb(call, sub)?;
    let target = negotiate(accept_header(call), Endpoint::Object)?;
    // An action has no dry run to offer: refused rather than done for real.
    if call.query.write_options()?.dry_run {
        return Err(Error::bad_request(format!(
            "dryRun is not supported by {}/{}",
            call.info.resource, call.info.subresource
        )));
    }
    let mut body = match verb {
        ActionVerb::Create | ActionVerb::Update => read_action_body(call).await?,
        ActionVerb::Get | ActionVerb::Delete => None,
    };
    // As kube's create, update and delete handlers: the verb's operation on the
    // subresource, the body as the object.
    let operation = match verb {
        ActionVerb::Get => None,
        ActionVerb::Create => Some(Operation::Create),
        ActionVerb::Update => Some(Operation::Update),
        ActionVerb::Delete => Some(Operation::Delete),
    };
    if let Some(operation) = operation {
        let options = request.options.clone();
        body = admit(call, sub, operation, options, body).await?;
    }
    let answer = sub.handler().act(verb, request, body).await?;
    let code = match answer.get("code").and_then(Value::as_u64) {
        // A `Status` answer says its own code (kube's eviction: 201).
        Some(code) if answer.get("kind").and_then(Value::as_str) == Some("Status") => {
            StatusCode::from_u16(code as u16).unwrap_or(StatusCode::OK)
        }
        _ if verb == ActionVerb::Create => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    respond(code, target, &answer)
}

async fn read_action_body(call: &mut Call) -> Result<Option<Value>> {
    let encoding = body_encoding(content_type(call))?;
    let bytes = read_body(call).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let (value, _) = read_value(&bytes, encoding)?;
    Ok(Some(value))
}

/// A stream's chunks as a chunked body: hyper polls the stream only when it can write, so
/// nothing is buffered beyond a chunk for a slow reader; the body (and with it the stream)
/// is dropped as soon as the client goes away, and ends at shutdown.
async fn stream(
    shutdown: crate::lifecycle::ShutdownSignal,
    sub: &Subresource,
    request: SubresourceRequest<Value>,
) -> Result<Response> {
    let chunks = sub.handler().stream(request).await?;
    let chunks = chunks.take_until(Box::pin(async move { shutdown.cancelled().await }));
    let body = Body::from_stream(chunks.map(|chunk| chunk.map_err(std::io::Error::other)));
    let mut response = (StatusCode::OK, body).into_response();
    let content_type = HeaderValue::from_static(sub.content_type());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    Ok(response)
}

#[allow(dead_code)]
fn assert_send(call: Call, sub: Subresource) {
    fn is_send<T: Send>(_: T) {}
    is_send(serve(call, sub));
}
