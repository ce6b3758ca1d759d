//! The libtorch-free layers of tchseq's checkpoint reader, compiled from the main crate's
//! sources so the fuzz targets exercise exactly that code.
#![allow(dead_code)]

pub mod checkpoint {
    #[path = "../../../src/checkpoint/pickle.rs"]
    pub mod pickle;
    #[path = "../../../src/checkpoint/pyjson.rs"]
    pub mod pyjson;
    #[path = "../../../src/checkpoint/container/mod.rs"]
    pub mod container;
}

/// Everything a checkpoint reader does with bytes before libtorch: container, pickle, the
/// storage byte ranges of every tensor (CRC checks included) and the config tree.
pub fn read_all(data: &[u8]) {
    use checkpoint::pickle::Node;
    let Ok(raw) = checkpoint::container::read(data) else { return };
    let p = &raw.pickle;
    let _ = checkpoint::pyjson::to_json(p, &p.root);
    for n in &p.nodes {
        if let Node::Storage(s) = n {
            let _ = raw.storage_bytes(data, s);
        }
    }
}
