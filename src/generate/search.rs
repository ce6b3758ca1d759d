//! fairseq 0.12.2 `search.py`: which search a generator runs, and `Sampling.step`, op for op.
//! `BeamSearch.step` is in `beam_search.rs`, the diverse searches in `diverse.rs`; this file
//! dispatches to them.

use tch::{Kind, Tensor};

pub use super::beam_search::Candidates;
use super::beam_search::{beam_step, size3};
use super::GenerateError;

/// Which `Search` subclass `build_generator` picks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SearchStrategy {
    /// `BeamSearch`: 2×beam candidates per sentence.
    Beam,
    /// `Sampling(sampling_topk, sampling_topp)`: beam candidates per sentence, drawn with
    /// `torch.multinomial` from libtorch's default CPU generator.
    Sampling { topk: i64, topp: f64 },
    /// `DiverseBeamSearch(num_groups, diversity_strength)` (`--diverse-beam-groups`,
    /// `--diverse-beam-strength`): the beam split into groups, each penalised for the tokens
    /// the groups before it chose at this step.
    DiverseBeam { groups: i64, strength: f64 },
    /// `DiverseSiblingsSearch(diversity_rate)` (`--diversity-rate`): the k-th best extension of
    /// each hypothesis loses `k * rate`.
    DiverseSiblings { rate: f64 },
    /// `LengthConstrainedBeamSearch(min_len_a=1, min_len_b=0, max_len_a=1, max_len_b=0)`, which
    /// `--match-source-len` selects: EOS only at the source length (EOS and padding not counted).
    MatchSourceLen,
    /// `LexicallyConstrainedBeamSearch(representation)` (`--constraints`): stateful, so the
    /// generator runs it (`constrained_search.rs`) with each sentence's constraints.
    LexicallyConstrained(super::constraints::ConstraintOrder),
}

impl SearchStrategy {
    /// Candidates per sentence for a beam of `beam_size` (`cand_size` in `_generate`).
    pub fn cand_size(&self, beam_size: i64) -> i64 {
        // `_generate` allocates `2 * beam_size` offsets whatever the search; `Sampling` returns
        // only beam_size candidates.
        2 * beam_size
    }

    /// `search.step(step, lprobs, scores)`: `lprobs` is `[bsz, beam, V]`, `scores` is
    /// `[bsz, beam, step]` (cumulative scores so far), `src_lengths` `[bsz]` (what
    /// `set_src_lengths` gives the one search that needs it, `MatchSourceLen`). `lprobs` may be
    /// changed in place, as fairseq's searches change the generator's buffer.
    pub fn step(
        &self,
        step: i64,
        lprobs: &Tensor,
        scores: &Tensor,
        src_lengths: Option<&Tensor>,
        eos: i64,
    ) -> Result<Candidates, GenerateError> {
        match *self {
            SearchStrategy::MatchSourceLen => {
                let src_lengths =
                    src_lengths.ok_or_else(|| GenerateError::Invariant("match_source_len without source lengths".into()))?;
                let mut eos_column = lprobs.f_select(2, eos)?;
                let _ = eos_column.f_masked_fill_(&src_lengths.f_gt(step)?.f_unsqueeze(1)?, f64::NEG_INFINITY)?;
                let _ = eos_column.f_masked_fill_(&src_lengths.f_le(step)?.f_unsqueeze(1)?, 0.0)?;
                beam_step(step, lprobs, scores)
            }
            SearchStrategy::Beam => beam_step(step, lprobs, scores),
            SearchStrategy::Sampling { topk, topp } => sampling_step(step, lprobs, scores, topk, topp),
            SearchStrategy::DiverseBeam { groups, strength } => {
                super::diverse::diverse_beam_step(step, lprobs, scores, groups, strength)
            }
            SearchStrategy::DiverseSiblings { rate } => super::diverse::diverse_siblings_step(step, lprobs, scores, rate),
            SearchStrategy::LexicallyConstrained(_) => {
                Err(GenerateError::Invariant("the constrained search needs its sentences' constraint states".into()))
            }
        }
    }
}

