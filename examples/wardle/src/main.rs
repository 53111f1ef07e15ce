//! `wardle`: the sample-apiserver's API served by `apiserver`.

use apiserver::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    apiserver::server::init_logging();
    APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("Wardle", env!("CARGO_PKG_VERSION"))
        .group(wardle::api_group())
        .run()
        .await
}
