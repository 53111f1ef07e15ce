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

/// The path of run `name`'s subresource, with a query.
pub fn path(name: &str, subresource: &str, query: &str) -> String {
    let base =
        format!("/apis/runner.example.com/v1alpha1/namespaces/default/runs/{name}/{subresource}");
    match query {
        "" => base,
        query => format!("{base}?{query}"),
    }
}

/// GET `path`: the status code and body.
pub async fn get(client: &kube::Client, path: &str) -> (u16, String) {
    send(client, http::Request::get(path).body(Vec::new()).unwrap()).await
}

/// POST `body` to `path`: the status code and body.
pub async fn post(client: &kube::Client, path: &str, body: &str) -> (u16, String) {
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.as_bytes().to_vec())
        .unwrap();
    send(client, request).await
}

async fn send(client: &kube::Client, request: http::Request<Vec<u8>>) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let (parts, body) = request.into_parts();
    let request = http::Request::from_parts(parts, kube::client::Body::from(body));
    let response = client.send(request).await.expect("an answer");
    let code = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// The `Status` of an error answer.
pub fn status(body: &str) -> serde_json::Value {
    let status: serde_json::Value = serde_json::from_str(body).expect("a Status");
    assert_eq!(status["kind"], "Status", "{body}");
    status
}
