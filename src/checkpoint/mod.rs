//! Reading fairseq checkpoints: pickle VM, torch containers, fairseq upgrades.
