#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| metrics_adapter::prometheus::fuzz_page(data));
