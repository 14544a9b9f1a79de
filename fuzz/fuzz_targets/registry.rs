#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| stagegraph_fuzz::targets::registry(data));
