//! `{{project-name}}`: serves `{{group}}/{{version}}`.

use extension_apiserver::prelude::*;

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("{{kind}}", env!("CARGO_PKG_VERSION"))
        .group({{crate_name}}::api_group())
        .run()
        .await
}
