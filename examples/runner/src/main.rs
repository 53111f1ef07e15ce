//! `runner`: the framework's flags, the runner's, and the server.

use clap::{CommandFactory as _, FromArgMatches as _};
use extension_apiserver::prelude::*;
use runner::{Cli, Runner};

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    let matches = Cli::command()
        .about(env!("CARGO_PKG_DESCRIPTION"))
        .long_about(None)
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let server = APIServer::new(cli.server)
        .aggregator_options(cli.aggregator)
        .openapi_info("runner", env!("CARGO_PKG_VERSION"));
    Runner::new(cli.runner).install(server).run().await
}
