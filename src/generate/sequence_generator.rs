//! fairseq 0.12.2 `SequenceGenerator._generate` and `finalize_hypos`, op for op with libtorch.

use tch::{Device, Kind, Tensor};

use super::constrained_search::ConstrainedSearch;
use super::ngram::{NgramMode, NgramRepeatBlock};
use super::search::SearchStrategy;
use super::{Bookkeeping, GenerateError, Hypothesis, StepModel};
use crate::generate::InvalidOption;

/// fairseq's `GenerationConfig` fields that `SequenceGenerator` reads.
#[derive(Debug, Clone)]
pub struct GeneratorConfig {
    pub beam_size: usize,
    pub max_len_a: f64,
    pub max_len_b: i64,
    pub min_len: i64,
    /// `not --unnormalized`
    pub normalize_scores: bool,
    pub len_penalty: f64,
    pub unk_penalty: f64,
    pub temperature: f64,
    pub no_repeat_ngram_size: usize,
    /// Which of fairseq 0.12.2's two n-gram blockers (its CPU code by default; see `NgramMode`).
    pub ngram_mode: NgramMode,
    pub search: SearchStrategy,
    /// Keep the cross-attention of every step (needed for `--print-alignment`).
    pub need_attn: bool,
}

impl GeneratorConfig {
    /// `match_source_len`: the search is `LengthConstrainedBeamSearch`.
    fn match_source_len(&self) -> bool {
        self.search == SearchStrategy::MatchSourceLen
    }
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            beam_size: 5,
            max_len_a: 0.0,
            max_len_b: 200,
            min_len: 1,
            normalize_scores: true,
            len_penalty: 1.0,
            unk_penalty: 0.0,
            temperature: 1.0,
            no_repeat_ngram_size: 0,
            ngram_mode: NgramMode::FairseqCpu,
            search: SearchStrategy::Beam,
            need_attn: false,
        }
    }
}

/// Special symbols of the target dictionary.
#[derive(Debug, Clone, Copy)]
pub struct Specials {
    pub pad: i64,
    pub eos: i64,
    pub unk: i64,
}

impl Default for Specials {
    fn default() -> Self {
        Specials { pad: 1, eos: 2, unk: 3 }
    }
}

/// fairseq's `SequenceGenerator` (beam search or sampling).
#[derive(Debug, Clone)]
pub struct SequenceGenerator {
    cfg: GeneratorConfig,
    vocab_size: i64,
    specials: Specials,
    /// `min(beam, len(tgt_dict) - 1)`
    beam_size: i64,
    blocker: Option<NgramRepeatBlock>,
}

fn bad(msg: impl Into<String>) -> GenerateError {
    GenerateError::Invariant(msg.into())
}

/// What one call of [`SequenceGenerator::generate_with`] asks besides the batch, as fairseq's
/// `_generate` takes it; every field is optional (CTranslate2's `TranslationOptions` plays
/// this part there).
#[derive(Default)]
pub struct GenerateRequest<'a> {
    /// fairseq's `prefix_tokens`: `[bsz, P]`, right-padded with pad; each row's hypotheses
    /// begin with its prefix (which may not hold EOS).
    pub prefix_tokens: Option<&'a Tensor>,
    /// fairseq's `constraints`: per row, the token sequences its hypotheses must contain (the
    /// search must be `LexicallyConstrained`; without them, every row has none).
    pub constraints: Option<&'a [Vec<Vec<i64>>]>,
    /// fairseq's `bos_token`, which starts every hypothesis (default EOS).
    pub bos_token: Option<i64>,
    /// Told `(row, token)` for each token a row's hypothesis grows by, as it is decoded, when
    /// the beam is 1 (greedy or sampling: the one hypothesis never changes its past;
    /// CTranslate2's `generate_tokens`). The final EOS is not told.
    pub on_token: Option<&'a mut dyn FnMut(usize, i64)>,
}

