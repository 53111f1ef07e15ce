//! wardle through faults of PostgreSQL itself, each on a throw-away cluster of the test's own
//! ([`PgCluster`]), never the shared CI database: the database restarted and crashed under
//! load, and a primary switch to a hot standby. In both, while the database is away `/readyz`
//! fails on `postgres` and requests get `Status` 503; the server comes back by itself; every
//! acknowledged create is read back; a watch opened before sees every change once, in order.
//! `cargo test -p wardle --features postgres --test wardle postgres_faults`.
#![cfg(feature = "postgres")]

use crate::common::postgres_cluster::PgCluster;
use crate::common::*;
use crate::postgres::{Creates, WatchStream, assert_away, options, start, wait_ready};

use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, PostParams, WatchParams};
use kube::{Client, ResourceExt};
use wardle::Flunder;

/// A create before the watch's start (a watch from resourceVersion 0 would mean "from any
/// state"), the watch, and the resourceVersion it starts from.
async fn watch_from_now(client: &Client) -> (Api<Flunder>, String, WatchStream) {
    let api: Api<Flunder> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &flunder("first", "x"))
        .await
        .unwrap();
    let start_rv = list_rv(&api).await;
    let params = WatchParams::default().timeout(240);
    let live = api.watch(&params, &start_rv).await.unwrap().boxed();
    (api, start_rv, live)
}

/// PostgreSQL restarted (`pg_ctl stop -m fast`, then start: sessions ended, a checkpoint) and
/// then crashed (`-m immediate`: the processes quit at once, the next start recovers from the
/// WAL) under three concurrent writers and a watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_faults_restart_and_crash_under_load_lose_nothing_acknowledged() {
    let cluster = PgCluster::primary(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = start(options(dir.path(), &cluster.url(), "wardle")).await;
    wait_ready(&client).await;
    let (api, start_rv, live) = watch_from_now(&client).await;
    let creates = Creates::start(&client, 3);

    for mode in ["fast", "immediate"] {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cluster.stop(mode).await;
        assert_away(&client).await;
        cluster.start().await;
        wait_ready(&client).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    creates.finish_after_outage(&api, &start_rv, live, 6).await;
    server.stop().await;
}

/// A primary and a hot standby that confirms every commit (`synchronous_standby_names`), the
/// server given both hosts with `target_session_attrs=read-write`. Under load the primary
/// crashes and the standby is promoted: the server finds the new primary by itself, nothing
/// acknowledged is lost, resourceVersions keep growing, and the watch goes on without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_faults_primary_switch_to_a_hot_standby_loses_nothing_acknowledged() {
    // The standby's `application_name` (see `PgCluster::standby_of`), not `*`: the setting
    // goes through pg_ctl's shell.
    let primary = PgCluster::primary(&["synchronous_standby_names=standby"]).await;
    let standby = PgCluster::standby_of(&primary, &[]).await;
    // Synchronous once it streams (while it catches up it counts as `async`).
    let state = "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'";
    let mut sync_state = String::new();
    for _ in 0..100 {
        sync_state = primary.query(state).await;
        if sync_state == "sync" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(sync_state, "sync", "the standby never became synchronous");
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = start(options(dir.path(), &url, "wardle")).await;
    wait_ready(&client).await;
    let (api, start_rv, live) = watch_from_now(&client).await;
    let creates = Creates::start(&client, 3);
    tokio::time::sleep(Duration::from_secs(2)).await;

    primary.stop("immediate").await;
    // The standby answers, read-only: the server must not take it for the primary.
    assert_away(&client).await;
    standby.promote().await;
    wait_ready(&client).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stored = creates.finish_after_outage(&api, &start_rv, live, 6).await;
    // Written on the new primary: newer than everything written on the old one.
    let after = api
        .create(&PostParams::default(), &flunder("after-switch", "x"))
        .await
        .unwrap();
    let after_rv: u64 = after.resource_version().unwrap().parse().unwrap();
    assert!(
        stored.values().all(|rv| *rv < after_rv),
        "{after_rv} {stored:?}"
    );
    server.stop().await;
}
