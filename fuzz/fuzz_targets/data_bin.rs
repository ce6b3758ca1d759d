#![no_main]
use libfuzzer_sys::fuzz_target;

// The data-bin index parser imports nothing from the crate, so it is compiled in alone.
#[allow(dead_code)]
#[path = "../../src/data/indexed_dataset.rs"]
mod indexed_dataset;
#[path = "../src/data_bin.rs"]
mod data_bin;

fuzz_target!(|data: &[u8]| data_bin::data_bin(data));
