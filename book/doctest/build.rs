//! Lists the book's chapters (`../src/*.md`) as modules whose documentation is the chapter, so
//! a new chapter's examples are compiled without anyone adding it here.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    // A directory makes cargo rerun this when any file in it is added, removed or changed.
    println!("cargo::rerun-if-changed={}", src.display());
    let mut chapters: Vec<_> = std::fs::read_dir(&src)
        .expect("book/src")
        .map(|entry| entry.expect("book/src entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    chapters.sort();
    let mut code = String::new();
    for path in &chapters {
        let stem = path.file_stem().unwrap().to_string_lossy();
        let module = stem.replace(['-', '.'], "_").to_lowercase();
        let path = path.canonicalize().unwrap();
        writeln!(
            code,
            "#[doc = include_str!({:?})]",
            path.display().to_string()
        )
        .unwrap();
        writeln!(code, "pub mod {module} {{}}").unwrap();
    }
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("chapters.rs");
    std::fs::write(out, code).unwrap();
}
