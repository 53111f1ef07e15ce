//! `wardle migrate-storage`, the real binary on a SQLite file: flunders stored in v1beta1
//! (as if v1beta1 had been the storage version) are rewritten in v1alpha1, converted with
//! sample-apiserver's rules; a second run rewrites nothing; an unknown resource or an object
//! in a version wardle does not know fails with a non-zero exit.

use std::path::Path;
use std::process::{Command, Output};

use extension_apiserver::storage::{Backend, ListRequest, SqliteBackend};
use serde_json::{Value, json};

const FLUNDERS: &str = "/registry/wardle.example.com/flunders/";

fn migrate(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wardle"))
        .arg("migrate-storage")
        .arg(format!("--sqlite-path={}", db.display()))
        .args(args)
        .output()
        .expect("wardle runs")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn put(db: &Path, objects: &[(&str, Value)]) {
    let backend = SqliteBackend::open(db).unwrap();
    for (name, object) in objects {
        let key = format!("{FLUNDERS}default/{name}");
        let bytes = serde_json::to_vec(object).unwrap();
        backend.create(&key, bytes.into()).await.unwrap();
    }
}

async fn stored(db: &Path) -> Vec<Value> {
    let backend = SqliteBackend::open(db).unwrap();
    let request = ListRequest {
        prefix: FLUNDERS.into(),
        ..ListRequest::default()
    };
    let page = backend.list(&request).await.unwrap();
    page.items
        .iter()
        .map(|kv| serde_json::from_slice(&kv.value).unwrap())
        .collect()
}

fn flunder(version: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": format!("wardle.example.com/{version}"), "kind": "Flunder",
           "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": spec})
}

#[tokio::test]
async fn migrate_storage_rewrites_flunders_stored_in_v1beta1_as_v1alpha1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wardle.db");
    put(
        &db,
        &[
            (
                "old",
                flunder(
                    "v1beta1",
                    "old",
                    json!({"flunderReference": "other", "referenceType": "Flunder"}),
                ),
            ),
            (
                "new",
                flunder(
                    "v1alpha1",
                    "new",
                    json!({"reference": "x", "referenceType": "Fischer"}),
                ),
            ),
        ],
    )
    .await;

    let out = stdout(&migrate(&db, &["--resource=flunders.wardle.example.com"]));
    assert_eq!(out, "flunders.wardle.example.com: 2 objects, 1 rewritten\n");
    let objects = stored(&db).await;
    let versions: Vec<_> = objects.iter().map(|o| o["apiVersion"].clone()).collect();
    assert_eq!(
        versions,
        ["wardle.example.com/v1alpha1", "wardle.example.com/v1alpha1"]
    );
    // `new` sorts first; `old` converted with sample-apiserver's rules.
    assert_eq!(
        objects[1]["spec"],
        json!({"reference": "other", "referenceType": "Flunder"})
    );
    assert_eq!(objects[1]["metadata"]["uid"], "uid-old");

    // Every stored resource, again: nothing left to rewrite.
    let again = stdout(&migrate(&db, &[]));
    assert!(
        again.contains("flunders.wardle.example.com: 2 objects, 0 rewritten\n"),
        "{again}"
    );
    assert!(
        again.contains("fischers.wardle.example.com: 0 objects, 0 rewritten\n"),
        "{again}"
    );

    let unknown = migrate(&db, &["--resource=nothings.wardle.example.com"]);
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("nothings.wardle.example.com"), "{stderr}");
}

#[tokio::test]
async fn an_object_in_a_version_wardle_does_not_know_fails_the_migration() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wardle.db");
    put(&db, &[("odd", flunder("v9", "odd", json!({})))]).await;
    let out = migrate(&db, &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is in wardle.example.com/v9") && stderr.contains("flunders"),
        "{stderr}"
    );
    assert_eq!(stored(&db).await[0]["apiVersion"], "wardle.example.com/v9");
}