/// `Sampling._sample_topp`: probabilities outside the smallest top-p set are zeroed.
fn sample_topp(lprobs: &mut Tensor, topp: f64) -> Result<(Tensor, Tensor), GenerateError> {
    let probs = lprobs.f_exp_()?;
    let (sorted_probs, sorted_indices) = probs.f_sort(-1, true)?;
    let cumsum_probs = sorted_probs.f_cumsum(2, None::<Kind>)?;
    let mask = cumsum_probs.f_lt(topp)?;
    // one more word is needed so that the cumulative mass exceeds p
    let cumsum_mask = mask.f_cumsum(2, None::<Kind>)?;
    let width = mask.size()[2];
    let mut last_included = cumsum_mask.f_slice(2, -1, None, 1)?;
    let _ = last_included.f_clamp_(0, width - 1)?;
    let mut mask = mask;
    let mask = mask.f_scatter_value_(2, &last_included, 1)?;
    let max_dim = last_included.f_max()?.f_int64_value(&[])?;
    let truncated_mask = mask.f_slice(2, None, max_dim + 1, 1)?;
    let mut truncated_probs = sorted_probs.f_slice(2, None, max_dim + 1, 1)?;
    let truncated_indices = sorted_indices.f_slice(2, None, max_dim + 1, 1)?;
    let trim_mask = truncated_mask.f_logical_not()?;
    let trimmed = truncated_probs.f_masked_fill_(&trim_mask, 0)?;
    Ok((trimmed, truncated_indices))
}

