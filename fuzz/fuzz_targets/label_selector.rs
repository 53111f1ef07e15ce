#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| extension_apiserver::fuzzing::label_selector(data));
