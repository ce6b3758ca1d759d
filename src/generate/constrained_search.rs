//! fairseq 0.12.2 `search.py`: `LexicallyConstrainedBeamSearch` (`--constraints`), the
//! stateful search of Post & Vilar (2018) with Hu et al.'s (2019) banks: each hypothesis keeps
//! a [`ConstraintState`], every step adds the constraints' next tokens to the candidates, and
//! the beam is shared round-robin between the banks (hypotheses that met as many constraint
//! tokens).

use tch::{Kind, Tensor};

use super::constraints::{ConstraintOrder, ConstraintState};
use super::beam_search::{size3, Candidates};
use super::GenerateError;
use crate::generate::InvalidOption;

/// The search and the constraint states of the batch's sentences (`constraint_states`).
pub(super) struct ConstrainedSearch {
    vocab_size: i64,
    eos: i64,
    states: Vec<Vec<ConstraintState>>,
}

fn bad(msg: impl Into<String>) -> GenerateError {
    GenerateError::Invariant(msg.into())
}

impl ConstrainedSearch {
    /// `init_constraints`: every hypothesis of sentence `i` starts at the root of
    /// `constraints[i]` (each constraint a non-empty token sequence).
    pub(super) fn new(
        order: ConstraintOrder,
        constraints: &[Vec<Vec<i64>>],
        beam_size: i64,
        vocab_size: i64,
        eos: i64,
    ) -> Result<Self, GenerateError> {
        for c in constraints.iter().flatten() {
            if c.is_empty() {
                return Err(InvalidOption::EmptyConstraint.into());
            }
            if let Some(&t) = c.iter().find(|&&t| t <= 0 || t >= vocab_size) {
                // fairseq packs constraints 0-separated, so token 0 (<s>) would cut one short
                return Err(InvalidOption::ConstraintToken(t).into());
            }
        }
        let states = constraints
            .iter()
            .map(|c| vec![ConstraintState::create(order, c); beam_size as usize])
            .collect();
        Ok(ConstrainedSearch { vocab_size, eos, states })
    }

    /// `prune_sentences(batch_idxs)`: the states of the sentences still in the batch.
    pub(super) fn prune_sentences(&mut self, kept: &[i64]) {
        let old = std::mem::take(&mut self.states);
        self.states = kept.iter().map(|&i| old[i as usize].clone()).collect();
    }

    /// `update_constraints(active_hypos)`: each sentence's beam takes the states of the
    /// candidates it chose (`active_hypos` is `[bsz, beam]`).
    pub(super) fn update_constraints(&mut self, active_hypos: &Tensor) -> Result<(), GenerateError> {
        let beam = active_hypos.size().get(1).copied().unwrap_or(0) as usize;
        let active = Vec::<i64>::try_from(active_hypos.f_contiguous()?.f_view([-1])?)?;
        for (sent, states) in self.states.iter_mut().enumerate() {
            let row = &active[sent * beam..(sent + 1) * beam];
            let chosen: Option<Vec<ConstraintState>> = row.iter().map(|&i| states.get(i as usize).cloned()).collect();
            *states = chosen.ok_or_else(|| bad("a chosen candidate has no constraint state"))?;
        }
        Ok(())
    }

