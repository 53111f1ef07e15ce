//! `runs/{name}/cancel` (POST, answering the run) and `runs/{name}/summary` (GET, a
//! `RunSummary`), with kube-rs and kubectl.

use runner::{Run, RunPhase, RunSummary};

use crate::common::{self, create, finished, get, path, phase, post, status, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_ends_a_running_process_and_answers_the_run() {
    let setup = common::start().await;
    let client = setup.server.client();
    create(&setup.runs, "nap", &["/bin/sleep", "30"], false).await;
    wait_for(&setup.runs, "nap", |r| phase(r) == RunPhase::Running).await;
    assert_eq!(setup.runner.running(), 1);

    // 201, as kube-apiserver answers a POST to a subresource (pods/eviction).
    let (code, body) = post(&client, &path("nap", "cancel", ""), "{}").await;
    assert_eq!(code, 201, "{body}");
    let run: Run = serde_json::from_str(&body).unwrap();
    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(value["kind"], "Run");
    let status = run.status.unwrap();
    assert_eq!(
        (status.phase, status.exit_code),
        (RunPhase::Cancelled, Some(128 + 9))
    );
    assert_eq!(setup.runner.running(), 0, "the process is gone");
    // Again: the same run; a run that finished on its own cannot be cancelled.
    let (code, _) = post(&client, &path("nap", "cancel", ""), "{}").await;
    assert_eq!(code, 201);
    create(&setup.runs, "quick", &["/bin/sh", "-c", "true"], false).await;
    finished(&setup.runs, "quick").await;
    let (code, body) = post(&client, &path("quick", "cancel", ""), "{}").await;
    assert_eq!(
        (code, status_reason(&body)),
        (409, "Conflict".into()),
        "{body}"
    );

    // kubectl, as the README shows it.
    create(&setup.runs, "nap2", &["/bin/sleep", "30"], false).await;
    wait_for(&setup.runs, "nap2", |r| phase(r) == RunPhase::Running).await;
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let out = setup.server.kubectl(&[
        "create",
        "--raw",
        &path("nap2", "cancel", ""),
        "-f",
        empty.to_str().unwrap(),
    ]);
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout.contains("\"phase\":\"Cancelled\""),
        "{}",
        out.stdout
    );
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn summary_counts_lines_bytes_and_time() {
    let setup = common::start().await;
    let client = setup.server.client();
    let script = "echo a; echo b; echo c >&2; printf d; sleep 0.2";
    create(&setup.runs, "few", &["/bin/sh", "-c", script], false).await;
    finished(&setup.runs, "few").await;

    let out = setup
        .server
        .kubectl(&["get", "--raw", &path("few", "summary", "")]);
    assert!(out.success, "{}", out.stderr);
    let value: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(value["apiVersion"], "runner.example.com/v1alpha1");
    assert_eq!(value["kind"], "RunSummary");
    let summary: RunSummary = serde_json::from_value(value).unwrap();
    assert_eq!(summary.metadata.name.as_deref(), Some("few"));
    assert_eq!((summary.stdout.lines, summary.stdout.bytes), (3, 5));
    assert_eq!((summary.stderr.lines, summary.stderr.bytes), (1, 2));
    assert_eq!(
        (summary.phase, summary.exit_code),
        (RunPhase::Succeeded, Some(0))
    );
    let duration = summary.duration_seconds.unwrap();
    assert!((0.2..60.0).contains(&duration), "{duration}");

    let (code, body) = get(&client, &path("missing", "summary", "")).await;
    assert_eq!(
        (code, status(&body)["reason"].as_str()),
        (404, Some("NotFound"))
    );
    setup.server.stop().await;
}

fn status_reason(body: &str) -> String {
    status(body)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
