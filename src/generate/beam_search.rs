//! fairseq 0.12.2 `search.py`'s `BeamSearch.step`, op for op, and the candidates every search
//! step returns. The other searches build on it (`search.rs`, `diverse.rs`,
//! `constrained_search.rs`).

use tch::{Kind, Tensor};

use super::GenerateError;
use crate::libtorch::host::f32_view;

/// `(scores, indices, beams)` of one search step, each `[bsz, cand_size]`.
pub struct Candidates {
    pub scores: Tensor,
    pub indices: Tensor,
    pub beams: Tensor,
}

pub(super) fn size3(t: &Tensor) -> Result<(i64, i64, i64), GenerateError> {
    match t.size().as_slice() {
        &[a, b, c] => Ok((a, b, c)),
        other => Err(GenerateError::Invariant(format!("expected a 3-d tensor, got {other:?}"))),
    }
}

/// `scores[:, :, column]`, flattened; read on the host when `scores` is a contiguous f32 tensor.
fn score_column(scores: &Tensor, column: i64) -> Result<Vec<f32>, GenerateError> {
    let (_, _, len) = size3(scores)?;
    // SAFETY: nothing writes `scores` during the call.
    if let (Some(data), true) = (unsafe { f32_view(scores) }, (0..len).contains(&column)) {
        return Ok(data.iter().skip(column as usize).step_by(len as usize).copied().collect());
    }
    Ok(Vec::<f32>::try_from(scores.f_select(2, column)?.f_contiguous()?.f_view([-1])?)?)
}

/// `BeamSearch.step`: the best `2 × beam` extensions of each sentence's beams.
pub(super) fn beam_step(step: i64, lprobs: &Tensor, scores: &Tensor) -> Result<Candidates, GenerateError> {
    match host_beam_step(step, lprobs, scores)? {
        Some(candidates) => Ok(candidates),
        None => torch_beam_step(step, lprobs, scores),
    }
}

/// [`beam_step`] on log-probs whose NaN `_generate` has not yet made −inf: where the host's
/// top-k answers there were none in what it read (it refuses NaN), and otherwise they are
/// replaced here, before libtorch's top-k, as `_generate` replaces them. This spares the pass
/// over `[rows, V]` that `lprobs[lprobs != lprobs] = -inf` costs; the masks `_generate` applies
/// in between (padding, unknown-word penalty, EOS) give the same values either way.
pub(super) fn beam_step_replacing_nan(step: i64, lprobs: &Tensor, scores: &Tensor) -> Result<Candidates, GenerateError> {
    if let Some(candidates) = host_beam_step(step, lprobs, scores)? {
        return Ok(candidates);
    }
    let mut lprobs = lprobs.shallow_clone();
    let _ = lprobs.f_nan_to_num_(f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY)?;
    torch_beam_step(step, &lprobs, scores)
}

/// The candidates chosen on the host (`beam_topk.rs`); None where it does not answer (not a CPU
/// f32 tensor, NaN, ties).
fn host_beam_step(step: i64, lprobs: &Tensor, scores: &Tensor) -> Result<Option<Candidates>, GenerateError> {
    let (bsz, beam_size, vocab_size) = size3(lprobs)?;
    let k = candidates_per_sentence(step == 0, beam_size, vocab_size);
    if lprobs.device() != tch::Device::Cpu || lprobs.kind() != Kind::Float || scores.kind() != Kind::Float {
        return Ok(None);
    }
    let prev = match step {
        0 => None,
        _ => Some(score_column(scores, step - 1)?),
    };
    let Some(top) = super::beam_topk::beam_topk(lprobs, prev.as_deref(), k as usize) else {
        return Ok(None);
    };
    let (scores, indices, beams) = super::beam_topk::candidates(top, bsz, k, vocab_size)?;
    Ok(Some(Candidates { scores, indices, beams }))
}

/// `BeamSearch.step`'s `k`: `2 × beam`, or one less than the candidates there are (only the
/// first beam's at the first step).
pub(super) fn candidates_per_sentence(first_step: bool, beam_size: i64, vocab_size: i64) -> i64 {
    let width = if first_step { vocab_size } else { beam_size * vocab_size };
    (beam_size * 2).min(width - 1)
}

