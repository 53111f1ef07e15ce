//! `{{project-name}}`: serves `{{group}}/{{version}}`.

use extension_apiserver::prelude::*;

/// With the feature `mimalloc`, mimalloc serves Rust's allocations instead of glibc's malloc.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("{{kind}}", env!("CARGO_PKG_VERSION"))
        .group({{crate_name}}::api_group())
        .run()
        .await
}
