//! What a search cannot be asked: each refusal with the values that make it one.

use crate::config::ComputeType;
use crate::generate::lm_samples::BlockError;

/// A generation option or request the search refuses ([`super::GenerateError::InvalidOption`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOption {
    #[error("beam size must be at least 1")]
    BeamSize,
    #[error("temperature must be greater than 0")]
    Temperature,
    #[error("target dictionary has fewer than 2 symbols")]
    TinyDictionary,
    /// fairseq's own words for `--min-len` above the length limit of a batch.
    #[error("min_len cannot be larger than max_len ({min_len} > {max_len}), please adjust these")]
    MinLen { min_len: i64, max_len: i64 },
    #[error("a target prefix cannot contain the end-of-sentence symbol")]
    PrefixWithEos,
    #[error("target-side constraints were provided, but the search does not support them")]
    ConstraintsUnsupported,
    #[error("diverse beam search requires the beam size to be divisible by the number of groups")]
    DiverseGroups,
    #[error("a constraint must hold at least one token")]
    EmptyConstraint,
    /// A constraint token outside the target dictionary (or `<s>`, which would cut it short).
    #[error("constraint token {0} is not a target word")]
    ConstraintToken(i64),
    /// fairseq's `new_scores_buf[sentno] = scores` fails the same way.
    #[error("constrained search needs {width} candidates per sentence, the vocabulary gives {given}")]
    ConstrainedWidth { width: i64, given: usize },
    #[error(
        "--no-repeat-ngram-size 1 with --ngram-blocking fairseq-cuda bans the end of sentence (every hypothesis \
         starts with it), so no hypothesis could end: fairseq's CUDA kernel fails the same way. Use a size of 2 or \
         more, or fairseq 0.12.2's CPU blocking (the default)"
    )]
    UnigramBlocksEos,
    #[error("an ensemble needs at least one model")]
    EmptyEnsemble,
    /// Per-sentence guides that are not one per sentence.
    #[error("{guides} target prefixes or constraints for {sentences} sentences")]
    GuideCount { guides: usize, sentences: usize },
    #[error("seed {0} is too large")]
    Seed(u64),
    #[error("batch_size must be at least 1")]
    BatchSize,
    /// A request for another compute type than the one the model was loaded in.
    #[error("compute_type {:?}: this model runs in {:?}", .asked.name(), .runs.name())]
    ComputeType { asked: ComputeType, runs: ComputeType },
    /// A language model's blocks that cannot be cut.
    #[error(transparent)]
    Block(#[from] BlockError),
}