impl SequenceGenerator {
    pub fn new(cfg: GeneratorConfig, vocab_size: usize, specials: Specials) -> Result<Self, GenerateError> {
        if cfg.beam_size == 0 {
            return Err(InvalidOption::BeamSize.into());
        }
        if cfg.temperature.is_nan() || cfg.temperature <= 0.0 {
            return Err(InvalidOption::Temperature.into());
        }
        let vocab_size = i64::try_from(vocab_size).map_err(|_| bad("vocabulary too large"))?;
        if vocab_size < 2 {
            return Err(InvalidOption::TinyDictionary.into());
        }
        let beam_size = (cfg.beam_size as i64).min(vocab_size - 1);
        let blocker = NgramRepeatBlock::new(cfg.no_repeat_ngram_size, cfg.ngram_mode);
        Ok(SequenceGenerator { cfg, vocab_size, specials, beam_size, blocker })
    }

    /// The effective beam size (`min(beam, V - 1)`).
    /// The search draws from libtorch's generator (sampling): its batches must run in
    /// fairseq's order, one after the other, for fairseq's draws.
    pub fn draws_at_random(&self) -> bool {
        matches!(self.cfg.search, SearchStrategy::Sampling { .. })
    }

    pub fn beam_size(&self) -> usize {
        self.beam_size as usize
    }

    /// `max_len` for a batch whose padded source width is `src_len`.
    pub fn max_len(&self, src_len: i64, model_max_len: usize) -> i64 {
        // Python: min(int(max_len_a * src_len + max_len_b), self.max_len - 1)
        let a = (self.cfg.max_len_a * src_len as f64 + self.cfg.max_len_b as f64).trunc() as i64;
        a.min(i64::try_from(model_max_len).unwrap_or(i64::MAX) - 1)
    }

    /// Generates for one batch. `src_tokens` is `[bsz, src_len]`, left-padded, each row ending
    /// in EOS. Returns, per row, the finished hypotheses sorted by descending score.
    pub fn generate<M: StepModel>(
        &self,
        model: &mut M,
        src_tokens: &Tensor,
    ) -> Result<Vec<Vec<Hypothesis>>, GenerateError> {
        self.generate_with(model, src_tokens, GenerateRequest::default())
    }

