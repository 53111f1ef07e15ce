#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| extension_apiserver::fuzzing::cel(data));
