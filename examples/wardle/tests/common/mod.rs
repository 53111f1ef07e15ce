//! Helpers shared by the wardle end-to-end tests.
#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;

use apiserver::testing::{KubectlOutput, TestServer};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use wardle::{Flunder, FlunderSpec};

/// The wardle server on a fresh SQLite file in `dir`.
pub async fn start(dir: &Path) -> TestServer {
    TestServer::start(dir, vec![wardle::api_group()]).await
}

/// kube-rs configuration from the server's admin kubeconfig.
pub async fn config(server: &TestServer) -> Config {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).unwrap();
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap()
}

/// A kube-rs client authenticated as the admin.
pub async fn client(server: &TestServer) -> Client {
    Client::try_from(config(server).await).unwrap()
}

/// A flunder in no particular namespace referring to `reference`.
pub fn flunder(name: &str, reference: &str) -> Flunder {
    let mut f = Flunder {
        spec: FlunderSpec {
            reference: Some(reference.into()),
            reference_type: None,
        },
        ..Flunder::default()
    };
    f.metadata.name = Some(name.into());
    f
}

/// A flunder manifest in namespace `default`; `labels` is the inside of a YAML flow map.
pub fn flunder_yaml(name: &str, reference: &str, labels: &str) -> String {
    format!(
        "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{{labels}}}\nspec:\n  reference: {reference}\n"
    )
}

/// kubectl's stdout, after asserting it succeeded.
#[track_caller]
pub fn ok(out: KubectlOutput) -> String {
    assert!(
        out.success,
        "kubectl failed:\nstdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    out.stdout
}

/// Writes `body` to `dir/file` and returns the path.
pub fn write(dir: &Path, file: &str, body: &str) -> String {
    let path = dir.join(file);
    std::fs::write(&path, body).unwrap();
    path.to_string_lossy().into_owned()
}
