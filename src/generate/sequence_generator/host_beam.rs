//! `_generate` for a plain beam search on the CPU, and with the fast compute types on a GPU: the
//! same steps as `sequence_generator.rs`, with the bookkeeping (tokens, cumulative scores,
//! finished hypotheses, the candidates and the reorder) on host vectors instead of some seventy
//! libtorch ops a step, as CTranslate2 keeps it. The model still runs through [`StepModel`]; the
//! selections are the same, so the hypotheses are fairseq's. On the CPU the candidates are
//! chosen on the host too; on a GPU they are chosen there, and only they are read back.

use tch::{Device, Kind, Tensor};

use super::{bad, sort_finalized, Ended, SequenceGenerator, Specials};
use crate::generate::beam_topk::beam_topk;
use crate::generate::{Bookkeeping, GenerateError, Hypothesis, InvalidOption, StepModel};
use crate::libtorch::host::f32_view_mut;

/// The `kept` sentences' blocks of `per_sentence` values each, in order.
fn keep_sentences<T: Copy>(values: &[T], kept: &[i64], per_sentence: usize) -> Vec<T> {
    kept.iter().flat_map(|&i| values[i as usize * per_sentence..][..per_sentence].iter().copied()).collect()
}

/// One step's candidates, `[bsz, k]` each, on the host.
struct Candidates {
    k: usize,
    scores: Vec<f32>,
    indices: Vec<i64>,
    beams: Vec<i64>,
}

impl Candidates {
    /// `k` candidates a sentence from their scores and flat indices into `[beams, V]`.
    fn from_flat(k: usize, scores: Vec<f32>, flat: &[i64], vocab: i64) -> Self {
        Candidates { k, scores, indices: flat.iter().map(|i| i % vocab).collect(), beams: flat.iter().map(|i| i / vocab).collect() }
    }
}

/// `BeamSearch.step` by libtorch on `lprobs`' device: the `topk` of `lprobs + scores[:, :, step -
/// 1]` (written into `lprobs` `[bsz, beams, V]`, this step's own), or of the first beam at step 0
/// (`prev` is none). The candidates come back to the host, where the flat indices are split into
/// beams and tokens.
fn candidates_to_host(mut lprobs: Tensor, prev: Option<Vec<f32>>, k: i64) -> Result<Candidates, GenerateError> {
    let (bsz, beam, vocab) = crate::generate::beam_search::size3(&lprobs)?;
    let lprobs = match prev {
        None => lprobs.f_slice(1, 0, None, beam)?.f_contiguous()?,
        Some(prev) => lprobs.f_add_(&staged(Tensor::f_from_slice(&prev)?, lprobs.device())?.f_view([bsz, beam, 1])?)?,
    };
    let (values, flat) = lprobs.f_view([bsz, -1])?.f_topk(k, -1, true, true)?;
    let host = |t: &Tensor| t.f_to_device(Device::Cpu)?.f_contiguous()?.f_view([-1]);
    let flat = Vec::<i64>::try_from(host(&flat)?)?;
    Ok(Candidates::from_flat(k as usize, Vec::<f32>::try_from(host(&values)?)?, &flat, vocab))
}

/// `host` on `device` without waiting for the device's queue: libtorch's non-blocking copy of
/// pageable memory stages its bytes before it returns.
fn staged(host: Tensor, device: Device) -> Result<Tensor, GenerateError> {
    Ok(host.f_to_device_(device, host.kind(), true, false)?)
}

