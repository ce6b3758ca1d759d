#![no_main]
use libfuzzer_sys::fuzz_target;
use tchseq_fuzz::checkpoint::{pickle, pyjson};

fuzz_target!(|data: &[u8]| {
    if let Ok((p, _)) = pickle::parse(data, 0) {
        let _ = pyjson::to_json(&p, &p.root);
    }
});
