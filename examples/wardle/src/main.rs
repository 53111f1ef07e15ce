//! `wardle`: the sample-apiserver's API served by extension-apiserver.

use extension_apiserver::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    let server = APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("Wardle", env!("CARGO_PKG_VERSION"));
    wardle::configure(server).run().await
}
