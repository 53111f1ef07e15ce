//! Request info: parses what a request is about once, for every later stage.

use axum::extract::Request;

use crate::endpoints::RequestInfo;

/// The step: stores a [`RequestInfo`] in the request's extensions.
pub fn annotate(request: &mut Request) {
    let info = RequestInfo::parse(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    request.extensions_mut().insert(info);
}