impl SequenceGenerator {
    pub(super) fn generate_on_host<M: StepModel>(
        &self,
        model: &mut M,
        src_tokens: &Tensor,
        bos_token: Option<i64>,
        mut on_token: Option<&mut dyn FnMut(usize, i64)>,
    ) -> Result<Vec<Vec<Hypothesis>>, GenerateError> {
        let Specials { pad, eos, .. } = self.specials;
        let (bsz, src_len) = src_tokens.size2()?;
        let max_len = self.max_len(src_len, model.max_decoder_positions());
        if self.cfg.min_len > max_len {
            return Err(InvalidOption::MinLen { min_len: self.cfg.min_len, max_len }.into());
        }
        let (mut bsz, orig_bsz) = (bsz as usize, bsz as usize);
        let beam = self.beam_size as usize;
        let cand_size = self.cfg.search.cand_size(self.beam_size);
        let device = src_tokens.device();
        let on_host = model.bookkeeping() == Bookkeeping::Host;
        let new_order: Vec<i64> = (0..bsz as i64).flat_map(|b| std::iter::repeat_n(b, beam)).collect();
        model.begin(src_tokens, &Tensor::f_from_slice(&new_order)?.f_to_device(device)?)?;

        // tokens `[rows, max_len + 2]` and cumulative scores `[rows, max_len + 1]`
        let (width, score_width) = (max_len as usize + 2, max_len as usize + 1);
        let mut tokens = vec![pad; bsz * beam * width];
        for row in tokens.chunks_exact_mut(width) {
            row[0] = bos_token.unwrap_or(eos);
        }
        let mut scores = vec![0f32; bsz * beam * score_width];
        let mut cands_to_ignore = vec![false; bsz * beam];
        let mut finalized: Vec<Vec<Hypothesis>> = vec![Vec::new(); orig_bsz];
        let mut finished = vec![false; orig_bsz];
        let mut num_remaining_sent = bsz;
        let mut reorder_state: Option<Vec<i64>> = None;
        let mut batch_idxs: Option<Vec<i64>> = None;
        let mut rows: Vec<usize> = (0..orig_bsz).collect();

        for step in 0..=max_len {
            let s = step as usize;
            if let Some(mut order) = reorder_state.take() {
                if let Some(kept) = batch_idxs.as_ref() {
                    // update beam indices to take into account removed sentences
                    for (b, &k) in kept.iter().enumerate() {
                        order[b * beam..][..beam].iter_mut().for_each(|o| *o += (k - b as i64) * beam as i64);
                    }
                }
                model.reorder(&staged(Tensor::f_from_slice(&order)?, device)?)?;
            }
            let n = bsz * beam;
            let prefix: Vec<i64> = tokens.chunks_exact(width).flat_map(|row| row[..=s].iter().copied()).collect();
            let prefix = staged(Tensor::f_from_slice(&prefix)?.f_view([n as i64, step + 1])?, device)?;
            let (lprobs, _) = model.forward_decoder(&prefix, self.cfg.temperature, false)?;
            let mut lprobs = lprobs.f_contiguous()?.f_to_kind(Kind::Float)?;
            let prev: Option<Vec<f32>> = (step > 0).then(|| scores.chunks_exact(score_width).map(|row| row[s - 1]).collect());
            let mut cands = match on_host {
                true => {
                    self.mask_log_probs(&mut lprobs, step, max_len)?;
                    self.candidates(&mut lprobs, bsz, prev)?
                }
                false => self.device_candidates(lprobs, step, max_len, bsz, prev)?,
            };
            let k = cands.k;

            let mut eos_mask: Vec<bool> = (0..bsz * k)
                .map(|i| cands.indices[i] == eos && cands.scores[i] != f32::NEG_INFINITY)
                .collect();
            let (mut eos_bbsz_idx, mut eos_scores) = (Vec::new(), Vec::new());
            for b in 0..bsz {
                for j in 0..beam {
                    eos_mask[b * k + j] &= !cands_to_ignore[b * beam + j];
                    if eos_mask[b * k + j] {
                        eos_bbsz_idx.push(cands.beams[b * k + j] + (b * beam) as i64);
                        eos_scores.push(cands.scores[b * k + j]);
                    }
                }
            }

            let mut finalized_sents = Vec::new();
            if !eos_bbsz_idx.is_empty() {
                let (toks, pos, sc) = self.ended(step, &eos_bbsz_idx, eos_scores, &tokens, width, &scores, score_width);
                let ended = Ended { idx: &eos_bbsz_idx, toks: &toks, pos: &pos, sc: &sc, attn_rows: None };
                finalized_sents = self.record_finished(step, ended, &mut finalized, &mut finished, max_len)?;
                num_remaining_sent = num_remaining_sent
                    .checked_sub(finalized_sents.len())
                    .ok_or_else(|| bad("more sentences finished than were in the batch"))?;
            }
            if num_remaining_sent == 0 {
                break;
            }
            if step >= max_len {
                return Err(bad(format!("step {step} reached max_len {max_len} with unfinished sentences")));
            }

            // remove finalized sentences from the batch
            if !finalized_sents.is_empty() {
                let mut keep = vec![true; bsz];
                for &f in &finalized_sents {
                    *keep.get_mut(f as usize).ok_or_else(|| bad("finalized index out of range"))? = false;
                }
                let kept: Vec<i64> = (0..bsz as i64).filter(|&i| keep[i as usize]).collect();
                rows = kept.iter().map(|&i| rows[i as usize]).collect();
                cands.indices = keep_sentences(&cands.indices, &kept, k);
                cands.beams = keep_sentences(&cands.beams, &kept, k);
                cands.scores = keep_sentences(&cands.scores, &kept, k);
                eos_mask = keep_sentences(&eos_mask, &kept, k);
                cands_to_ignore = keep_sentences(&cands_to_ignore, &kept, beam);
                tokens = keep_sentences(&tokens, &kept, beam * width);
                scores = keep_sentences(&scores, &kept, beam * score_width);
                bsz = kept.len();
                batch_idxs = Some(kept);
            } else {
                batch_idxs = None;
            }

            // per sentence, the first `beam` candidates that neither end nor were ignored, in
            // candidate order, then the others (`topk` of `eos_mask · cand_size + offset`)
            let mut active = vec![0usize; bsz * beam];
            for b in 0..bsz {
                let mask = &mut eos_mask[b * k..][..k];
                for (m, &ignored) in mask.iter_mut().zip(&cands_to_ignore[b * beam..][..beam]) {
                    *m |= ignored;
                }
                let mut order: Vec<(i64, usize)> = (0..k).map(|j| (i64::from(mask[j]) * cand_size + j as i64, j)).collect();
                order.sort_unstable();
                for (j, &(value, c)) in order.iter().take(beam).enumerate() {
                    active[b * beam + j] = c;
                    cands_to_ignore[b * beam + j] = value >= cand_size;
                }
                if cands_to_ignore[b * beam..][..beam].iter().all(|&i| i) {
                    return Err(bad("a sentence has no active hypothesis left"));
                }
            }

            let mut active_bbsz_idx = Vec::with_capacity(bsz * beam);
            let mut next_tokens = vec![pad; bsz * beam * width];
            let mut next_scores = vec![0f32; bsz * beam * score_width];
            for (row, &c) in active.iter().enumerate() {
                let b = row / beam;
                let from = (cands.beams[b * k + c] + (b * beam) as i64) as usize;
                active_bbsz_idx.push(from as i64);
                next_tokens[row * width..][..=s].copy_from_slice(&tokens[from * width..][..=s]);
                next_tokens[row * width + s + 1] = cands.indices[b * k + c];
                next_scores[row * score_width..][..s].copy_from_slice(&scores[from * score_width..][..s]);
                next_scores[row * score_width + s] = cands.scores[b * k + c];
            }
            if let Some(tell) = on_token.as_mut().filter(|_| beam == 1) {
                for (b, row) in rows.iter().enumerate() {
                    tell(*row, next_tokens[b * width + s + 1]);
                }
            }
            (tokens, scores) = (next_tokens, next_scores);
            reorder_state = Some(active_bbsz_idx);
        }
        sort_finalized(&mut finalized)?;
        Ok(finalized)
    }

