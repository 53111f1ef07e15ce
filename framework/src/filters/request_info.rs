//! Request info: parses what a request is about once, for every later stage.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::endpoints::RequestInfo;

/// The middleware: stores a [`RequestInfo`] in the request's extensions.
pub async fn request_info(mut request: Request, next: Next) -> Response {
    let info = RequestInfo::parse(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    request.extensions_mut().insert(info);
    next.run(request).await
}
