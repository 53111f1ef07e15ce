//! The `Cargo.toml` that "Getting started" tells a new user to write asks for the versions and
//! features this workspace builds with, so that it keeps compiling as the dependencies move.

use std::path::PathBuf;

use toml::{Table, Value};

fn read(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// The chapter's first ```toml block.
fn chapter_manifest() -> Table {
    let chapter = read("book/src/getting-started.md");
    let start = chapter.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + chapter[start..].find("```").unwrap();
    chapter[start..end].parse().unwrap()
}

fn workspace_dependencies() -> Table {
    let manifest: Table = read("Cargo.toml").parse().unwrap();
    manifest["workspace"]["dependencies"]
        .as_table()
        .unwrap()
        .clone()
}

fn version(spec: &Value) -> Option<&str> {
    match spec {
        Value::String(v) => Some(v),
        Value::Table(t) => t.get("version").and_then(Value::as_str),
        _ => None,
    }
}

fn features(spec: &Value) -> Vec<&str> {
    spec.get("features")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn the_chapters_dependencies_are_the_workspaces() {
    let manifest = chapter_manifest();
    let workspace = workspace_dependencies();
    for section in ["dependencies", "dev-dependencies"] {
        for (name, spec) in manifest[section].as_table().unwrap() {
            let wanted = version(spec).expect("every dependency of the chapter is by version");
            let ours = version(&workspace[name]).unwrap();
            if name.starts_with("extension-apiserver") {
                // The framework's own crates: a requirement the workspace's version meets.
                let meets = ours == wanted || ours.starts_with(&format!("{wanted}."));
                assert!(
                    meets,
                    "{section}.{name}: {wanted} does not take the workspace's {ours}"
                );
            } else {
                assert_eq!(wanted, ours, "{section}.{name}: the workspace has {ours}");
            }
            // The crate's own features must exist on the workspace's dependency or be the
            // Kubernetes version, which the binary picks.
            for feature in features(spec) {
                let known = features(&workspace[name]).contains(&feature)
                    || (name == "k8s-openapi" && feature == "v1_33");
                assert!(
                    known,
                    "{section}.{name}: feature {feature} not used by the workspace"
                );
            }
        }
    }
}

#[test]
fn the_chapters_kubernetes_version_is_the_examples() {
    let manifest = chapter_manifest();
    let wardle: Table = read("examples/wardle/Cargo.toml").parse().unwrap();
    let ours = features(&manifest["dependencies"]["k8s-openapi"]);
    let example = features(&wardle["dependencies"]["k8s-openapi"]);
    assert!(
        example.iter().all(|f| ours.contains(f)),
        "{ours:?} vs wardle's {example:?}"
    );
}
