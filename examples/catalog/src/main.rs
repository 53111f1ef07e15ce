//! `catalog`: books, stored, and authors, computed from the books.

use extension_apiserver::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("Catalog", env!("CARGO_PKG_VERSION"))
        .group(catalog::api_group())
        .run()
        .await
}
