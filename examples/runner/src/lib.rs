//! `runner`: an aggregated API server that runs commands on its own host. A `Run`
//! (`runner.example.com/v1alpha1`) names a program of the `--allow-command` list and its
//! arguments; the server starts its process, keeps its output, and writes its status
//! (`Pending`, `Running`, then `Succeeded`, `Failed` or `Cancelled`, with the exit code).
//!
//! Its subresources are those a pod's process has: `log` (pods/log's options, `follow`
//! streaming what the process writes), `attach` (a WebSocket with the channel.k8s.io
//! subprotocols: stdin, stdout, stderr and the exit status), `cancel` (POST: the process is
//! ended, the answer is the run) and `summary` (GET: a `RunSummary` of the output).
//!
//! [`Runner::install`] adds all of it to an [`APIServer`]; `main.rs` only parses flags.

mod allow;
pub mod log;
mod options;
pub mod output;
pub mod process;
mod runs;
mod subresources;
mod types;

use extension_apiserver::aggregator::AggregatorOptions;
use extension_apiserver::prelude::*;
use extension_apiserver::server::ServerOptions;

pub use allow::{AllowedCommands, NAME as ADMISSION_PLUGIN};
pub use options::RunnerOptions;
pub use runs::Runs;
pub use subresources::{Attach, Cancel, Log, RunAttachOptions, RunLogOptions, Summary};
pub use types::{Run, RunPhase, RunSpec, RunStatus, RunSummary, StreamSummary};

/// The API group.
pub const GROUP: &str = "runner.example.com";

/// How much of a run's output `log` can read by default: its last 4 MiB.
pub const DEFAULT_LOG_BYTES: usize = 4 << 20;

/// The command line of `runner`: the framework's options beside the runner's.
#[derive(clap::Parser, Debug)]
pub struct Cli {
    /// Serving, TLS, storage, authentication and authorization.
    #[command(flatten)]
    pub server: ServerOptions,
    /// The core API (`--kubeconfig`) and APIService registration.
    #[command(flatten)]
    pub aggregator: AggregatorOptions,
    /// What may run.
    #[command(flatten)]
    pub runner: RunnerOptions,
}

/// The runner's resources, admission and processes, ready to be installed on a server.
pub struct Runner {
    options: RunnerOptions,
    runs: Runs,
}

impl Runner {
    /// A runner as `options` say.
    pub fn new(options: RunnerOptions) -> Self {
        let runs = Runs::new(options.log_buffer_bytes);
        Self { options, runs }
    }

    /// Its runs: for tests, how many processes run now.
    pub fn runs(&self) -> &Runs {
        &self.runs
    }

    /// Serves runs and their subresources on `server`, refuses runs of programs not allowed,
    /// and starts following the runs once it listens (ending every process when it shuts
    /// down).
    pub fn install(&self, server: APIServer) -> APIServer {
        let allowed = AllowedCommands::new(&self.options.allow_commands);
        let runs = self.runs.clone();
        server
            .group(self.api_group())
            .admission_plugin(move |_| Plugin::validating(allowed.clone()))
            .post_start_hook("start-runs", move |ctx| async move {
                runs.start(ctx.storage().store::<Run>(), ctx.shutdown().clone());
                Ok(())
            })
    }

    /// The `runner.example.com` group: runs and their subresources.
    pub fn api_group(&self) -> APIGroup {
        let runs = self.runs.clone();
        APIGroup::new(GROUP).version("v1alpha1", move |v| {
            let (log, attach, cancel, summary) =
                (runs.clone(), runs.clone(), runs.clone(), runs.clone());
            v.resource::<Run>()
                .stream("log", move |_| Log(log.clone()))
                .connect("attach", move |_| Attach(attach.clone()))
                .action("cancel", move |_| Cancel(cancel.clone()))
                .view("summary", move |_| Summary(summary.clone()))
        })
    }
}

#[cfg(test)]
mod cli_tests {
    use clap::Parser as _;

    /// Behind an aggregator the runner takes the framework's core-API flags, as every server
    /// of the framework does.
    #[test]
    fn the_command_line_takes_the_core_api_flags() {
        let cli = super::Cli::try_parse_from([
            "runner",
            "--kubeconfig=/etc/kubeconfig",
            "--allow-command=/bin/sh",
        ])
        .unwrap();
        assert_eq!(
            cli.aggregator.kubeconfig.as_deref(),
            Some(std::path::Path::new("/etc/kubeconfig"))
        );
        assert_eq!(cli.runner.allow_commands, ["/bin/sh"]);
    }
}
