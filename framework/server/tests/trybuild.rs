//! Compile-fail tests of `#[derive(Resource)]`: each mistake is an error at the attribute that
//! caused it, and all mistakes of one type are reported together. Cases live in `tests/ui/`;
//! regenerate their `.stderr` files with `TRYBUILD=overwrite` and read the diff.

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
