//! Every numeric tolerance a test holds tchseq to against a golden made on another CPU, with the
//! drift it was derived from. The goldens carry the bits of the CPU that made them; ATen and MKL
//! pick other kernels on other CPUs (AVX2 / AVX-512, Intel / AMD), and the last bits move.
//!
//! The drift was measured by `tests/drift.sh`: the golden tests under nine kernel settings on an
//! AMD Zen 4 (ATen's default, AVX2 and AVX-512 kernels, MKL's COMPATIBLE, AVX, AVX2 and AVX-512
//! code paths, both pinned, and two threads) against goldens made on a Zen 1 and an Intel Xeon.
//! Each limit is about twice the largest drift seen (docs/testing.md has the table). Where the
//! bits are pinned (reproducible mode against the pinned goldens of the same CPU vendor, a
//! comparison on one machine), tests compare bits, not within these.
//!
//! `TCHSEQ_DRIFT_LOG=FILE` appends each difference checked here to FILE (`name<TAB>difference`),
//! which is how `tests/drift.sh` measures.

use std::io::Write;

/// A named limit on |ours - golden|.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub name: &'static str,
    pub limit: f64,
}

/// A sentence score as beam search prints it (`H-`/`D-`, base 2, fairseq's f32 printed in full):
/// largest drift 1.41e-5 (the `untied` fixture, beam 4 + lenpen 0.6, ATen's default kernels).
/// The same limit proves a near-tie (fairseq's score for its hypothesis against ours,
/// force-decoded).
pub const SENTENCE_SCORE: Tolerance = Tolerance { name: "sentence score (base 2)", limit: 3e-5 };

/// A positional score (`P-`), printed with 4 decimals: any drift can flip the last digit, so the
/// limit is one unit of it. A moved score still shows in the full-precision `H-` score.
pub const POSITIONAL_SCORE: Tolerance = Tolerance { name: "positional score (4 decimals)", limit: 1e-4 + 1e-9 };

/// One attention probability of a soft alignment (`A-` with `--print-alignment soft`), printed
/// with 6 decimals: a drift can flip the last digit, so the limit is one unit of it and as much
/// again for the drift. On one machine the bytes are fairseq's (`make parity`); the drift across
/// CPUs has not been measured.
pub const SOFT_ALIGNMENT: Tolerance = Tolerance { name: "soft alignment probability (6 decimals)", limit: 2e-6 + 1e-9 };

/// A sentence's average log-probability from `score` (base e) against `--score-reference`'s:
/// largest drift 4.2e-6 (MKL's COMPATIBLE code path).
pub const SCORED_SENTENCE: Tolerance = Tolerance { name: "scored sentence (base e)", limit: 1e-5 };

/// A figure of `score`'s summary line (mean avg_logprob; the log of the corpus perplexity),
/// printed with 4 decimals, against the same figure computed from fairseq's own `H-`/`P-` lines:
/// the print rounds by up to 5e-5 and the drift of the sentence scores (4.2e-6, above) adds to it.
pub const SUMMARY_FIGURE: Tolerance = Tolerance { name: "score summary figure (4 decimals)", limit: 5e-5 + 1e-5 };

/// One token's log-probability of a language model (eval-lm prints 6 decimals, base e): largest
/// drift 4.3e-6 (ATen's default kernels).
pub const TOKEN_LOGPROB: Tolerance = Tolerance { name: "token log-probability (base e)", limit: 1e-5 };

/// An end-to-end logit (encoder and decoder from the golden's tokens alone) against fairseq's,
/// beyond the activation tolerance's relative part (|ours - theirs| - 1e-5 * |theirs|): fp32
/// rounding compounds over the layers, largest drift 2.4e-5 (one near-zero logit of the `untied`
/// fixture on an Intel Xeon, 2026-11-24; 2.3e-5 under ATen's default kernels on a Zen 4). `verify` also compares logits computed from fairseq's
/// own last decoder state, which carry only the output layer's rounding, within 1e-5.
pub const END_TO_END_LOGIT: Tolerance = Tolerance { name: "end-to-end logit (beyond 1e-5 relative)", limit: 5e-5 };

