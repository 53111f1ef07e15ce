//! `wardle`: the sample-apiserver's API served by `apiserver`.

use apiserver::ApiServer;

#[tokio::main]
async fn main() {
    apiserver::server::init_logging();
    let served = ApiServer::from_args()
        .openapi_info("Wardle", env!("CARGO_PKG_VERSION"))
        .group(wardle::api_group())
        .run()
        .await;
    if let Err(e) = served {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
