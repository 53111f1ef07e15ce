#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| apiserver::fuzzing::query(data));