    /// `LexicallyConstrainedBeamSearch.step`: `lprobs` `[bsz, beam, V]` (its EOS column is
    /// changed in place, as fairseq changes the generator's buffer), `scores` `[bsz, beam, step]`.
    pub(super) fn step(&mut self, step: i64, lprobs: &Tensor, scores: &Tensor) -> Result<Candidates, GenerateError> {
        let (bsz, beam_size, vocab_size) = size3(lprobs)?;
        if vocab_size != self.vocab_size || bsz as usize != self.states.len() {
            return Err(bad("constrained search state does not match the batch"));
        }
        let num_cands = (beam_size * 2).min(beam_size * vocab_size - 1);

        // STEP 0: no EOS for hypotheses that have not met all their constraints
        if step > 0 {
            let not_finished: Vec<i64> = self
                .states
                .iter()
                .enumerate()
                .flat_map(|(sent, states)| {
                    states.iter().enumerate().filter(|(_, s)| !s.finished()).map(move |(b, _)| sent as i64 * beam_size + b as i64)
                })
                .collect();
            if !not_finished.is_empty() {
                let mut eos_column = lprobs.f_view([bsz * beam_size, -1])?.f_select(1, self.eos)?;
                let _ = eos_column.f_index_fill_(0, &Tensor::from_slice(&not_finished), f64::NEG_INFINITY)?;
            }
        }

        let lprobs = if step == 0 {
            lprobs.f_slice(1, 0, None, beam_size)?.f_contiguous()?
        } else {
            lprobs.f_add(&scores.f_select(2, step - 1)?.f_unsqueeze(-1)?)?
        };
        let (mut scores_buf, indices_buf) = lprobs.f_view([bsz, -1])?.f_topk(num_cands, -1, true, true)?;
        let mut beams_buf = indices_buf.f_div_scalar_mode(vocab_size, "floor")?;
        let mut indices_buf = indices_buf.f_fmod(vocab_size)?;

        // STEP 1: the top-1 of each hypothesis
        if step > 0 {
            let (top_scores, top_indices) = lprobs.f_view([bsz * beam_size, -1])?.f_topk(1, 1, true, true)?;
            scores_buf = Tensor::f_cat(&[scores_buf, top_scores.f_view([bsz, -1])?], 1)?;
            indices_buf = Tensor::f_cat(&[indices_buf, top_indices.f_view([bsz, -1])?], 1)?;
            let new_beams = Tensor::f_arange(beam_size, (Kind::Int64, lprobs.device()))?.f_repeat([bsz, 1])?;
            beams_buf = Tensor::f_cat(&[beams_buf, new_beams], 1)?;
        }

        let width = 2 * beam_size;
        let (mut new_scores, mut new_indices, mut new_beams) = (Vec::new(), Vec::new(), Vec::new());
        for sent in 0..bsz {
            let row = |t: &Tensor| t.f_select(0, sent);
            let sentence = SentenceCandidates {
                scores: Vec::<f32>::try_from(row(&scores_buf)?)?,
                indices: Vec::<i64>::try_from(row(&indices_buf)?)?,
                beams: Vec::<i64>::try_from(row(&beams_buf)?)?,
            };
            let lprobs_sent = Vec::<f32>::try_from(row(&lprobs)?.f_contiguous()?.f_view([-1])?)?;
            let states = std::mem::take(&mut self.states[sent as usize]);
            let (c, states) = step_sentence(step, &lprobs_sent, vocab_size, &states, sentence, num_cands)?;
            if c.scores.len() as i64 != width {
                // fairseq: new_scores_buf[sentno] = scores fails the same way
                return Err(InvalidOption::ConstrainedWidth { width, given: c.scores.len() }.into());
            }
            self.states[sent as usize] = states;
            new_scores.extend(c.scores);
            new_indices.extend(c.indices);
            new_beams.extend(c.beams);
        }
        let device = lprobs.device();
        let shaped = |t: Tensor| -> Result<Tensor, GenerateError> { Ok(t.f_view([bsz, width])?.f_to_device(device)?) };
        Ok(Candidates {
            scores: shaped(Tensor::from_slice(&new_scores))?,
            indices: shaped(Tensor::from_slice(&new_indices))?,
            beams: shaped(Tensor::from_slice(&new_beams))?,
        })
    }
}

/// One sentence's candidates: parallel lists.
struct SentenceCandidates {
    scores: Vec<f32>,
    indices: Vec<i64>,
    beams: Vec<i64>,
}

impl SentenceCandidates {
    fn permuted(&self, order: &[i64]) -> SentenceCandidates {
        let pick = |v: &[i64]| order.iter().map(|&i| v[i as usize]).collect();
        SentenceCandidates {
            scores: order.iter().map(|&i| self.scores[i as usize]).collect(),
            indices: pick(&self.indices),
            beams: pick(&self.beams),
        }
    }
}

