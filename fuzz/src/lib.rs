//! The libtorch-free layers of tchseq's checkpoint reader, compiled from the main crate's
//! sources so the fuzz targets exercise exactly that code.
#![allow(dead_code)]

#[path = "../../src/checkpoint/pickle/mod.rs"]
pub mod pickle;
#[path = "../../src/checkpoint/pyjson.rs"]
pub mod pyjson;
#[path = "../../src/checkpoint/container/mod.rs"]
pub mod container;

/// Mirrors the main crate's paths (`crate::checkpoint::pickle`) used inside the readers.
pub mod checkpoint {
    pub use crate::{container, pickle, pyjson};
}

/// Everything a checkpoint reader does with bytes before libtorch: container, pickle, the
/// storage byte ranges of every tensor (CRC checks included) and the config tree.
pub fn read_all(data: &[u8]) {
    use pickle::Node;
    let Ok(raw) = container::read(data) else { return };
    let p = &raw.pickle;
    let _ = pyjson::to_json(p, &p.root);
    for n in &p.nodes {
        if let Node::Storage(s) = n {
            let _ = raw.storage_bytes(data, s);
        }
    }
}