/// On SQLite, with the server running: `--server-kubeconfig` migrates through the server's
/// API (read, write back unchanged), so the server's watch cache and watchers follow — the
/// way to migrate a file that only the running server may write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_storage_through_the_running_servers_api() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("wardle.db");
    let old = json!({"flunderReference": "other", "referenceType": "Flunder"});
    put(&db, &[("old", flunder("v1beta1", "old", old))]).await;
    let path = db.clone();
    let server = extension_apiserver_testing::TestServer::builder()
        .group(wardle::api_group())
        .sqlite()
        .dir(dir.path().join("server"))
        .options(move |o| o.sqlite_path = path)
        .start()
        .await;
    // One object written by the server itself, in the storage version: left as it is.
    let new = dir.path().join("new.yaml");
    let yaml = "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: new\n  namespace: default\nspec:\n  reference: x\n";
    std::fs::write(&new, yaml).unwrap();
    let created = server.kubectl(&["create", "-f", &new.display().to_string()]);
    assert!(created.success, "{}", created.stderr);
    let watch = server.kubectl_watch(&[
        "get",
        "flunders",
        "-w",
        "--output-watch-events",
        "--no-headers",
    ]);
    // The watch is on once it has shown what there is.
    watch.expect_line(&["ADDED", "old", "other"]);
    let kubeconfig = format!("--server-kubeconfig={}", server.kubeconfig.display());
    let out = Command::new(env!("CARGO_BIN_EXE_wardle"))
        .args(["migrate-storage", &kubeconfig])
        .output()
        .expect("wardle runs");
    let out = stdout(&out);
    assert!(
        out.contains("flunders.wardle.example.com: 2 objects, 1 rewritten\n"),
        "{out}"
    );
    watch.expect_line(&["MODIFIED", "old", "other"]);
    let versions: Vec<_> = stored(&db)
        .await
        .iter()
        .map(|o| o["apiVersion"].clone())
        .collect();
    assert_eq!(
        versions,
        ["wardle.example.com/v1alpha1", "wardle.example.com/v1alpha1"]
    );
    let kubeconfig = format!("--server-kubeconfig={}", server.kubeconfig.display());
    let again = Command::new(env!("CARGO_BIN_EXE_wardle"))
        .args([
            "migrate-storage",
            &kubeconfig,
            "--resource=flunders.wardle.example.com",
        ])
        .output()
        .expect("wardle runs");
    assert_eq!(
        stdout(&again),
        "flunders.wardle.example.com: 2 objects, 0 rewritten\n"
    );
    server.stop().await;
}

/// On etcd, beside a running server (another process): the server's watch sees each
/// rewrite as a MODIFIED event, and its reads follow.
#[cfg(feature = "etcd")]
mod etcd3 {
    use extension_apiserver::storage::{Etcd3Backend, Etcd3Options};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_running_server_sees_the_rewrites_of_migrate_storage() {
        let dir = tempfile::tempdir().unwrap();
        let options = crate::common::Backend::Etcd3.options(dir.path());
        let prefix = options.storage_prefix.clone();
        crate::common::etcd_ready(&options.etcd_servers).await;
        let etcd = Etcd3Backend::connect(&options.etcd_servers, Etcd3Options::default())
            .await
            .unwrap();
        let key = format!("{prefix}/wardle.example.com/flunders/default/old");
        let old = flunder(
            "v1beta1",
            "old",
            json!({"fischerReference": "fish", "referenceType": "Fischer"}),
        );
        let bytes = serde_json::to_vec(&old).unwrap();
        etcd.create(&key, bytes.into()).await.unwrap();

        let server = crate::common::serve(options.clone()).await;
        let watch = server.kubectl_watch(&[
            "get",
            "flunders",
            "-w",
            "--output-watch-events",
            "--no-headers",
        ]);
        watch.expect_line(&["ADDED", "old"]);
        let out = Command::new(env!("CARGO_BIN_EXE_wardle"))
            .arg("migrate-storage")
            .arg("--storage-backend=etcd3")
            .arg(format!("--etcd-servers={}", options.etcd_servers.join(",")))
            .arg(format!("--etcd-prefix={prefix}"))
            .output()
            .expect("wardle runs");
        let printed = stdout(&out);
        assert!(
            printed.contains("flunders.wardle.example.com: 1 objects, 1 rewritten\n"),
            "{printed}"
        );
        watch.expect_line(&["MODIFIED", "old"]);
        let stored = etcd.get(&key).await.unwrap().unwrap();
        let stored: Value = serde_json::from_slice(&stored.value).unwrap();
        assert_eq!(stored["apiVersion"], "wardle.example.com/v1alpha1");
        assert_eq!(
            stored["spec"],
            json!({"reference": "fish", "referenceType": "Fischer"})
        );
        let got = crate::common::ok(server.kubectl(&[
            "get",
            "flunders.v1beta1.wardle.example.com",
            "old",
            "-o",
            "json",
        ]));
        let got: Value = serde_json::from_str(&got).unwrap();
        assert_eq!(got["spec"]["fischerReference"], "fish");
        server.stop().await;
    }
}