    /// What the generator does to the log-probs before the search: no padding, the unknown-word
    /// penalty, only EOS at `max_len` and no EOS before `min_len`. fairseq's NaN to −inf comes
    /// first there; here [`Self::candidates`] makes it only when the host's top-k met a NaN (the
    /// masks above give −inf, or keep a NaN, either way).
    fn mask_log_probs(&self, lprobs: &mut Tensor, step: i64, max_len: i64) -> Result<(), GenerateError> {
        let Specials { pad, eos, unk } = self.specials;
        let vocab = self.vocab_size as usize;
        // SAFETY: `lprobs` is this step's own contiguous copy or the decoder's fresh buffer,
        // which nothing else reads while the slice lives.
        let data = unsafe { f32_view_mut(lprobs) }.ok_or_else(|| bad("log-probs are not a host f32 tensor"))?;
        if data.len() % vocab != 0 {
            return Err(bad(format!("{} log-probs for a vocabulary of {vocab}", data.len())));
        }
        let unk_penalty = self.cfg.unk_penalty as f32;
        for row in data.chunks_exact_mut(vocab) {
            row[pad as usize] = f32::NEG_INFINITY;
            row[unk as usize] -= unk_penalty;
            if step >= max_len {
                let keep = row[eos as usize];
                row.fill(f32::NEG_INFINITY);
                row[eos as usize] = keep;
            } else if step < self.cfg.min_len {
                row[eos as usize] = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// `BeamSearch.step`'s `k` for this generator.
    fn candidate_count(&self, first_step: bool) -> i64 {
        crate::generate::beam_search::candidates_per_sentence(first_step, self.beam_size, self.vocab_size)
    }

    /// `BeamSearch.step` over `lprobs` `[bsz · beam, V]` on the host, with the cumulative scores
    /// of the last step (`prev`, none at the first); by [`beam_topk`], or through libtorch where
    /// that leaves it (ties, NaN).
    fn candidates(&self, lprobs: &mut Tensor, bsz: usize, prev: Option<Vec<f32>>) -> Result<Candidates, GenerateError> {
        let (beam, vocab) = (self.beam_size, self.vocab_size);
        let mut lprobs = lprobs.f_view([bsz as i64, beam, vocab])?;
        let k = self.candidate_count(prev.is_none());
        if let Some(top) = beam_topk(&lprobs, prev.as_deref(), k as usize) {
            return Ok(Candidates::from_flat(k as usize, top.values, &top.indices, vocab));
        }
        // ties or NaN: libtorch's topk, over the sum written into this step's own log-probs (the
        // same additions as `lprobs + scores[:, :, step - 1]`, without another `[bsz, beam, V]`)
        // SAFETY: as in `mask_log_probs`.
        let data = unsafe { f32_view_mut(&mut lprobs) }.ok_or_else(|| bad("log-probs are not a host f32 tensor"))?;
        data.iter_mut().filter(|v| v.is_nan()).for_each(|v| *v = f32::NEG_INFINITY);
        candidates_to_host(lprobs, prev, k)
    }

    /// [`Self::mask_log_probs`] and [`Self::candidates`] as `_generate` computes them, with
    /// libtorch on `lprobs`' device (a GPU, where the model does not keep its log-probs on the
    /// host): only the `[bsz, k]` candidates come back.
    fn device_candidates(&self, mut lprobs: Tensor, step: i64, max_len: i64, bsz: usize, prev: Option<Vec<f32>>) -> Result<Candidates, GenerateError> {
        self.mask_lprobs(&mut lprobs, step, max_len, true)?;
        if step < self.cfg.min_len {
            let _ = lprobs.f_select(1, self.specials.eos)?.f_fill_(f64::NEG_INFINITY)?;
        }
        let k = self.candidate_count(prev.is_none());
        candidates_to_host(lprobs.f_view([bsz as i64, self.beam_size, self.vocab_size])?, prev, k)
    }

    /// `finalize_hypos`' first half for the rows `idx` ending at `step` with `eos_scores`: their
    /// tokens (without BOS, EOS last), positional scores and normalized final scores.
    #[allow(clippy::too_many_arguments)]
    fn ended(
        &self,
        step: i64,
        idx: &[i64],
        mut eos_scores: Vec<f32>,
        tokens: &[i64],
        width: usize,
        scores: &[f32],
        score_width: usize,
    ) -> (Vec<i64>, Vec<f32>, Vec<f32>) {
        let s = step as usize;
        let (mut toks, mut pos) = (Vec::with_capacity(idx.len() * (s + 1)), Vec::with_capacity(idx.len() * (s + 1)));
        for (&row, &eos_score) in idx.iter().zip(&eos_scores) {
            let row = row as usize;
            toks.extend_from_slice(&tokens[row * width + 1..][..s]);
            toks.push(self.specials.eos);
            let cumulative = &scores[row * score_width..][..s];
            let at = pos.len();
            pos.extend_from_slice(cumulative);
            pos.push(eos_score);
            for t in (1..=s).rev() {
                pos[at + t] -= pos[at + t - 1];
            }
        }
        if self.cfg.normalize_scores {
            // Python: eos_scores /= (step + 1) ** self.len_penalty
            let denom = ((step + 1) as f64).powf(self.cfg.len_penalty) as f32;
            eos_scores.iter_mut().for_each(|v| *v /= denom);
        }
        (toks, pos, eos_scores)
    }
}
