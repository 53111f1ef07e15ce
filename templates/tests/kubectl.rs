//! End to end: the server over real TLS with its SQLite store, started by the test kit
//! (`extension_apiserver_testing`), driven with kubectl as a user would.

use std::path::Path;

use extension_apiserver::prelude::*;
use extension_apiserver_testing::{KubectlOutput, TestServer};
use {{crate_name}}::{api_group, {{kind}}, GROUP};

/// The standard output of a kubectl run that must succeed.
fn ok(out: KubectlOutput) -> String {
    assert!(out.success, "kubectl failed: {}", out.stderr);
    out.stdout
}

/// A {{kind}} manifest with `spec.replicas` (none: the server's default), written to `dir`.
fn manifest(dir: &Path, name: &str, replicas: Option<i32>) -> String {
    let replicas = replicas.map_or(String::new(), |r| format!("\n  replicas: {r}"));
    let yaml = format!(
        "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  labels:\n    app: demo\nspec:\n  message: hello{replicas}\n",
        api_version = {{kind}}::INFO.api_version(),
        kind = {{kind}}::INFO.kind,
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).expect("manifest written");
    path.to_string_lossy().into_owned()
}

/// The server as deployed (its SQLite store), in a temporary directory of its own.
async fn start() -> TestServer {
    TestServer::builder().group(api_group()).sqlite().start().await
}

#[tokio::test(flavor = "multi_thread")]
async fn discovery_names_the_kind() {
    let server = start().await;
    let info = {{kind}}::INFO;

    let out = ok(server.kubectl(&[
        "api-resources",
        &format!("--api-group={GROUP}"),
        "--no-headers",
    ]));
    let row: Vec<&str> = out.split_whitespace().collect();
    let namespaced = info.namespaced().to_string();
    assert_eq!(
        row,
        [
            info.plural,
            info.short_names[0],
            &info.api_version(),
            &namespaced,
            info.kind
        ],
        "{out}"
    );
    let explained = ok(server.kubectl(&["explain", &format!("{}.spec", info.plural)]));
    assert!(explained.contains("replicas"), "{explained}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn create_list_get_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let server = start().await;
    let plural = {{kind}}::INFO.plural;

    ok(server.kubectl(&["create", "-f", &manifest(dir.path(), "first", None)]));
    ok(server.kubectl(&["apply", "-f", &manifest(dir.path(), "second", Some(3))]));

    // The list shows the printer columns (an empty phase: no status yet); `replicas` was
    // defaulted to 1.
    let table = ok(server.kubectl(&["get", plural, "-l", "app=demo"]));
    let rows: Vec<Vec<&str>> = table.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "REPLICAS", "PHASE", "AGE"], "{table}");
    assert_eq!(rows[1][..2], ["first", "1"], "{table}");
    assert_eq!(rows[2][..2], ["second", "3"], "{table}");
    let wide = ok(server.kubectl(&["get", plural, "second", "-o", "wide"]));
    assert!(wide.contains("MESSAGE") && wide.contains("hello"), "{wide}");

    // By its short name, as JSON.
    let short = {{kind}}::INFO.short_names[0];
    let json = ok(server.kubectl(&["get", short, "first", "-o", "json"]));
    let object: {{kind}} = serde_json::from_str(&json).expect("a {{kind}}");
    assert_eq!(object.spec.replicas, Some(1));
    assert_eq!(object.spec.message, "hello");

    // The status is written through its own subresource.
    ok(server.kubectl(&[
        "patch",
        plural,
        "first",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Ready"}}"#,
    ]));
    let phase = ok(server.kubectl(&["get", plural, "first", "-o", "jsonpath={.status.phase}"]));
    assert_eq!(phase, "Ready");
    let table = ok(server.kubectl(&["get", plural, "first", "--no-headers"]));
    let row: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(row[..3], ["first", "1", "Ready"], "{table}");

    ok(server.kubectl(&["delete", plural, "first", "second"]));
    let left = ok(server.kubectl(&["get", plural, "-o", "name"]));
    assert_eq!(left, "");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_objects_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = start().await;

    let out = server.kubectl(&["create", "-f", &manifest(dir.path(), "bad", Some(-1))]);
    assert!(!out.success, "{out:?}");
    assert!(
        out.stderr.contains("is invalid")
            && out
                .stderr
                .contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
        "{}",
        out.stderr
    );
    let out = server.kubectl(&["get", {{kind}}::INFO.plural, "bad"]);
    assert!(!out.success && out.stderr.contains("NotFound"), "{out:?}");
    server.stop().await;
}
