//! `--num-shards N --shard-id I`: this process computes buffers I, I+N, I+2N, ... of the input.
//! Buffers, not lines, are dealt out, so every batch is the one a single process makes and the
//! shards' records are bit for bit the single run's.

use anyhow::{bail, Result};

use super::args::ShardArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub num: usize,
    pub id: usize,
}

impl Shard {
    pub fn from_args(a: &ShardArgs) -> Result<Option<Shard>> {
        let Some(num) = a.num_shards else { return Ok(None) };
        if num == 0 {
            bail!("--num-shards must be at least 1");
        }
        if a.shard_id >= num {
            bail!("--shard-id must be between 0 and --num-shards - 1 ({}), not {}", num - 1, a.shard_id);
        }
        Ok(Some(Shard { num, id: a.shard_id }))
    }

    /// Whether buffer `index` (0-based, in input order) is this shard's.
    pub fn takes(&self, index: usize) -> bool {
        index % self.num == self.id
    }
}

/// Whether `shard` (if any) takes buffer `index`.
pub fn takes(shard: Option<Shard>, index: usize) -> bool {
    shard.is_none_or(|s| s.takes(index))
}
