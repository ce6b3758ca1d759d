//! Search: beam search, sampling, the batching fairseq-interactive does around them, and the
//! sequence scorer (`--score-reference`).
//!
//! [`SequenceGenerator`] is a port of fairseq 0.12.2's `sequence_generator.py`
//! (`SequenceGenerator._generate`), [`search`] of `search.py` (`BeamSearch`, `Sampling`),
//! [`ngram`] of `ngram_repeat_block.py`, [`batching`] of the inference half of
//! `LanguagePairDataset` + `data_utils.batch_by_size`. The generator talks to the models through
//! the [`StepModel`] trait; [`ensemble::EnsembleModel`] implements it for real checkpoints.

pub mod batching;
mod beam_search;
mod beam_topk;
mod constrained_search;
pub mod constraints;
mod diverse;
pub mod ensemble;
pub mod epoch;
mod invalid_option;
pub mod lm_samples;
pub mod lm_step;
pub mod ngram;
pub mod rng_replay;
pub mod scorer;
pub mod search;
pub mod sequence_generator;
pub mod workers;

pub use constraints::ConstraintOrder;
pub use ensemble::EnsembleModel;
pub use invalid_option::InvalidOption;
pub use ngram::NgramMode;
pub use search::SearchStrategy;
pub use sequence_generator::{GenerateRequest, GeneratorConfig, SequenceGenerator};

use tch::Tensor;

#[cfg(test)]
mod base2_tests {
    use super::base2;
    use tch::{Device, Tensor};

    /// Bit for bit what libtorch computes on the CPU (the tensor the CLI once built for it), over
    /// a million scores and the awkward values; the CUDA form is libtorch's product with the
    /// reciprocal, which the CPU computes alike.
    #[test]
    fn base2_on_the_host_is_libtorch_s_division_bit_for_bit() {
        let mut values: Vec<f32> = crate::testing::TestRng::new(2).randn([1_000_000]).try_into().unwrap();
        values.iter_mut().step_by(3).for_each(|v| *v *= -40.0);
        values.extend([0.0, -0.0, f32::MIN_POSITIVE, -1e-40, f32::MAX, f32::MIN, f32::INFINITY, f32::NEG_INFINITY, -1.0, -std::f32::consts::LN_2]);
        let cpu: Vec<f32> = Tensor::from_slice(&values).f_div_scalar(std::f64::consts::LN_2).unwrap().try_into().unwrap();
        let reciprocal = f64::from(1.0 / (std::f64::consts::LN_2 as f32));
        let by_reciprocal: Vec<f32> = Tensor::from_slice(&values).f_mul_scalar(reciprocal).unwrap().try_into().unwrap();
        let mut differ = 0;
        for ((v, c), r) in values.iter().zip(&cpu).zip(&by_reciprocal) {
            assert_eq!(base2(*v, Device::Cpu).to_bits(), c.to_bits(), "{v}");
            assert_eq!(base2(*v, Device::Cuda(0)).to_bits(), r.to_bits(), "{v}");
            differ += usize::from(c.to_bits() != r.to_bits());
        }
        // the two roundings really differ, so the device matters
        assert!(differ > 1000, "{differ}");
    }
}

/// Errors of the search code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    /// A state-dict entry the replay of fairseq's initialisation needs is absent.
    #[error("model: missing {key}")]
    MissingWeight { key: String },
    /// A state-dict entry has another number of dimensions than its module's weight.
    #[error("model: {key} is not {dims}-d")]
    WeightDims { key: String, dims: usize },
    #[error("model: {0}")]
    Forward(#[from] crate::model::ModelError),
    #[error("invalid generation option: {0}")]
    InvalidOption(#[from] InvalidOption),
    #[error("internal search invariant violated: {0}")]
    Invariant(String),
    /// A batch's computation panicked; the panic was caught and costs only that batch.
    #[error("internal error (this batch failed; please report it): {0}")]
    Panicked(String),
}

/// One finished hypothesis, as fairseq's `finalize_hypos` stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Generated tokens including the final EOS, without the leading BOS (= EOS).
    pub tokens: Vec<i64>,
    /// Natural-log score, normalized by `len^lenpen` unless `--unnormalized`.
    pub score: f32,
    /// Natural-log per-token scores (differences of cumulative f32 scores), EOS included.
    pub positional_scores: Vec<f32>,
    /// Head-averaged cross-attention of the alignment layer, `[tgt_len][src_len]` (rows are
    /// target positions incl. EOS, columns the padded source positions), when requested.
    pub attention: Option<Vec<Vec<f32>>>,
    /// Hard alignment `(src_word, tgt_word)` pairs (fairseq's `extract_hard_alignment`).
    pub alignment: Option<Vec<(i64, i64)>>,
}

/// fairseq-interactive's `score / math.log(2)` (its H- and P- lines), on the host, with the bits
/// libtorch computes on the score's `device`: a true f32 division on the CPU, and on CUDA a
/// product with the f32 reciprocal (libtorch's `div_true_kernel` takes that shortcut for a scalar
/// divisor there).
pub fn base2(score: f32, device: tch::Device) -> f32 {
    let ln2 = std::f64::consts::LN_2 as f32;
    if device.is_cuda() {
        score * (1.0 / ln2)
    } else {
        score / ln2
    }
}

/// What the generator needs from a model (fairseq's `EnsembleModel` as `_generate` uses it).
///
/// The implementation keeps the encoder output and the incremental state of the current batch.
pub trait StepModel {
    /// `model.max_decoder_positions()` (the minimum over an ensemble).
    fn max_decoder_positions(&self) -> usize;
    /// Runs the encoder on `src_tokens` (`[B, S]`, left-padded) and reorders its output with
    /// `new_order` (`arange(B).repeat_interleave(beam)`); resets the incremental state.
    fn begin(&mut self, src_tokens: &Tensor, new_order: &Tensor) -> Result<(), GenerateError>;
    /// `reorder_incremental_state` then `reorder_encoder_out` with `new_order`.
    fn reorder(&mut self, new_order: &Tensor) -> Result<(), GenerateError>;
    /// `forward_decoder(tokens[:, :step+1], ..., temperature)`: f32 log-probs `[rows, V]` of the
    /// last position, and the head-averaged attention `[rows, S]` when `need_attn`.
    fn forward_decoder(
        &mut self,
        tokens: &Tensor,
        temperature: f64,
        need_attn: bool,
    ) -> Result<(Tensor, Option<Tensor>), GenerateError>;
    /// Where a beam search may keep its bookkeeping.
    fn bookkeeping(&self) -> Bookkeeping {
        Bookkeeping::Tensors
    }
}

/// Where a beam search keeps its bookkeeping (scores, finished hypotheses, reorder indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bookkeeping {
    /// fairseq's tensor ops.
    Tensors,
    /// Host vectors, each step's candidates chosen on the host (every compute type on the CPU).
    Host,
    /// Host vectors, each step's candidates chosen on the device and only they read back (the
    /// fast compute types on a GPU).
    DeviceCandidates,
}
