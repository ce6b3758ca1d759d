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
    let (bsz, beam_size, vocab_size) = size3(lprobs)?;
    let width = if step == 0 { vocab_size } else { beam_size * vocab_size };
    let k = (beam_size * 2).min(width - 1);
    if lprobs.device() == tch::Device::Cpu && lprobs.kind() == Kind::Float && scores.kind() == Kind::Float {
        let prev = match step {
            0 => None,
            _ => Some(score_column(scores, step - 1)?),
        };
        if let Some(top) = super::beam_topk::beam_topk(lprobs, prev.as_deref(), k as usize) {
            let (scores, indices, beams) = super::beam_topk::candidates(top, bsz, k, vocab_size)?;
            return Ok(Candidates { scores, indices, beams });
        }
    }
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
}
