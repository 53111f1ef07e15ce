//! The README shows wardle's `main` as the whole server: it must be the real file.

#[test]
fn readme_shows_wardles_real_main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let main = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/main.rs"))
        .expect("src/main.rs");
    let block = format!("```rust\n{main}```");
    assert!(
        readme.contains(&block),
        "README.md must show examples/wardle/src/main.rs verbatim in a ```rust block"
    );
}
