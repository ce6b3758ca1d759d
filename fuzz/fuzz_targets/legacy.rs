#![no_main]
use libfuzzer_sys::fuzz_target;
use tchseq_fuzz::checkpoint::{container::legacy, pickle::Node};

fuzz_target!(|data: &[u8]| {
    if let Ok(raw) = legacy::read(data) {
        for n in &raw.pickle.nodes {
            if let Node::Storage(s) = n {
                let _ = raw.storage_bytes(data, s);
            }
        }
    }
});
