//! What every test of the runner starts from: a server allowing `/bin/sh`, `/bin/cat` and
//! `/bin/sleep`, a client, and runs created and awaited.

use std::time::Duration;

use extension_apiserver_testing::TestServer;
use kube::Api;
use kube::api::PostParams;
use runner::{Run, RunPhase, Runner, RunnerOptions};

pub const ALLOWED: [&str; 3] = ["/bin/sh", "/bin/cat", "/bin/sleep"];

pub struct Setup {
    pub server: TestServer,
    pub runs: Api<Run>,
    pub runner: runner::Runs,
}

pub async fn start() -> Setup {
    let runner = Runner::new(RunnerOptions::allowing(&ALLOWED));
    let runs = runner.runs().clone();
    let server = TestServer::builder()
        .extend(move |server| runner.install(server))
        .start()
        .await;
    let api = Api::namespaced(server.client(), "default");
    Setup {
        server,
        runs: api,
        runner: runs,
    }
}

pub fn run(name: &str, command: &[&str], stdin: bool) -> Run {
    let mut run = Run::default();
    run.metadata.name = Some(name.into());
    run.spec.command = command.iter().map(|c| c.to_string()).collect();
    run.spec.stdin = stdin;
    run
}

pub async fn create(runs: &Api<Run>, name: &str, command: &[&str], stdin: bool) -> Run {
    runs.create(&PostParams::default(), &run(name, command, stdin))
        .await
        .unwrap()
}

pub fn phase(run: &Run) -> RunPhase {
    run.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// The run once `done` holds of it (bounded: about 20 seconds).
pub async fn wait_for(runs: &Api<Run>, name: &str, done: impl Fn(&Run) -> bool) -> Run {
    for _ in 0..200 {
        let run = runs.get(name).await.unwrap();
        if done(&run) {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {name} did not get there: {:?}", runs.get(name).await);
}

pub async fn finished(runs: &Api<Run>, name: &str) -> Run {
    wait_for(runs, name, |run| phase(run).is_finished()).await
}