/// `score --compute-type float32` against `--score-reference`'s sentence score (base e): the
/// fused host kernels add their own rounding to the cross-CPU drift. Largest drift 3.35e-6 on a
/// Zen 4 (AVX-512 kernels), 3.25e-6 under `MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2`, and 3.35e-6
/// with the AVX-512 host kernels hidden (`TCHSEQ_CPU_FEATURES_OFF`; 2026-11-29).
pub const FLOAT32_SCORED_SENTENCE: Tolerance = Tolerance { name: "float32 scored sentence (base e)", limit: 1e-5 };

/// float32 against exact on the same machine, per hypothesis score and per positional score
/// (base e, full precision): only the fused kernels' rounding differs. Largest difference
/// 3.05e-5 over 8,183 scores of the bundled model, the fixtures and the multilingual models
/// (2026-11-29, Zen 4: native kernels, AVX2-pinned ATen, and the AVX2 host kernels alike).
pub const FLOAT32_AGAINST_EXACT: Tolerance = Tolerance { name: "float32 against exact (base e)", limit: 6e-5 };

/// A log-probability of a model halved to float16 against fairseq's fp32 golden (the `postnorm`
/// fixture's decoder): fp16 rounding of weights and activations. Largest difference 0.112
/// (Zen 4, native and AVX2 kernels alike, 2026-11-29); the argmax agrees everywhere.
pub const HALF_LOG_PROB: Tolerance = Tolerance { name: "float16 log-probability against fp32", limit: 0.25 };

/// The same for bfloat16 (8 bits of mantissa): largest difference 0.650, the argmax agreeing on
/// 98% of the positions (Zen 4, native and AVX2-pinned kernels alike, 2026-11-29).
pub const BFLOAT16_LOG_PROB: Tolerance = Tolerance { name: "bfloat16 log-probability against fp32", limit: 1.3 };

/// A number of a transcript in the README and docs/ against what this build prints: the pages
/// print scores with 4 decimals or fairseq's full f32; one unit of the fourth decimal (relative
/// beyond 1) covers the print and the sentence-score drift above (1.41e-5).
pub const TRANSCRIPT_NUMBER: Tolerance = Tolerance { name: "transcript number (4 decimals, relative beyond 1)", limit: 1e-4 };

/// A sentence's `score` average log-probability (base e) in one batch against another: padding
/// and GEMM shapes move the low bits, as in fairseq. Largest difference 4.2e-6 (2026-11-29,
/// Zen 4, native and AVX2-pinned kernels).
pub const BATCH_COMPOSITION: Tolerance = Tolerance { name: "scored sentence, one batching against another (base e)", limit: 1e-5 };

/// The encoder's regular path against fairseq's fast path golden (the `postnorm` fixture): the
/// two paths sum in other orders. Largest difference 1.2e-6 (2026-11-29, Zen 4); the limit is
/// the activation contract of `verify` (1e-5).
pub const REGULAR_PATH: Tolerance = Tolerance { name: "encoder regular path against the fast path", limit: 1e-5 };

/// Forced decoding of beam search's best hypothesis against beam search's own unnormalized score
/// (base e): the same tokens through another batch shape. Largest difference 1.1e-6 (2026-11-29,
/// Zen 4); the limit is that of a scored sentence against fairseq's (`SCORED_SENTENCE`).
pub const FORCED_DECODING: Tolerance = Tolerance { name: "forced decoding against the beam's score (base e)", limit: 1e-5 };

/// An activation (encoder and decoder states, attention, positions) against fairseq's: the
/// documented contract of `verify`, |ours - theirs| <= 1e-5 + 1e-5 * |theirs|. This is its
/// absolute part; [`ACTIVATION_RELATIVE`] the relative one. The fixtures' goldens stay inside it
/// under `tests/drift.sh`'s nine kernel settings (docs/testing.md).
pub const ACTIVATION: Tolerance = Tolerance { name: "activation (beyond 1e-5 relative)", limit: 1e-5 };
pub const ACTIVATION_RELATIVE: f64 = 1e-5;

/// Two printings, or a sum or quotient, of the same f32 numbers of one run (a CSV cell against
/// its JSON twin, `logprob / tokens` against `avg_logprob`, an attention row's sum against 1):
/// f32 rounding, 6e-8 relative, on values under 100 is at most 6e-6.
pub const SAME_RUN_F32: Tolerance = Tolerance { name: "one run's f32 numbers against each other", limit: 1e-5 };

