//! `runs/{name}/log` over the server's TLS: pods/log's options (kube-rs raw requests and
//! kubectl), kube's 400 and 422 for bad ones, `follow` read while the process writes, and a
//! follower that goes away leaving no reader behind.

use futures::{AsyncBufReadExt as _, StreamExt as _};
use runner::RunPhase;

use crate::common::{self, create, finished, get, path, phase, status, wait_for};

const COUNT: [&str; 3] = ["/bin/sh", "-c", "printf '1\\n2\\n3\\n4\\n'; echo err >&2"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_option_of_pods_log() {
    let setup = common::start().await;
    let client = setup.server.client();
    create(&setup.runs, "count", &COUNT, false).await;
    finished(&setup.runs, "count").await;
    let log = |query: &str| path("count", "log", query);

    let (code, all) = get(&client, &log("")).await;
    assert_eq!(code, 200, "{all}");
    let mut lines: Vec<&str> = all.lines().collect();
    lines.sort();
    assert_eq!(lines, ["1", "2", "3", "4", "err"], "stdout and stderr");
    let stdout_only = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.ends_with("err"))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let (_, tail) = get(&client, &log("tailLines=2")).await;
    assert_eq!(tail.lines().count(), 2, "{tail}");
    let (_, none) = get(&client, &log("tailLines=0")).await;
    assert_eq!(none, "");
    let (_, limited) = get(&client, &log("limitBytes=3")).await;
    assert_eq!(limited.len(), 3, "cut within a line: {limited:?}");
    let (_, stamped) = get(&client, &log("timestamps=true")).await;
    for line in stamped.lines() {
        let (time, text) = line.split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{line}");
        assert!(["1", "2", "3", "4", "err"].contains(&text), "{line}");
    }
    let (_, recent) = get(&client, &log("sinceSeconds=3600&container=run")).await;
    assert_eq!(stdout_only(&recent), "1\n2\n3\n4\n");
    let (_, future) = get(&client, &log("sinceTime=2999-01-01T00:00:00Z")).await;
    assert_eq!(future, "");

    // kubectl reads it as it reads a pod's log.
    let out = setup
        .server
        .kubectl(&["get", "--raw", &log("tailLines=1&timestamps=false")]);
    assert!(out.success, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_options_get_kubes_400_and_422() {
    let setup = common::start().await;
    let client = setup.server.client();
    create(&setup.runs, "count", &COUNT, false).await;
    finished(&setup.runs, "count").await;
    let log = |query: &str| path("count", "log", query);

    let (code, body) = get(&client, &log("tailLines=-1")).await;
    let invalid = status(&body);
    assert_eq!(
        (code, invalid["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    assert_eq!(
        invalid["details"]["causes"][0]["field"], "tailLines",
        "{body}"
    );
    let (code, body) = get(&client, &log("limitBytes=0&sinceSeconds=0")).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        status(&body)["details"]["causes"].as_array().unwrap().len(),
        2
    );

    let (code, body) = get(&client, &log("container=sidecar")).await;
    let bad = status(&body);
    assert_eq!(
        (code, bad["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    assert_eq!(
        bad["message"],
        "container sidecar is not valid for run count"
    );
    let (code, body) = get(&client, &log("tailLines=ten")).await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = get(&client, &log("previous=true")).await;
    assert_eq!(code, 400, "{body}");
    let (code, body) = get(&client, &path("missing", "log", "")).await;
    assert_eq!(
        (code, status(&body)["reason"].as_str()),
        (404, Some("NotFound"))
    );
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follow_streams_lines_as_the_process_writes_them() {
    let setup = common::start().await;
    let client = setup.server.client();
    let script = "for i in 1 2 3; do echo $i; sleep 0.5; done";
    create(&setup.runs, "slow", &["/bin/sh", "-c", script], false).await;
    let request = http::Request::get(path("slow", "log", "follow=true"))
        .body(Vec::new())
        .unwrap();
    let mut lines = client.request_stream(request).await.unwrap().lines();
    let first = lines.next().await.unwrap().unwrap();
    assert_eq!(first, "1");
    // The first line came while the process still runs (it writes for another second).
    let run = setup.runs.get("slow").await.unwrap();
    assert_eq!(
        phase(&run),
        RunPhase::Running,
        "the first line came only at the end"
    );
    let rest: Vec<String> = lines.map(|line| line.unwrap()).collect().await;
    assert_eq!(
        rest,
        ["2", "3"],
        "then the others, and the end with the process"
    );
    let done = finished(&setup.runs, "slow").await;
    assert_eq!(phase(&done), RunPhase::Succeeded);
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_goes_away_leaves_no_reader() {
    let setup = common::start().await;
    let client = setup.server.client();
    let forever = "while true; do echo tick; sleep 0.1; done";
    create(&setup.runs, "ticks", &["/bin/sh", "-c", forever], false).await;
    wait_for(&setup.runs, "ticks", |r| phase(r) == RunPhase::Running).await;
    for _ in 0..3 {
        let request = http::Request::get(path("ticks", "log", "follow=true"))
            .body(Vec::new())
            .unwrap();
        let mut lines = client.request_stream(request).await.unwrap().lines();
        assert_eq!(lines.next().await.unwrap().unwrap(), "tick");
        assert_eq!(setup.runner.readers("default", "ticks").0, 1);
        drop(lines);
        let gone = extension_apiserver_testing::eventually(|| {
            let runner = setup.runner.clone();
            async move { runner.readers("default", "ticks").0 == 0 }
        })
        .await;
        assert!(
            gone,
            "the server still reads the log for a client that went away"
        );
    }
    setup.server.stop().await;
}