fn sampling_step(
    step: i64,
    lprobs: &Tensor,
    scores: &Tensor,
    topk: i64,
    topp: f64,
) -> Result<Candidates, GenerateError> {
    let (bsz, beam_size, _vocab_size) = size3(lprobs)?;
    // `lprobs` at step > 0 is the generator's own buffer, which fairseq exponentiates in place.
    let mut lprobs =
        if step == 0 { lprobs.f_slice(1, 0, None, beam_size)?.f_contiguous()? } else { lprobs.shallow_clone() };
    let (probs, top_indices) = if topp > 0.0 {
        let (p, i) = sample_topp(&mut lprobs, topp)?;
        (p, Some(i))
    } else if topk > 0 {
        let (mut l, i) = lprobs.f_topk(topk, -1, true, true)?;
        (l.f_exp_()?, Some(i))
    } else {
        (lprobs.f_exp_()?, None)
    };
    let indices_buf = if step == 0 {
        probs.f_view([bsz, -1])?.f_multinomial(beam_size, true)?.f_view([bsz, beam_size])?
    } else {
        probs.f_view([bsz * beam_size, -1])?.f_multinomial(1, true)?.f_view([bsz, beam_size])?
    };
    let probs = if step == 0 { probs.f_expand([bsz, beam_size, -1], false)? } else { probs };
    let mut scores_buf = probs.f_gather(2, &indices_buf.f_unsqueeze(-1)?, false)?;
    let mut scores_buf = scores_buf.f_log_()?.f_view([bsz, -1])?;
    let indices_buf = match top_indices {
        Some(top) => top
            .f_expand([bsz, beam_size, -1], false)?
            .f_gather(2, &indices_buf.f_unsqueeze(-1)?, false)?
            .f_squeeze_dim(2)?,
        None => indices_buf,
    };
    let beams_buf = if step == 0 {
        Tensor::f_zeros([bsz, beam_size], (indices_buf.kind(), indices_buf.device()))?
    } else {
        let beams = Tensor::f_arange(beam_size, (indices_buf.kind(), indices_buf.device()))?.f_repeat([bsz, 1])?;
        // make scores cumulative
        let prev = scores.f_select(2, step - 1)?.f_gather(1, &beams, false)?;
        let _ = scores_buf.f_add_(&prev)?;
        beams
    };
    Ok(Candidates { scores: scores_buf, indices: indices_buf, beams: beams_buf })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn match_source_len_allows_eos_only_at_the_source_length() {
        // two sentences of source length 1 and 3, beam 1, vocabulary 4, EOS = 2
        let l = Tensor::full([2, 1, 4], -1.0f64, (Kind::Float, Device::Cpu));
        let s = Tensor::zeros([2, 1, 1], (Kind::Float, Device::Cpu));
        let lengths = Tensor::from_slice(&[1i64, 3]);
        SearchStrategy::MatchSourceLen.step(1, &l, &s, Some(&lengths), 2).unwrap();
        let eos = Vec::<f32>::try_from(l.select(2, 2).view([-1])).unwrap();
        assert_eq!(eos, [0.0, f32::NEG_INFINITY]);
    }

    fn lp(rows: &[&[f32]], bsz: i64, beam: i64) -> Tensor {
        let flat: Vec<f32> = rows.iter().flat_map(|r| r.iter().copied()).collect();
        let v = rows[0].len() as i64;
        Tensor::from_slice(&flat).view([bsz, beam, v])
    }

    #[test]
    fn beam_step0_uses_first_beam_and_2k_candidates() {
        let l = lp(&[&[-1.0, -3.0, -0.5, -2.0, -4.0], &[-0.1, -0.1, -0.1, -0.1, -0.1]], 1, 2);
        let s = Tensor::zeros([1, 2, 0], (Kind::Float, Device::Cpu));
        let c = SearchStrategy::Beam.step(0, &l, &s, None, 2).unwrap();
        assert_eq!(Vec::<f32>::try_from(c.scores.view([-1])).unwrap(), vec![-0.5, -1.0, -2.0, -3.0]);
        assert_eq!(Vec::<i64>::try_from(c.indices.view([-1])).unwrap(), vec![2, 0, 3, 1]);
        assert_eq!(Vec::<i64>::try_from(c.beams.view([-1])).unwrap(), vec![0, 0, 0, 0]);
    }

    #[test]
    fn beam_step_adds_cumulative_scores_and_splits_beams() {
        let l = lp(&[&[-1.0, -3.0, -0.5], &[-0.25, -2.0, -5.0]], 1, 2);
        let s = Tensor::from_slice(&[-1.0f32, -0.5]).view([1, 2, 1]);
        let c = SearchStrategy::Beam.step(1, &l, &s, None, 2).unwrap();
        // cumulative: beam0 [-2,-4,-1.5], beam1 [-0.75,-2.5,-5.5]; k = min(4, 6-1) = 4
        assert_eq!(Vec::<f32>::try_from(c.scores.view([-1])).unwrap(), vec![-0.75, -1.5, -2.0, -2.5]);
        assert_eq!(Vec::<i64>::try_from(c.indices.view([-1])).unwrap(), vec![0, 2, 0, 1]);
        assert_eq!(Vec::<i64>::try_from(c.beams.view([-1])).unwrap(), vec![1, 0, 0, 1]);
    }

    #[test]
    fn tied_candidates_come_from_libtorch_s_topk() {
        // every hypothesis has the same score and the same log-probabilities: the host top-k
        // declines, and libtorch's order among equal values is what fairseq gets
        let l = Tensor::full([2, 3, 40], -2.0f64, (Kind::Float, Device::Cpu)).log_softmax(-1, Kind::Float);
        let s = Tensor::full([2, 3, 1], -0.5f64, (Kind::Float, Device::Cpu));
        let c = SearchStrategy::Beam.step(1, &l, &s, None, 2).unwrap();
        let (want_scores, want_indices) = (&l + s.view([2, 3, 1])).view([2, -1]).topk(6, -1, true, true);
        assert_eq!(Vec::<f32>::try_from(c.scores.view([-1])).unwrap(), Vec::<f32>::try_from(want_scores.view([-1])).unwrap());
        let want_tokens = Vec::<i64>::try_from(want_indices.fmod(40).view([-1])).unwrap();
        assert_eq!(Vec::<i64>::try_from(c.indices.view([-1])).unwrap(), want_tokens);
        let want_beams = Vec::<i64>::try_from(want_indices.divide_scalar_mode(40, "trunc").view([-1])).unwrap();
        assert_eq!(Vec::<i64>::try_from(c.beams.view([-1])).unwrap(), want_beams);
    }

    #[test]
    fn topp_keeps_smallest_set_reaching_p() {
        let probs = [0.5f32, 0.3, 0.15, 0.05];
        let logs: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        let mut l = Tensor::from_slice(&logs).view([1, 1, 4]);
        let (p, i) = sample_topp(&mut l, 0.7).unwrap();
        // cumsum 0.5 < 0.7 kept, then one more (0.3) to exceed p
        assert_eq!(p.size(), vec![1, 1, 2]);
        assert_eq!(Vec::<i64>::try_from(i.view([-1])).unwrap(), vec![0, 1]);
    }

    #[test]
    fn sampling_is_reproducible_under_a_seed_and_respects_topk() {
        let logs: Vec<f32> = [0.4f32, 0.3, 0.2, 0.1].iter().map(|p| p.ln()).collect();
        let _rng = crate::testing::global_generator();
        let run = || {
            tch::manual_seed(7);
            let l = Tensor::from_slice(&logs).view([1, 1, 4]).repeat([1, 3, 1]);
            let s = Tensor::zeros([1, 3, 0], (Kind::Float, Device::Cpu));
            let strategy = SearchStrategy::Sampling { topk: 2, topp: -1.0 };
            let c = strategy.step(0, &l, &s, None, 2).unwrap();
            Vec::<i64>::try_from(c.indices.view([-1])).unwrap()
        };
        let a = run();
        assert_eq!(a, run());
        assert_eq!(a.len(), 3);
        assert!(a.iter().all(|&t| t == 0 || t == 1), "{a:?}");
    }
}
