//! A run's life through kube-rs over the server's TLS: refused unless its program is
//! allowed (422 on `spec.command[0]`), started by the server, its status written as it goes,
//! its spec immutable, its process ended with its deletion.

use kube::api::{DeleteParams, Patch, PatchParams};
use runner::RunPhase;
use serde_json::json;

use crate::common::{self, create, finished, phase, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_program_not_allowed_is_refused_with_422() {
    let setup = common::start().await;
    let refused = setup
        .runs
        .create(
            &Default::default(),
            &common::run("rm", &["/bin/rm", "-rf", "/tmp/x"], false),
        )
        .await;
    let kube::Error::Api(status) = refused.unwrap_err() else {
        panic!("not a Status");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains(
            "spec.command[0]: Unsupported value: \"/bin/rm\": supported values: \"/bin/sh\", \"/bin/cat\", \"/bin/sleep\""
        ),
        "{}",
        status.message
    );
    let empty = setup
        .runs
        .create(&Default::default(), &common::run("empty", &[], false))
        .await;
    assert!(matches!(empty, Err(kube::Error::Api(s)) if s.code == 422));
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_goes_from_pending_to_its_exit_code() {
    let setup = common::start().await;
    let runs = &setup.runs;
    let created = create(runs, "ok", &["/bin/sh", "-c", "echo hi"], false).await;
    assert!(matches!(phase(&created), RunPhase::Pending));
    let ok = finished(runs, "ok").await;
    let status = ok.status.unwrap();
    assert_eq!(
        (status.phase, status.exit_code),
        (RunPhase::Succeeded, Some(0))
    );
    assert!(status.start_time.is_some() && status.completion_time.is_some());

    create(runs, "bad", &["/bin/sh", "-c", "exit 7"], false).await;
    let bad = finished(runs, "bad").await.status.unwrap();
    assert_eq!((bad.phase, bad.exit_code), (RunPhase::Failed, Some(7)));

    // The spec cannot change once the process started from it.
    let patch = Patch::Merge(json!({"spec": {"command": ["/bin/sh", "-c", "true"]}}));
    let changed = runs.patch("bad", &PatchParams::default(), &patch).await;
    assert!(matches!(changed, Err(kube::Error::Api(s)) if s.code == 422));
    setup.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_run_ends_its_process() {
    let setup = common::start().await;
    create(&setup.runs, "long", &["/bin/sleep", "30"], false).await;
    wait_for(&setup.runs, "long", |r| phase(r) == RunPhase::Running).await;
    assert_eq!(setup.runner.running(), 1);
    setup
        .runs
        .delete("long", &DeleteParams::default())
        .await
        .unwrap();
    let ended = extension_apiserver_testing::eventually(|| {
        let runner = setup.runner.clone();
        async move { runner.running() == 0 }
    })
    .await;
    assert!(ended, "the process still runs");
    setup.server.stop().await;
}
