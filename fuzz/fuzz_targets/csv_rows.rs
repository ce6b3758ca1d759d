#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tchseq_fuzz::csv_rows::csv_rows(data));
