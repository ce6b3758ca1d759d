#![no_main]
use libfuzzer_sys::fuzz_target;
use tchseq_fuzz::checkpoint::{container::safetensors, pickle::Node};

fuzz_target!(|data: &[u8]| {
    if let Ok(raw) = safetensors::read(data) {
        for n in &raw.pickle.nodes {
            if let Node::Storage(s) = n {
                let _ = raw.storage_bytes(data, s);
            }
        }
    }
});