/// `step_sentence`: the sentence's candidates with every hypothesis' next constraint tokens
/// added, ordered by (bank, score), deduplicated, striped round-robin across the banks and cut
/// to `num_cands`; with the states of all the candidates (not cut).
fn step_sentence(
    step: i64,
    lprobs: &[f32],
    vocab_size: i64,
    states: &[ConstraintState],
    mut c: SentenceCandidates,
    num_cands: i64,
) -> Result<(SentenceCandidates, Vec<ConstraintState>), GenerateError> {
    let v = vocab_size as usize;
    // STEP 2: all constraints for each beam item (at step 0 only the first)
    for (beamno, state) in states.iter().enumerate() {
        for token in state.next_tokens() {
            c.indices.push(token);
            c.beams.push(beamno as i64);
            c.scores.push(lprobs[beamno * v + token as usize]);
        }
        if step == 0 {
            break;
        }
    }
    // STEP 3: the state and bank of every candidate
    let mut cand_states: Vec<ConstraintState> = c
        .beams
        .iter()
        .zip(&c.indices)
        .map(|(&b, &t)| states.get(b as usize).map(|s| s.advance(t)))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("a candidate's beam has no constraint state"))?;
    let mut banks: Vec<i64> = cand_states.iter().map(ConstraintState::bank).collect();
    let num_constraint_tokens = states.first().map_or(0, ConstraintState::num_tokens) as i64;

    // STEP 4: sort by (bank, score): (num_constraint_tokens - banks) * -100 + scores, in f32
    let sort_key = Tensor::from_slice(&banks)
        .f_neg()?
        .f_add_scalar(num_constraint_tokens)?
        .f_mul_scalar(-100)?
        .f_add(&Tensor::from_slice(&c.scores))?;
    let (_, order) = sort_key.f_sort(0, true)?;
    let order = Vec::<i64>::try_from(order)?;
    c = c.permuted(&order);
    banks = order.iter().map(|&i| banks[i as usize]).collect();
    cand_states = order.iter().map(|&i| cand_states[i as usize].clone()).collect();

    // STEP 5: drop a candidate equal to the one before it (the first is compared with the last)
    let n = c.indices.len();
    let uniques: Vec<i64> = (0..n).map(|i| c.beams[i] * (vocab_size + 1) + c.indices[i]).collect();
    let keep: Vec<bool> = (0..n).map(|i| uniques[(i + n - 1) % n] != uniques[i]).collect();
    let kept: Vec<i64> = (0..n as i64).filter(|&i| keep[i as usize]).collect();
    c = c.permuted(&kept);
    banks = kept.iter().map(|&i| banks[i as usize]).collect();
    // (fairseq pops the states of the dropped candidates from index 1 on only)
    cand_states = cand_states.into_iter().enumerate().filter(|(i, _)| *i == 0 || keep[*i]).map(|(_, s)| s).collect();

    // STEP 6: stripes across the banks
    let n = banks.len();
    let first = *banks.first().ok_or_else(|| bad("no candidates"))?;
    let mut stripes = vec![0i64; n];
    let (mut cur_bank, mut cur_bank_count) = (first, -1i64);
    for (i, &bank) in banks.iter().enumerate() {
        if bank != cur_bank {
            cur_bank_count = 0;
            cur_bank = bank;
        } else {
            cur_bank_count += 1;
        }
        stripes[i] = num_constraint_tokens - bank + cur_bank_count * (n as i64 + 1);
    }

    // STEP 7: sort by stripe; STEP 8: cut to the candidates' size
    let (_, order) = Tensor::from_slice(&stripes).f_sort(0, false)?;
    let order = Vec::<i64>::try_from(order)?;
    let mut c = c.permuted(&order);
    let cand_states: Vec<ConstraintState> =
        order.iter().map(|&i| cand_states.get(i as usize).cloned()).collect::<Option<_>>().ok_or_else(|| bad("stripe order"))?;
    let cut = (num_cands as usize).min(c.scores.len());
    c.scores.truncate(cut);
    c.indices.truncate(cut);
    c.beams.truncate(cut);
    Ok((c, cand_states))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn a_constraint_token_enters_the_beam_at_step_0() {
        // one sentence, beam 2, vocabulary 6 (EOS = 2); the constraint token 5 scores lowest
        let l = Tensor::from_slice(&[-9.0f32, -9.0, -3.0, -0.5, -1.0, -7.0]).view([1, 1, 6]).repeat([1, 2, 1]);
        let s = Tensor::zeros([1, 2, 0], (Kind::Float, Device::Cpu));
        let mut search = ConstrainedSearch::new(ConstraintOrder::Ordered, &[vec![vec![5]]], 2, 6, 2).unwrap();
        let c = search.step(0, &l, &s).unwrap();
        // bank 1 (token 5) first, then bank 0 by score
        assert_eq!(Vec::<i64>::try_from(c.indices.view([-1])).unwrap(), vec![5, 3, 4, 2]);
        assert_eq!(Vec::<f32>::try_from(c.scores.view([-1])).unwrap(), vec![-7.0, -0.5, -1.0, -3.0]);
        assert_eq!(Vec::<i64>::try_from(c.beams.view([-1])).unwrap(), vec![0, 0, 0, 0]);
    }

    #[test]
    fn unfinished_hypotheses_cannot_end() {
        let l = Tensor::from_slice(&[-9.0f32, -9.0, -0.1, -2.0, -3.0, -4.0]).view([1, 1, 6]).repeat([1, 2, 1]);
        let s = Tensor::zeros([1, 2, 1], (Kind::Float, Device::Cpu));
        let mut search = ConstrainedSearch::new(ConstraintOrder::Unordered, &[vec![vec![5]]], 2, 6, 2).unwrap();
        let c = search.step(1, &l, &s).unwrap();
        assert!(!Vec::<i64>::try_from(c.indices.view([-1])).unwrap().contains(&2));
        assert!(ConstrainedSearch::new(ConstraintOrder::Ordered, &[vec![vec![]]], 2, 6, 2).is_err());
        assert!(ConstrainedSearch::new(ConstraintOrder::Ordered, &[vec![vec![0]]], 2, 6, 2).is_err());
    }
}
