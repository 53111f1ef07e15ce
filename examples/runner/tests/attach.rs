//! `runs/{name}/attach` over WebSocket with each channel.k8s.io subprotocol: stdin to the
//! process, stdout and stderr back live, the exit status on the error channel as the kubelet
//! writes it; v5's close of stdin; kube's 400 and 404 before the upgrade.

use runner::RunPhase;

use crate::common::{self, create, finished, path, phase, wait_for};
use crate::ws::{self, Received};

const ALL: &str = "stdin=true&stdout=true&stderr=true";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v5_stdin_to_cat_its_stdout_back_and_success_on_close() {
    let setup = common::start().await;
    let client = setup.server.client();
    create(&setup.runs, "cat", &["/bin/cat"], true).await;
    wait_for(&setup.runs, "cat", |r| phase(r) == RunPhase::Running).await;
    let Ok(mut channels) =
        ws::connect(&client, &path("cat", "attach", ALL), "v5.channel.k8s.io").await
    else {
        panic!("no upgrade");
    };
    assert_eq!(channels.protocol, "v5.channel.k8s.io");
    let mut got = Received::default();
    channels.send(ws::STDIN, b"hello\n").await;
    channels.read_stdout_until(b"hello\n", &mut got).await;
    channels.send(ws::STDIN, b"again\n").await;
    channels.read_stdout_until(b"again\n", &mut got).await;
    assert_eq!(setup.runner.readers("default", "cat").1, 1);
    // v5's close signal ends stdin: cat reads its end and exits 0.
    channels.close_stdin().await;
    let got = channels.read_to_end(got).await;
    assert_eq!(got.stdout, b"hello\nagain\n");
    assert_eq!(got.status()["status"], "Success", "{:?}", got.status());
    let done = finished(&setup.runs, "cat").await;
    assert_eq!(phase(&done), RunPhase::Succeeded);
    assert_eq!(
        setup.runner.readers("default", "cat").1,
        0,
        "the session is gone"
    );
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn v4_stdout_stderr_and_a_non_zero_exit_code() {
    let setup = common::start().await;
    let client = setup.server.client();
    let script = "read line; echo \"got $line\"; echo oops >&2; exit 3";
    create(&setup.runs, "sh", &["/bin/sh", "-c", script], true).await;
    wait_for(&setup.runs, "sh", |r| phase(r) == RunPhase::Running).await;
    let Ok(mut channels) =
        ws::connect(&client, &path("sh", "attach", ALL), "v4.channel.k8s.io").await
    else {
        panic!("no upgrade");
    };
    assert_eq!(channels.protocol, "v4.channel.k8s.io");
    channels.send(ws::STDIN, b"x\n").await;
    let got = channels.read_to_end(Received::default()).await;
    assert_eq!(got.stdout, b"got x\n");
    assert_eq!(got.stderr, b"oops\n");
    let status = got.status();
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(
        status["details"]["causes"][0]["reason"], "ExitCode",
        "{status}"
    );
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");
    let done = finished(&setup.runs, "sh").await.status.unwrap();
    assert_eq!((done.phase, done.exit_code), (RunPhase::Failed, Some(3)));
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_v4_client_that_goes_away_ends_the_processs_stdin() {
    let setup = common::start().await;
    let client = setup.server.client();
    create(&setup.runs, "cat4", &["/bin/cat"], true).await;
    wait_for(&setup.runs, "cat4", |r| phase(r) == RunPhase::Running).await;
    let Ok(mut channels) =
        ws::connect(&client, &path("cat4", "attach", ALL), "v4.channel.k8s.io").await
    else {
        panic!("no upgrade");
    };
    let mut got = Received::default();
    channels.send(ws::STDIN, b"bye\n").await;
    channels.read_stdout_until(b"bye\n", &mut got).await;
    // v4 has no close of stdin: kubectl closes the connection. As with a container's
    // `stdinOnce`, the process then reads the end of its stdin, and cat exits 0.
    drop(channels);
    let done = finished(&setup.runs, "cat4").await;
    assert_eq!(phase(&done), RunPhase::Succeeded);
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_before_the_upgrade() {
    let setup = common::start().await;
    let client = setup.server.client();
    create(&setup.runs, "quiet", &["/bin/sleep", "30"], false).await;
    let v5 = "v5.channel.k8s.io";
    let cases = [
        ("quiet", ALL, 400),                             // spec.stdin is false
        ("quiet", "stdout=true&tty=true", 400),          // no terminal
        ("quiet", "stdout=true&container=sidecar", 400), // no such container
        ("missing", "stdout=true", 404),
    ];
    for (name, query, code) in cases {
        match ws::connect(&client, &path(name, "attach", query), v5).await {
            Ok(_) => panic!("{name}?{query} must be refused"),
            Err(response) => assert_eq!(response.status().as_u16(), code, "{name}?{query}"),
        }
    }
    setup.server.stop().await;
}
