//! `metrics-adapter`: the framework's flags, the adapter's, and the server.

use clap::{CommandFactory as _, FromArgMatches as _};
use extension_apiserver::core_api::core_client;
use extension_apiserver::prelude::*;
use metrics_adapter::{Adapter, Cli};

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    // The description is set after the derive, as the framework's own `from_args_about` does.
    let matches = Cli::command()
        .about(env!("CARGO_PKG_DESCRIPTION"))
        .long_about(None)
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The same client the framework makes of --kubeconfig (or the pod's service account).
    let core = if cli.aggregator.kubeconfig.is_some() || cli.aggregator.in_cluster {
        core_client(cli.aggregator.kubeconfig.as_deref())
            .await
            .map_err(|e| ServerError::Config(e.to_string()))?
            .map(|(client, _)| client)
    } else {
        None
    };
    let adapter = Adapter::new(cli.adapter, core).map_err(ServerError::Config)?;
    let server = APIServer::new(cli.server)
        .aggregator_options(cli.aggregator)
        .openapi_info("metrics-adapter", env!("CARGO_PKG_VERSION"));
    adapter.install(server).run().await
}
