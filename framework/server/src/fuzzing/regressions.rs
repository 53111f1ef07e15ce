//! Every fuzz target (`crate::fuzzing`) over its seed corpus and over the inputs that
//! once made it fail (`fuzz/corpus/<target>`, `fuzz/regressions/<target>`), in the normal
//! suite: what the fuzzers found stays fixed.

use std::path::Path;

#[test]
fn every_target_holds_on_its_seeds_and_past_failures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut ran = 0;
    for (name, target) in super::TARGETS {
        let mut inputs = 0;
        for folder in ["corpus", "regressions"] {
            let dir = root.join(folder).join(name);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name} fails on {}", path.display());
                inputs += 1;
            }
        }
        assert!(inputs > 0, "{name} has no seed in fuzz/corpus/{name}");
        ran += inputs;
    }
    assert!(ran >= super::TARGETS.len());
}