    /// [`Self::generate`] with what fairseq's `_generate` takes besides the sample
    /// ([`GenerateRequest`]).
    pub fn generate_with<M: StepModel>(
        &self,
        model: &mut M,
        src_tokens: &Tensor,
        request: GenerateRequest<'_>,
    ) -> Result<Vec<Vec<Hypothesis>>, GenerateError> {
        let GenerateRequest { prefix_tokens, constraints, bos_token, mut on_token } = request;
        let _guard = tch::no_grad_guard();
        let _inference = crate::libtorch::InferenceMode::enter();
        if model.bookkeeping() != Bookkeeping::Tensors
            && self.cfg.search == SearchStrategy::Beam
            && prefix_tokens.is_none()
            && constraints.is_none()
            && self.blocker.is_none()
            && !self.cfg.need_attn
            && src_tokens.dim() == 2
        {
            return self.generate_on_host(model, src_tokens, bos_token, on_token);
        }
        let Specials { pad, eos, .. } = self.specials;
        let size = src_tokens.size();
        let (mut bsz, src_len) = match size.as_slice() {
            &[b, s] => (b, s),
            other => return Err(bad(format!("src_tokens must be 2-d, got {other:?}"))),
        };
        let orig_bsz = bsz;
        let beam_size = self.beam_size;
        let device: Device = src_tokens.device();
        // the source lengths without EOS and padding, which only LengthConstrainedBeamSearch reads
        let mut src_lengths = match self.cfg.match_source_len() {
            true => Some(src_tokens.f_ne(eos)?.f_logical_and(&src_tokens.f_ne(pad)?)?.f_sum_dim_intlist(1, false, Kind::Int64)?),
            false => None,
        };
        let max_len = match &src_lengths {
            Some(lengths) => lengths.f_max()?.f_int64_value(&[])?,
            None => self.max_len(src_len, model.max_decoder_positions()),
        };
        if self.cfg.min_len > max_len {
            return Err(InvalidOption::MinLen { min_len: self.cfg.min_len, max_len }.into());
        }
        if let Some(blocker) = self.blocker.as_ref() {
            blocker.check_bos(bos_token.unwrap_or(eos), eos)?;
        }
        let i64opts = (Kind::Int64, device);
        let mut prefix_tokens = match prefix_tokens {
            Some(p) => {
                if p.dim() != 2 || p.size()[0] != bsz {
                    return Err(bad(format!("prefix_tokens {:?} for {bsz} sentences", p.size())));
                }
                if p.f_eq(eos)?.f_any()?.f_int64_value(&[])? != 0 {
                    return Err(InvalidOption::PrefixWithEos.into());
                }
                Some(p.f_to_device(device)?)
            }
            None => None,
        };

        let mut constrained = match (self.cfg.search, constraints) {
            (SearchStrategy::LexicallyConstrained(order), c) => {
                let none = vec![Vec::new(); bsz as usize];
                let c = c.unwrap_or(&none);
                if c.len() as i64 != bsz {
                    return Err(bad(format!("constraints for {} sentences in a batch of {bsz}", c.len())));
                }
                Some(ConstrainedSearch::new(order, c, beam_size, self.vocab_size, eos)?)
            }
            (_, Some(_)) => {
                return Err(InvalidOption::ConstraintsUnsupported.into())
            }
            (_, None) => None,
        };

        let new_order = Tensor::f_arange(bsz, i64opts)?.f_view([-1, 1])?.f_repeat([1, beam_size])?.f_view([-1])?;
        model.begin(src_tokens, &new_order)?;

        let mut scores = Tensor::f_zeros([bsz * beam_size, max_len + 1], (Kind::Float, device))?;
        let mut tokens = Tensor::f_full([bsz * beam_size, max_len + 2], pad, i64opts)?;
        let _ = tokens.f_select(1, 0)?.f_fill_(bos_token.unwrap_or(eos))?;
        let mut attn: Option<Tensor> = None;
        let mut cands_to_ignore = Tensor::f_zeros([bsz, beam_size], (Kind::Bool, device))?;
        let mut finalized: Vec<Vec<Hypothesis>> = vec![Vec::new(); orig_bsz as usize];
        let mut finished = vec![false; orig_bsz as usize];
        let mut num_remaining_sent = bsz;
        let cand_size = self.cfg.search.cand_size(beam_size);
        let mut bbsz_offsets = Tensor::f_arange(bsz, i64opts)?.f_mul_scalar(beam_size)?.f_unsqueeze(1)?;
        let cand_offsets = Tensor::f_arange(cand_size, i64opts)?;
        let mut reorder_state: Option<Tensor> = None;
        let mut batch_idxs: Option<Tensor> = None;
        // the original row of each row still in the batch (for `on_token`)
        let mut rows: Vec<usize> = (0..orig_bsz as usize).collect();

        for step in 0..=max_len {
            if let Some(rs) = reorder_state.as_mut() {
                if let Some(bi) = batch_idxs.as_ref() {
                    // update beam indices to take into account removed sentences
                    let corr = bi.f_sub(&Tensor::f_arange(bi.numel() as i64, i64opts)?)?;
                    let mut view = rs.f_view([-1, beam_size])?;
                    let _ = view.f_add_(&corr.f_unsqueeze(-1)?.f_mul_scalar(beam_size)?)?;
                }
                model.reorder(rs)?;
            }
            let prefix = tokens.f_narrow(1, 0, step + 1)?;
            let (mut lprobs, avg_attn) = model.forward_decoder(&prefix, self.cfg.temperature, self.cfg.need_attn)?;

            let prefix_step = prefix_tokens.as_ref().filter(|p| step < p.size()[1] && step < max_len);
            // NaN left for the plain beam search to replace (`beam_step_replacing_nan`) where
            // nothing between here and it reads them
            let nan_to_beam = self.cfg.search == SearchStrategy::Beam
                && constrained.is_none()
                && self.blocker.is_none()
                && prefix_step.is_none();
            self.mask_lprobs(&mut lprobs, step, max_len, !nan_to_beam)?;
            match prefix_step {
                Some(prefix) => self.prefix_step(step, &mut lprobs, prefix)?,
                // minimum length constraint (does not apply on prefix steps)
                None if step < self.cfg.min_len => {
                    let _ = lprobs.f_select(1, eos)?.f_fill_(f64::NEG_INFINITY)?;
                }
                None => {}
            }

            if let Some(a) = avg_attn.as_ref() {
                if attn.is_none() {
                    attn = Some(Tensor::f_empty([bsz * beam_size, a.size()[1], max_len + 2], (Kind::Float, device))?);
                }
                if let Some(buf) = attn.as_mut() {
                    buf.f_select(2, step + 1)?.f_copy_(a)?;
                }
            }

            if let Some(blocker) = self.blocker.as_ref() {
                blocker.apply(&tokens, &mut lprobs, step)?;
            }

            let step_lprobs = lprobs.f_view([bsz, -1, self.vocab_size])?;
            let step_scores = scores.f_view([bsz, beam_size, -1])?.f_narrow(2, 0, step)?;
            let cands = match constrained.as_mut() {
                Some(search) => search.step(step, &step_lprobs, &step_scores)?,
                None if nan_to_beam => super::beam_search::beam_step_replacing_nan(step, &step_lprobs, &step_scores)?,
                None => self.cfg.search.step(step, &step_lprobs, &step_scores, src_lengths.as_ref(), eos)?,
            };
            let mut cand_scores = cands.scores;
            let mut cand_indices = cands.indices;
            let mut cand_beams = cands.beams;
            let mut cand_bbsz_idx = cand_beams.f_add(&bbsz_offsets)?;

            let mut eos_mask = cand_indices.f_eq(eos)?.f_logical_and(&cand_scores.f_ne(f64::NEG_INFINITY)?)?;
            let _ = eos_mask.f_narrow(1, 0, beam_size)?.f_masked_fill_(&cands_to_ignore, 0)?;
            // only consider eos when it's among the top beam_size indices
            let eos_head = eos_mask.f_narrow(1, 0, beam_size)?;
            let eos_bbsz_idx = cand_bbsz_idx.f_narrow(1, 0, beam_size)?.f_masked_select(&eos_head)?;

            let mut finalized_sents: Vec<i64> = Vec::new();
            if eos_bbsz_idx.numel() > 0 {
                let eos_scores = cand_scores.f_narrow(1, 0, beam_size)?.f_masked_select(&eos_head)?;
                finalized_sents = self.finalize_hypos(
                    step,
                    &eos_bbsz_idx,
                    eos_scores,
                    &tokens,
                    &scores,
                    &mut finalized,
                    &mut finished,
                    attn.as_ref(),
                    max_len,
                    src_lengths.as_ref(),
                )?;
                num_remaining_sent -= finalized_sents.len() as i64;
            }
            if num_remaining_sent < 0 {
                return Err(bad("more sentences finished than were in the batch"));
            }
            if num_remaining_sent == 0 {
                break;
            }
            if step >= max_len {
                return Err(bad(format!("step {step} reached max_len {max_len} with unfinished sentences")));
            }

            // Remove finalized sentences from the batch.
            if !finalized_sents.is_empty() {
                let new_bsz = bsz - finalized_sents.len() as i64;
                let mut keep = vec![true; bsz as usize];
                for &s in &finalized_sents {
                    *keep.get_mut(s as usize).ok_or_else(|| bad("finalized index out of range"))? = false;
                }
                let kept: Vec<i64> = (0..bsz).filter(|&i| keep[i as usize]).collect();
                rows = kept.iter().map(|&k| rows[k as usize]).collect();
                let bi = Tensor::from_slice(&kept).f_to_device(device)?;
                if let Some(search) = constrained.as_mut() {
                    search.prune_sentences(&kept);
                }

                eos_mask = eos_mask.f_index_select(0, &bi)?;
                cand_beams = cand_beams.f_index_select(0, &bi)?;
                bbsz_offsets = bbsz_offsets.f_narrow(0, 0, new_bsz)?;
                cand_bbsz_idx = cand_beams.f_add(&bbsz_offsets)?;
                cand_scores = cand_scores.f_index_select(0, &bi)?;
                cand_indices = cand_indices.f_index_select(0, &bi)?;
                cands_to_ignore = cands_to_ignore.f_index_select(0, &bi)?;
                if let Some(l) = src_lengths.take() {
                    src_lengths = Some(l.f_index_select(0, &bi)?);
                }
                if let Some(p) = prefix_tokens.take() {
                    prefix_tokens = Some(p.f_index_select(0, &bi)?);
                }
                scores = scores.f_view([bsz, -1])?.f_index_select(0, &bi)?.f_view([new_bsz * beam_size, -1])?;
                tokens = tokens.f_view([bsz, -1])?.f_index_select(0, &bi)?.f_view([new_bsz * beam_size, -1])?;
                if let Some(a) = attn.take() {
                    let s1 = a.size()[1];
                    attn = Some(a.f_view([bsz, -1])?.f_index_select(0, &bi)?.f_view([new_bsz * beam_size, s1, -1])?);
                }
                bsz = new_bsz;
                batch_idxs = Some(bi);
            } else {
                batch_idxs = None;
            }

            // values >= cand_size mark EOS (or ignored) candidates; the smallest K values
            // per row are the first active candidates in topk order
            let head = eos_mask.f_narrow(1, 0, beam_size)?;
            let merged = cands_to_ignore.f_logical_not()?.f_logical_and(&head.f_logical_not()?)?.f_logical_not()?;
            eos_mask.f_narrow(1, 0, beam_size)?.f_copy_(&merged)?;
            let width = eos_mask.size()[1];
            let active_mask = eos_mask
                .f_to_kind(Kind::Int64)?
                .f_mul_scalar(cand_size)?
                .f_add(&cand_offsets.f_narrow(0, 0, width)?)?;
            let (new_cands_to_ignore, active_hypos) = active_mask.f_topk(beam_size, 1, false, true)?;
            cands_to_ignore = new_cands_to_ignore.f_ge(cand_size)?.f_narrow(1, 0, beam_size)?;
            let any_active = cands_to_ignore.f_logical_not()?.f_any_dim(1, false)?.f_all()?.f_int64_value(&[])?;
            if any_active == 0 {
                return Err(bad("a sentence has no active hypothesis left"));
            }

            let active_bbsz_idx = cand_bbsz_idx.f_gather(1, &active_hypos, false)?.f_view([-1])?;

            let head_tokens = tokens.f_narrow(1, 0, step + 1)?;
            let selected = head_tokens.f_index_select(0, &active_bbsz_idx)?;
            tokens.f_narrow(1, 0, step + 1)?.f_copy_(&selected)?;
            let next = cand_indices.f_gather(1, &active_hypos, false)?;
            tokens.f_view([bsz, beam_size, -1])?.f_select(2, step + 1)?.f_copy_(&next)?;
            if let Some(tell) = on_token.as_mut().filter(|_| beam_size == 1) {
                let next = Vec::<i64>::try_from(next.f_view([-1])?.f_to_device(Device::Cpu)?)?;
                for (row, token) in rows.iter().zip(next) {
                    tell(*row, token);
                }
            }
            if step > 0 {
                let selected = scores.f_narrow(1, 0, step)?.f_index_select(0, &active_bbsz_idx)?;
                scores.f_narrow(1, 0, step)?.f_copy_(&selected)?;
            }
            let next_scores = cand_scores.f_gather(1, &active_hypos, false)?;
            scores.f_view([bsz, beam_size, -1])?.f_select(2, step)?.f_copy_(&next_scores)?;
            if let Some(search) = constrained.as_mut() {
                search.update_constraints(&active_hypos)?;
            }
            if let Some(a) = attn.as_mut() {
                let selected = a.f_narrow(2, 0, step + 2)?.f_index_select(0, &active_bbsz_idx)?;
                a.f_narrow(2, 0, step + 2)?.f_copy_(&selected)?;
            }
            reorder_state = Some(active_bbsz_idx);
        }

        sort_finalized(&mut finalized)?;
        Ok(finalized)
    }