/// `BeamSearch.step` in libtorch's ops.
fn torch_beam_step(step: i64, lprobs: &Tensor, scores: &Tensor) -> Result<Candidates, GenerateError> {
    let (_, beam_size, vocab_size) = size3(lprobs)?;
    let k = candidates_per_sentence(step == 0, beam_size, vocab_size);
    let lprobs = if step == 0 {
        // at the first step all hypotheses are equally likely, so use only the first beam
        lprobs.f_slice(1, 0, None, beam_size)?.f_contiguous()?
    } else {
        let prev = scores.f_select(2, step - 1)?.f_unsqueeze(-1)?;
        lprobs.f_add(&prev)?
    };
    top_candidates(&lprobs, k)
}

/// `BeamSearch.step`'s `topk` over `lprobs` `[bsz, beams, V]` that already hold the cumulative
/// scores (or the first beam only, at step 0).
pub(super) fn top_candidates(lprobs: &Tensor, k: i64) -> Result<Candidates, GenerateError> {
    let (bsz, _, vocab_size) = size3(lprobs)?;
    let flat = lprobs.f_view([bsz, -1])?;
    let (scores_buf, indices_buf) = flat.f_topk(k, -1, true, true)?;
    let beams_buf = indices_buf.f_div_scalar_mode(vocab_size, "trunc")?;
    let indices_buf = indices_buf.f_fmod(vocab_size)?;
    Ok(Candidates { scores: scores_buf, indices: indices_buf, beams: beams_buf })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn score_column_reads_the_host_copy_as_libtorch_selects_it() {
        let scores = Tensor::randn([3, 4, 6], (Kind::Float, Device::Cpu));
        for column in 0..6 {
            let want = Vec::<f32>::try_from(scores.select(2, column).contiguous().view([-1])).unwrap();
            assert_eq!(score_column(&scores, column).unwrap(), want);
            let strided = scores.transpose(0, 1).contiguous().transpose(0, 1);
            assert_eq!(score_column(&strided, column).unwrap(), want);
        }
        assert!(score_column(&scores, 6).is_err());
    }

    fn same(a: &Candidates, b: &Candidates) -> bool {
        a.scores.equal(&b.scores) && a.indices.equal(&b.indices) && a.beams.equal(&b.beams)
    }

    /// With NaN left in, the step's candidates are those of `_generate`'s order (NaN to −inf,
    /// then `BeamSearch.step`), at the first step and later, on the host and through libtorch.
    #[test]
    fn nan_replaced_by_the_beam_step_give_the_candidates_of_nan_replaced_first() {
        let (bsz, beam, vocab) = (3, 4, 50);
        let scores = Tensor::randn([bsz, beam, 3], (Kind::Float, Device::Cpu));
        for nan_at in [None, Some((1, 0, 7)), Some((2, 3, 49))] {
            let lprobs = Tensor::randn([bsz, beam, vocab], (Kind::Float, Device::Cpu)).log_softmax(-1, Kind::Float);
            if let Some((b, h, t)) = nan_at {
                let _ = lprobs.get(b).get(h).get(t).fill_(f64::NAN);
            }
            let mut replaced = lprobs.copy();
            let _ = replaced.nan_to_num_(f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
            for step in [0, 2] {
                let want = beam_step(step, &replaced, &scores).unwrap();
                let got = beam_step_replacing_nan(step, &lprobs.copy(), &scores).unwrap();
                assert!(same(&want, &got), "NaN at {nan_at:?}, step {step}");
                // ties, which the host leaves to libtorch's top-k
                let (tied, mut tied_replaced) = (lprobs.copy(), replaced.copy());
                let _ = tied.get(0).narrow(1, 0, 20).fill_(-1.0);
                let _ = tied_replaced.get(0).narrow(1, 0, 20).fill_(-1.0);
                let _ = tied_replaced.nan_to_num_(f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
                assert!(host_beam_step(step, &tied, &scores).unwrap().is_none());
                let want = beam_step(step, &tied_replaced, &scores).unwrap();
                let got = beam_step_replacing_nan(step, &tied, &scores).unwrap();
                assert!(same(&want, &got), "ties, NaN at {nan_at:?}, step {step}");
            }
        }
    }
}
