//! The batches of one pass over a binarized split, as fairseq-generate gets them from
//! `task.get_batch_iterator(...).next_epoch_itr(shuffle=False)`: `ordered_indices` of the
//! `LanguagePairDataset` under `numpy_seed(seed)`, `filter_indices_by_size` against the
//! max positions, `batch_by_size` with `--required-batch-size-multiple`, then the
//! `ShardedIterator` of `--distributed-world-size`/`--distributed-rank`.

use super::batching::{batch_by_size, numpy_permutation};

/// How the split is batched (fairseq's dataset and distributed settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochOptions {
    /// `--max-tokens` (fairseq-generate: 12000 when neither limit is given).
    pub max_tokens: Option<usize>,
    /// `--batch-size`.
    pub max_sentences: Option<usize>,
    /// `--required-batch-size-multiple` (8 by default).
    pub required_batch_size_multiple: usize,
    /// The most source and target tokens a pair may have (`resolve_max_positions` of the task's
    /// and the models').
    pub max_positions: (usize, usize),
    /// `--skip-invalid-size-inputs-valid-test`: a pair over `max_positions` is dropped, not an
    /// error.
    pub ignore_invalid_inputs: bool,
    /// `LanguagePairDataset.shuffle`: the translation task shuffles every split but `test`.
    pub shuffle: bool,
    /// `--seed`.
    pub seed: u32,
    /// Shards of the batch list, and the one taken.
    pub num_shards: usize,
    pub shard_id: usize,
}

/// A pair longer than the max positions, without `--skip-invalid-size-inputs-valid-test`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("size of sample #{index} is invalid (={src}, {tgt}) since max_positions=({}, {})", max.0, max.1)]
pub struct InvalidSize {
    pub index: usize,
    pub src: usize,
    pub tgt: usize,
    pub max: (usize, usize),
}

/// The batches, in the order fairseq runs them, and the pairs left out for their size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Epoch {
    pub batches: Vec<Vec<usize>>,
    pub skipped: Vec<usize>,
}

/// `LanguagePairDataset.ordered_indices()`: a permutation (when shuffling), then a stable sort
/// by target length, then a stable sort by source length.
pub fn pair_ordered_indices(src_sizes: &[usize], tgt_sizes: Option<&[usize]>, shuffle: bool, seed: u32) -> Vec<usize> {
    let mut indices: Vec<usize> = if shuffle { numpy_permutation(src_sizes.len(), seed) } else { (0..src_sizes.len()).collect() };
    // np.argsort(kind="mergesort") is stable, as sort_by_key is
    if let Some(tgt) = tgt_sizes {
        indices.sort_by_key(|&i| tgt[i]);
    }
    indices.sort_by_key(|&i| src_sizes[i]);
    indices
}

/// The pass's batches over pairs of `src_sizes` and `tgt_sizes` tokens (EOS included).
pub fn epoch_batches(src_sizes: &[usize], tgt_sizes: Option<&[usize]>, options: &EpochOptions) -> Result<Epoch, InvalidSize> {
    let tgt_of = |i: usize| tgt_sizes.map_or(0, |t| t[i]);
    let indices = pair_ordered_indices(src_sizes, tgt_sizes, options.shuffle, options.seed);
    let (max_src, max_tgt) = options.max_positions;
    let too_long = |i: usize| src_sizes[i] > max_src || tgt_of(i) > max_tgt;
    let (kept, skipped): (Vec<usize>, Vec<usize>) = indices.iter().partition(|&&i| !too_long(i));
    if let (false, Some(&index)) = (options.ignore_invalid_inputs, skipped.first()) {
        return Err(InvalidSize { index, src: src_sizes[index], tgt: tgt_of(index), max: options.max_positions });
    }
    // num_tokens_vec: the longer side of each pair
    let num_tokens: Vec<usize> = kept.iter().map(|&i| src_sizes[i].max(tgt_of(i))).collect();
    let batches = batch_by_size(&kept, &num_tokens, options.max_tokens, options.max_sentences, options.required_batch_size_multiple);
    let (num_shards, shard_id) = (options.num_shards.max(1), options.shard_id);
    // ShardedIterator pads a short shard with empty batches, which the loop skips
    let batches = batches.into_iter().skip(shard_id).step_by(num_shards).collect();
    Ok(Epoch { batches, skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> EpochOptions {
        EpochOptions {
            max_tokens: None,
            max_sentences: Some(2),
            required_batch_size_multiple: 1,
            max_positions: (1024, 1024),
            ignore_invalid_inputs: false,
            shuffle: false,
            seed: 1,
            num_shards: 1,
            shard_id: 0,
        }
    }

    #[test]
    fn pairs_are_ordered_by_source_then_target_length() {
        // np.arange(5), argsort by tgt then by src (both mergesort)
        let order = pair_ordered_indices(&[3, 2, 3, 2, 1], Some(&[4, 5, 1, 2, 9]), false, 1);
        assert_eq!(order, vec![4, 3, 1, 2, 0]);
        assert_eq!(pair_ordered_indices(&[3, 2, 3, 2, 1], None, false, 1), vec![4, 1, 3, 0, 2]);
    }

    #[test]
    fn too_long_pairs_are_an_error_or_skipped() {
        let mut o = EpochOptions { max_positions: (2, 4), ..options() };
        let err = epoch_batches(&[3, 2, 1], Some(&[1, 5, 1]), &o).unwrap_err();
        // the first one in sorted order
        assert_eq!(err, InvalidSize { index: 1, src: 2, tgt: 5, max: (2, 4) });
        o.ignore_invalid_inputs = true;
        let epoch = epoch_batches(&[3, 2, 1], Some(&[1, 5, 1]), &o).unwrap();
        assert_eq!(epoch.batches, vec![vec![2]]);
        assert_eq!(epoch.skipped, vec![1, 0]);
    }

    #[test]
    fn shards_take_every_nth_batch() {
        let sizes = [1, 2, 3, 4, 5, 6, 7];
        let all = epoch_batches(&sizes, None, &options()).unwrap().batches;
        assert_eq!(all.len(), 4);
        let second = epoch_batches(&sizes, None, &EpochOptions { num_shards: 3, shard_id: 1, ..options() }).unwrap().batches;
        assert_eq!(second, vec![all[1].clone()]);
        let third = epoch_batches(&sizes, None, &EpochOptions { num_shards: 3, shard_id: 2, ..options() }).unwrap().batches;
        assert_eq!(third, vec![all[2].clone()]);
        let first = epoch_batches(&sizes, None, &EpochOptions { num_shards: 3, shard_id: 0, ..options() }).unwrap().batches;
        assert_eq!(first, vec![all[0].clone(), all[3].clone()]);
    }
}