    /// What `_generate` does to a step's log-probs before any prefix or minimum length: NaN to
    /// −inf (unless `nan` is false: the caller has them replaced later), no padding, the
    /// unknown-word penalty, and only EOS at `max_len`.
    fn mask_lprobs(&self, lprobs: &mut Tensor, step: i64, max_len: i64, nan: bool) -> Result<(), GenerateError> {
        let Specials { pad, eos, unk } = self.specials;
        if nan {
            // lprobs[lprobs != lprobs] = -inf, in one pass
            let _ = lprobs.f_nan_to_num_(f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY)?;
        }
        let _ = lprobs.f_select(1, pad)?.f_fill_(f64::NEG_INFINITY)?;
        let _ = lprobs.f_select(1, unk)?.f_sub_scalar_(self.cfg.unk_penalty)?;
        if step >= max_len {
            let _ = lprobs.f_slice(1, None, eos, 1)?.f_fill_(f64::NEG_INFINITY)?;
            let _ = lprobs.f_slice(1, eos + 1, None, 1)?.f_fill_(f64::NEG_INFINITY)?;
        }
        Ok(())
    }

    /// `_prefix_tokens` without its EOS branch (prefixes hold no EOS): on rows whose prefix
    /// has a token at `step`, every other token gets -inf and the prefix token keeps its score.
    fn prefix_step(&self, step: i64, lprobs: &mut Tensor, prefix_tokens: &Tensor) -> Result<(), GenerateError> {
        let beam_size = self.beam_size;
        let prefix_toks = prefix_tokens.f_select(1, step)?.f_unsqueeze(-1)?.f_repeat([1, beam_size])?.f_view([-1])?;
        let prefix_lprobs = lprobs.f_gather(-1, &prefix_toks.f_unsqueeze(-1)?, false)?;
        let rows = prefix_toks.f_ne(self.specials.pad)?.f_nonzero()?.f_squeeze_dim(1)?;
        if rows.numel() == 0 {
            return Ok(());
        }
        let forced = lprobs.f_index_select(0, &rows)?.f_fill_(f64::NEG_INFINITY)?.f_scatter(
            -1,
            &prefix_toks.f_index_select(0, &rows)?.f_unsqueeze(-1)?,
            &prefix_lprobs.f_index_select(0, &rows)?,
        )?;
        let _ = lprobs.f_index_copy_(0, &rows, &forced)?;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn finalize_hypos(
        &self,
        step: i64,
        bbsz_idx: &Tensor,
        mut eos_scores: Tensor,
        tokens: &Tensor,
        scores: &Tensor,
        finalized: &mut [Vec<Hypothesis>],
        finished: &mut [bool],
        attn: Option<&Tensor>,
        max_len: i64,
        src_lengths: Option<&Tensor>,
    ) -> Result<Vec<i64>, GenerateError> {
        let beam_size = self.beam_size;
        let eos = self.specials.eos;
        // the hypothesis tokens, without the leading BOS
        let tokens_clone = tokens.f_index_select(0, bbsz_idx)?.f_narrow(1, 1, step + 1)?;
        let _ = tokens_clone.f_select(1, step)?.f_fill_(eos)?;
        let attn_clone = match attn {
            Some(a) => Some(a.f_index_select(0, bbsz_idx)?.f_narrow(2, 1, step + 1)?),
            None => None,
        };
        // per-position scores from the cumulative ones
        let pos_scores = scores.f_index_select(0, bbsz_idx)?.f_narrow(1, 0, step + 1)?;
        pos_scores.f_select(1, step)?.f_copy_(&eos_scores)?;
        let diff = pos_scores.f_narrow(1, 1, step)?.f_sub(&pos_scores.f_narrow(1, 0, step)?)?;
        pos_scores.f_narrow(1, 1, step)?.f_copy_(&diff)?;
        if self.cfg.normalize_scores {
            // Python: eos_scores /= (step + 1) ** self.len_penalty
            let denom = ((step + 1) as f64).powf(self.cfg.len_penalty);
            let _ = eos_scores.f_div_scalar_(denom)?;
        }
        if let Some(lengths) = src_lengths {
            let unfin_idx = bbsz_idx.f_div_scalar_mode(beam_size, "trunc")?;
            let too_long = lengths.f_index_select(0, &unfin_idx)?.f_lt(step)?;
            eos_scores = eos_scores.f_masked_fill(&too_long, f64::NEG_INFINITY)?;
        }

        let idx = Vec::<i64>::try_from(bbsz_idx)?;
        let toks = Vec::<i64>::try_from(tokens_clone.f_contiguous()?.f_view([-1])?)?;
        let pos = Vec::<f32>::try_from(pos_scores.f_contiguous()?.f_view([-1])?)?;
        let sc = Vec::<f32>::try_from(eos_scores)?;
        let attn_rows: Option<(Vec<f32>, usize)> = match attn_clone {
            Some(a) => {
                // [n, S, step+1] -> per hypothesis [tgt][src]
                let s = a.size()[1] as usize;
                let t = a.f_transpose(1, 2)?.f_contiguous()?.f_view([-1])?;
                Some((Vec::<f32>::try_from(t)?, s))
            }
            None => None,
        };
        self.record_finished(step, Ended { idx: &idx, toks: &toks, pos: &pos, sc: &sc, attn_rows }, finalized, finished, max_len)
    }

    /// The rest of `finalize_hypos`, on the host: each ended hypothesis (its row `idx` in the
    /// reduced batch, its tokens and positional scores, `step + 1` each, and its final score)
    /// joins its sentence's list unless that holds `beam_size` already; returns the rows of the
    /// reduced batch whose sentence is now finished.
    fn record_finished(
        &self,
        step: i64,
        ended: Ended,
        finalized: &mut [Vec<Hypothesis>],
        finished: &mut [bool],
        max_len: i64,
    ) -> Result<Vec<i64>, GenerateError> {
        let beam_size = self.beam_size;
        let Ended { idx, toks, pos, sc, attn_rows } = ended;
        // map rows of the reduced batch back to the original sentence indices
        let mut cum_unfin: Vec<i64> = Vec::new();
        let mut prev = 0i64;
        for &f in finished.iter() {
            if f {
                prev += 1;
            } else {
                cum_unfin.push(prev);
            }
        }
        let n = idx.len();
        let width = (step + 1) as usize;
        let mut seen: Vec<(i64, i64)> = Vec::with_capacity(n);
        for i in 0..n {
            let unfin_idx = idx[i] / beam_size;
            let offset = *cum_unfin.get(unfin_idx as usize).ok_or_else(|| bad("row outside the active batch"))?;
            let sent = unfin_idx + offset;
            seen.push((sent, unfin_idx));
            let list = finalized.get_mut(sent as usize).ok_or_else(|| bad("sentence index out of range"))?;
            if (list.len() as i64) < beam_size {
                let attention = attn_rows.as_ref().map(|(data, s)| {
                    let base = i * width * s;
                    (0..width).map(|t| data[base + t * s..base + (t + 1) * s].to_vec()).collect()
                });
                list.push(Hypothesis {
                    tokens: toks[i * width..(i + 1) * width].to_vec(),
                    score: sc[i],
                    positional_scores: pos[i * width..(i + 1) * width].to_vec(),
                    attention,
                    alignment: None,
                });
            }
        }
        seen.sort_unstable();
        seen.dedup();
        let mut newly_finished = Vec::new();
        for (sent, unfin_idx) in seen {
            let s = sent as usize;
            let count = finalized[s].len() as i64;
            if !finished[s] && (count == beam_size || step == max_len) {
                finished[s] = true;
                newly_finished.push(unfin_idx);
            }
        }
        Ok(newly_finished)
    }
}

/// Each sentence's hypotheses by descending score (`torch.sort` on the f32 scores, as fairseq).
fn sort_finalized(finalized: &mut [Vec<Hypothesis>]) -> Result<(), GenerateError> {
    for hypos in finalized.iter_mut() {
        if hypos.len() < 2 {
            continue;
        }
        let s: Vec<f32> = hypos.iter().map(|h| h.score).collect();
        let (_, order) = Tensor::from_slice(&s).f_sort(0, true)?;
        let order = Vec::<i64>::try_from(order)?;
        let old = std::mem::take(hypos);
        *hypos = order.iter().map(|&i| old[i as usize].clone()).collect();
    }
    Ok(())
}

/// The ended hypotheses of one step, on the host (see `record_finished`).
struct Ended<'a> {
    idx: &'a [i64],
    toks: &'a [i64],
    pos: &'a [f32],
    sc: &'a [f32],
    /// Per hypothesis `[step + 1][S]`, and `S`.
    attn_rows: Option<(Vec<f32>, usize)>,
}

mod host_beam;
#[cfg(test)]
mod tests;