/// The host kernels against libtorch on the same machine (the unit tests of `src/kernels/`,
/// random inputs from each test's own generator): only the order of the sums differs.
///
/// A linear layer's output, f32 panels against `linear` (`gemm.rs`, `gemm_nt.rs`): inputs of up
/// to 2,100 products of standard normals. Largest difference 8.0e-5 (2026-12-03, Zen 4, the AVX-512 and
/// AVX2 kernels: a few ulps of outputs near 180).
pub const HOST_LINEAR: Tolerance = Tolerance { name: "host f32 linear against libtorch's", limit: 1e-4 };

/// The same with bfloat16 panels (`gemm_bf16.rs`) against `linear` of the bfloat16-rounded
/// operands: libtorch's and the kernel's f32 sums of the same products. Largest difference
/// 1.4e-4 (2026-12-03, Zen 4).
pub const HOST_BF16_LINEAR: Tolerance = Tolerance { name: "host bfloat16 linear against libtorch's", limit: 1e-3 };

/// A reduction over one row (layer norm, log-softmax, one query's attention, the fused path's
/// attention in steps) against libtorch's. Largest difference 7.6e-6 (2026-12-03, Zen 4; layer norm of
/// inputs up to 10 in magnitude).
pub const HOST_REDUCTION: Tolerance = Tolerance { name: "host reduction against libtorch's", limit: 1e-5 };

/// Attention over a fixed-capacity cache (positions not written masked by -inf) against
/// attention over the grown cache (`model/fixed_cache.rs`). Largest difference
/// 2.4e-7 (2026-12-03, Zen 4).
pub const MASKED_CAPACITY: Tolerance = Tolerance { name: "attention over a masked capacity against the grown cache", limit: 1e-6 };

/// One formula computed two ways on a handful of values (`gelu_accurate` against libtorch's
/// `gelu(tanh)`). Largest difference 0 (2026-12-03, Zen 4).
pub const SAME_FORMULA: Tolerance = Tolerance { name: "one formula, ours against libtorch's", limit: 1e-6 };

/// The fixed-capacity cache against the growing one through beam search (`tests/it/fixed_cache.rs`),
/// a hypothesis's score when both find it. float32: largest difference 1.7e-6 (2026-12-03, Zen 4).
pub const FIXED_CACHE_FLOAT32: Tolerance = Tolerance { name: "fixed cache against growing, float32 score", limit: 1e-5 };

/// The same under float16, whose products round differently at another batch shape: largest
/// difference 4.9e-3 (2026-12-03, Zen 4).
pub const FIXED_CACHE_FLOAT16: Tolerance = Tolerance { name: "fixed cache against growing, float16 score", limit: 1e-2 };

/// The share of hypotheses float16 with the fixed cache keeps of the growing cache's (the GPU
/// goal for float16 against float32); measured 409 of 410 (99.8%, Zen 4).
pub const FIXED_CACHE_FLOAT16_SAME_HYPOTHESES: f64 = 0.98;

/// The share of positions where a model halved to float16 or bfloat16 picks fairseq's fp32
/// argmax (`tests/it/model.rs`); measured 98% (bfloat16) to 100% (Zen 4,
/// native and AVX2-pinned kernels alike).
pub const HALF_ARGMAX_AGREEMENT: f64 = 0.9;

impl Tolerance {
    /// Whether `diff` (an absolute difference) is within the limit; records it for
    /// `TCHSEQ_DRIFT_LOG`. A NaN difference is never within.
    pub fn holds(&self, diff: f64) -> bool {
        record(self.name, diff);
        diff <= self.limit
    }

    /// Asserts [`Self::holds`] for |ours - theirs|, naming `what`.
    pub fn assert(&self, ours: f64, theirs: f64, what: &str) {
        let diff = (ours - theirs).abs();
        assert!(self.holds(diff), "{what}: ours {ours}, golden {theirs}: |diff| {diff:e} over the {} limit {:e}", self.name, self.limit);
    }
}

fn record(name: &str, diff: f64) {
    let Ok(path) = std::env::var("TCHSEQ_DRIFT_LOG") else { return };
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap_or_else(|e| panic!("TCHSEQ_DRIFT_LOG {path}: {e}"));
    // one write per line, so that parallel tests do not interleave
    f.write_all(format!("{name}\t{diff:e}\n").as_bytes()).unwrap();
}
