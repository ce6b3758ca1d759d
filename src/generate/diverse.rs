//! fairseq 0.12.2 `search.py`: `DiverseBeamSearch.step` and `DiverseSiblingsSearch.step`, op
//! for op. Both keep the penalties in the scores they return, so the hypotheses' scores carry
//! them, as in fairseq.

use tch::{Kind, Tensor};

use super::beam_search::{beam_step, size3, Candidates};
use super::GenerateError;
use crate::generate::InvalidOption;

/// `DiverseBeamSearch.step` with `num_groups` groups and `diversity_strength = -strength`.
pub(super) fn diverse_beam_step(
    step: i64,
    lprobs: &Tensor,
    scores: &Tensor,
    groups: i64,
    strength: f64,
) -> Result<Candidates, GenerateError> {
    let (bsz, beam_size, _) = size3(lprobs)?;
    if groups < 1 || beam_size % groups != 0 {
        return Err(InvalidOption::DiverseGroups.into());
    }
    let mut diversity_buf = lprobs.f_select(1, 0)?.f_zeros_like()?;
    let (mut scores_g, mut indices_g, mut beams_g) = (Vec::new(), Vec::new(), Vec::new());
    for g in 0..groups {
        let lprobs_g = lprobs.f_slice(1, g, None, groups)?;
        let scores_g_in = scores.f_slice(1, g, None, groups)?;
        let lprobs_g = if g > 0 {
            // torch.add(lprobs_g, diversity_buf, alpha=-strength) is one fused multiply-add per
            // element; in f64 the product and the sum are exact, so one rounding remains
            let penalty = diversity_buf.f_unsqueeze(1)?.f_to_kind(Kind::Double)?.f_mul_scalar(-strength)?;
            lprobs_g.f_to_kind(Kind::Double)?.f_add(&penalty)?.f_to_kind(lprobs.kind())?
        } else {
            lprobs_g.f_contiguous()?
        };
        let c = beam_step(step, &lprobs_g, &scores_g_in)?;
        let beams = c.beams.f_mul_scalar(groups)?.f_add_scalar(g)?;
        let ones = c.indices.f_ones_like()?.f_to_kind(diversity_buf.kind())?;
        let _ = diversity_buf.f_scatter_add_(1, &c.indices, &ones)?;
        scores_g.push(c.scores);
        indices_g.push(c.indices);
        beams_g.push(beams);
    }
    // interleave the groups' candidates
    let interleave = |parts: &[Tensor]| -> Result<Tensor, GenerateError> { Ok(Tensor::f_stack(parts, 2)?.f_view([bsz, -1])?) };
    Ok(Candidates { scores: interleave(&scores_g)?, indices: interleave(&indices_g)?, beams: interleave(&beams_g)? })
}

/// `DiverseSiblingsSearch.step` with `diversity_rate = rate`.
pub(super) fn diverse_siblings_step(step: i64, lprobs: &Tensor, scores: &Tensor, rate: f64) -> Result<Candidates, GenerateError> {
    if step == 0 {
        return beam_step(step, lprobs, scores);
    }
    let (bsz, beam_size, vocab_size) = size3(lprobs)?;
    let k = (beam_size * 2).min(beam_size * vocab_size - 1);
    let sibling_score = Tensor::f_arange_start(1, k + 1, (Kind::Int64, lprobs.device()))?
        .f_to_kind(lprobs.kind())?
        .f_mul_scalar(rate)?;
    let lprobs = lprobs.f_add(&scores.f_select(2, step - 1)?.f_unsqueeze(-1)?)?;
    let (mut s_list, mut i_list) = (Vec::new(), Vec::new());
    for i in 0..beam_size {
        let (s, idx) = lprobs.f_select(1, i)?.f_view([bsz, -1])?.f_topk(k, -1, true, true)?;
        i_list.push(idx.f_fmod(vocab_size)?);
        s_list.push(s.f_sub(&sibling_score)?);
    }
    let indices = Tensor::f_stack(&i_list, 1)?.f_view([bsz, -1])?;
    let (final_scores, final_indices) = Tensor::f_stack(&s_list, 1)?.f_view([bsz, -1])?.f_topk(k, -1, true, true)?;
    let final_beams = final_indices.f_floor_divide_scalar(k)?;
    let final_indices = indices.f_gather(1, &final_indices, false)?;
    Ok(Candidates { scores: final_scores, indices: final_indices, beams: final_beams })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn f32s(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.view([-1])).unwrap()
    }

    fn i64s(t: &Tensor) -> Vec<i64> {
        Vec::<i64>::try_from(t.view([-1])).unwrap()
    }

    #[test]
    fn the_second_group_avoids_the_first_groups_tokens() {
        // one sentence, beam 2 in 2 groups of 1, vocabulary 4; both beams see the same lprobs
        let row = [-0.1f32, -0.2, -3.0, -4.0];
        let l = Tensor::from_slice(&[row, row].concat()).view([1, 2, 4]);
        let s = Tensor::zeros([1, 2, 0], (Kind::Float, Device::Cpu));
        let c = diverse_beam_step(0, &l, &s, 2, 1.0).unwrap();
        // group 0 takes tokens 0 and 1; group 1 sees them at -1.1 and -1.2, so its order stays,
        // interleaved: g0 c0, g1 c0, g0 c1, g1 c1
        assert_eq!(i64s(&c.indices), [0, 0, 1, 1]);
        assert_eq!(f32s(&c.scores), [-0.1, -1.1, -0.2, -1.2]);
        assert_eq!(i64s(&c.beams), [0, 1, 0, 1]);
        assert!(diverse_beam_step(0, &l, &s, 3, 1.0).is_err(), "beam 2 in 3 groups");
    }

    #[test]
    fn siblings_lose_their_rank_times_the_rate() {
        let l = Tensor::from_slice(&[-1.0f32, -2.0, -3.0, -4.0, -5.0, -0.5, -0.75, -9.0, -9.5, -10.0]).view([1, 2, 5]);
        let s = Tensor::from_slice(&[0.0f32, -1.0]).view([1, 2, 1]);
        let c = diverse_siblings_step(1, &l, &s, 1.0).unwrap();
        // k = 4; beam 0: -1,-2,-3,-4 minus 1..4 -> -2,-4,-6,-8; beam 1: -1.5,-1.75,.. -> -2.5,-3.75,..
        assert_eq!(f32s(&c.scores), [-2.0, -2.5, -3.75, -4.0]);
        assert_eq!(i64s(&c.indices), [0, 0, 1, 1]);
        assert_eq!(i64s(&c.beams), [0, 1, 1, 0]);
    }
}
