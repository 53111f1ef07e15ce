//! What deploys the server: the `manifests` command's YAML and the Dockerfile's image.

use std::process::Command;

use {{crate_name}}::{GROUP, VERSION};

#[test]
fn manifests_name_the_image_and_the_apiservice() {
    let out = Command::new(env!("CARGO_BIN_EXE_{{project-name}}"))
        .args(["manifests", "--namespace", "{{project-name}}"])
        .args(["--image", "registry.example.com/{{project-name}}:0.1.0"])
        .output()
        .expect("the server runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let yaml = String::from_utf8(out.stdout).expect("UTF-8");
    for expected in [
        "kind: Deployment".to_string(),
        "image: registry.example.com/{{project-name}}:0.1.0".to_string(),
        "kind: APIService".to_string(),
        format!("name: {VERSION}.{GROUP}"),
    ] {
        assert!(yaml.contains(&expected), "no `{expected}` in\n{yaml}");
    }
}

/// The image builds this package's binary and runs it as a non-root user: renaming the
/// package means updating the Dockerfile.
#[test]
fn dockerfile_builds_this_binary_into_a_non_root_image() {
    let dockerfile = include_str!("../Dockerfile");
    let bin = env!("CARGO_PKG_NAME");
    for expected in [
        format!("--bin {bin} "),
        format!("release/{bin}\""),
        "FROM gcr.io/distroless/cc-debian12:nonroot".to_string(),
        "USER 65532:65532".to_string(),
    ] {
        assert!(dockerfile.contains(&expected), "no `{expected}` in the Dockerfile");
    }
}
