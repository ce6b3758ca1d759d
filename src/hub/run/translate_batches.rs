//! Running given batches of encoded sentences: what fairseq's generation loop does with each
//! batch of its iterator (collate, generate, align), one batch per worker.

use std::time::Instant;

use super::guide::{batch_prefixes, TargetGuide};
use super::translator::{TranslateRequest, Translation, Translator};
use crate::config::LanguageTask;
use crate::generate::batching::collate;
use crate::generate::rng_replay::replay_dataloader_iter;
use crate::generate::workers::{catch_panic, run_each};
use crate::generate::{EnsembleModel, GenerateError, GenerateRequest, Hypothesis, InvalidOption, SequenceGenerator};
use crate::model::TransformerModel;

impl Translator {
    /// Translates `batches` (lists of indices into `tokens`, each batch as fairseq's iterator
    /// yields it) with `inter_threads` workers; sentence `i`'s result is at `i`, `None` for a
    /// sentence in no batch. One call is one pass of fairseq's iterator: its DataLoader draws
    /// once from libtorch's generator before the first batch.
    pub fn translate_batches(
        &self,
        generator: &SequenceGenerator,
        tokens: Vec<Vec<i64>>,
        batches: Vec<Vec<usize>>,
        inter_threads: usize,
        request: &TranslateRequest<'_>,
    ) -> Result<Vec<Option<Translation>>, GenerateError> {
        let TranslateRequest { guides, alignment, on_token, on_batch } = *request;
        if !guides.is_empty() && guides.len() != tokens.len() {
            return Err(InvalidOption::GuideCount { guides: guides.len(), sentences: tokens.len() }.into());
        }
        if let Some(&bad) = batches.iter().flatten().find(|&&i| i >= tokens.len()) {
            return Err(GenerateError::Invariant(format!("a batch holds sentence {bad} of {}", tokens.len())));
        }
        let constrained = guides.iter().any(|g| !g.constraints.is_empty());
        let mut results: Vec<Option<Translation>> = vec![None; tokens.len()];
        replay_dataloader_iter()?;
        let (device, pad) = (self.device, self.src_dict.pad());
        // fairseq's SequenceGeneratorWithAlignment aligns with the generator's EOS (`[tgt]` for mBART fine-tuning)
        let (tgt_pad, tgt_eos) = (self.tgt_dict.pad(), self.generator_eos());
        let tokens_ref = &tokens;
        let aligned = !matches!(self.languages.task, LanguageTask::FromPretrainedBart { .. });
        // the decoder language token is forced first (the task's inference_step), before any prefix
        let language_guides: Vec<TargetGuide>;
        let guides = match self.language_tokens.target_prefix {
            None => guides,
            Some(t) => {
                language_guides = (0..tokens.len())
                    .map(|i| {
                        let g = guides.get(i).cloned().unwrap_or_default();
                        let t = g.language.unwrap_or(t);
                        TargetGuide { prefix: [t].into_iter().chain(g.prefix).collect(), constraints: g.constraints, language: None }
                    })
                    .collect();
                &language_guides
            }
        };
        let opens_with_language = self.language_tokens.target_prefix.is_some();
        let members = batches.clone();
        let src_dict = &self.src_dict;
        let translate_batch = |models: &[TransformerModel], batch: Vec<usize>| {
            let samples: Vec<(usize, &[i64])> = batch.iter().map(|&i| (i, tokens_ref[i].as_slice())).collect();
            crate::hub::fault::panic_if_asked(src_dict, samples.iter().map(|(_, t)| *t));
            let collated = collate(&samples, pad)?;
            let src_tokens = collated.src_tokens.f_to_device(device)?;
            let prefix_tokens = batch_prefixes(guides, &collated.ids, tgt_pad)?;
            let constraints: Option<Vec<Vec<Vec<i64>>>> =
                constrained.then(|| collated.ids.iter().map(|&i| guides[i].constraints.clone()).collect());
            let start = Instant::now();
            // a multilingual task's rows open with the forced language token, which is not told
            let mut opening = vec![opens_with_language; collated.ids.len()];
            let mut tell = |row: usize, token: i64| {
                if !std::mem::take(&mut opening[row]) {
                    if let Some(f) = on_token {
                        f(collated.ids[row], token);
                    }
                }
            };
            let request = GenerateRequest {
                prefix_tokens: prefix_tokens.as_ref(),
                constraints: constraints.as_deref(),
                bos_token: None,
                on_token: on_token.map(|_| &mut tell as &mut dyn FnMut(usize, i64)),
            };
            let mut hypos = generator.generate_with(&mut EnsembleModel::new(models)?, &src_tokens, request)?;
            let seconds = start.elapsed().as_secs_f64() / hypos.len().max(1) as f64;
            if alignment {
                for (row, hs) in hypos.iter_mut().enumerate() {
                    let src_row = Vec::<i64>::try_from(collated.src_tokens.f_select(0, row as i64)?)?;
                    for h in hs.iter_mut() {
                        // translation_from_pretrained_bart builds a plain SequenceGenerator: fairseq
                        // prints its A- lines empty
                        h.alignment = Some(if aligned { hard_alignment(h, &src_row, tgt_pad, tgt_eos) } else { Vec::new() });
                    }
                }
            }
            Ok::<_, GenerateError>((collated.ids, hypos, seconds))
        };
        let translated = run_each(&self.models, batches, inter_threads, |models, batch: Vec<usize>| {
            let Some(tell) = on_batch else { return translate_batch(models, batch) };
            let ids = batch.clone();
            // a panic fails only this batch, and its sentences are told as failed too
            let outcome = catch_panic(|| translate_batch(models, batch));
            let done: Vec<(usize, Translation)> = match &outcome {
                Ok((rows, hypos, seconds)) => rows
                    .iter()
                    .zip(hypos)
                    .map(|(&i, hs)| (i, Translation::Done { src_tokens: tokens_ref[i].clone(), hypos: hs.clone(), seconds: *seconds }))
                    .collect(),
                // the caller's error, returned from the whole call
                Err(GenerateError::InvalidOption(_)) => Vec::new(),
                Err(e) => ids.iter().map(|&i| (i, Translation::Failed { reason: e.to_string() })).collect(),
            };
            if !done.is_empty() {
                tell(&done);
            }
            outcome
        });
        // an option that no batch can take is the caller's error, not a batch's
        let mut translated = translated;
        if let Some(k) = translated.iter().position(|r| matches!(r, Err(GenerateError::InvalidOption(_)))) {
            translated.swap_remove(k)?;
        }
        let mut tokens = tokens;
        for (batch, outcome) in members.iter().zip(translated) {
            match outcome {
                Ok((ids, hypos, seconds)) => {
                    for (id, hs) in ids.into_iter().zip(hypos) {
                        let src_tokens = std::mem::take(&mut tokens[id]);
                        results[id] = Some(Translation::Done { src_tokens, hypos: hs, seconds });
                    }
                }
                Err(e) => {
                    for &id in batch {
                        results[id] = Some(Translation::Failed { reason: e.to_string() });
                    }
                }
            }
        }
        Ok(results)
    }
}

/// `utils.extract_hard_alignment` over the attention kept during search (fairseq's
/// `SequenceGeneratorWithAlignment` without full-context alignment): for each target token
/// that is not EOS, the source word with the highest attention (pad/EOS excluded), as 0-based
/// (src, tgt) word pairs (BPE-free inputs: one token = one word).
fn hard_alignment(h: &Hypothesis, src: &[i64], pad: i64, eos: i64) -> Vec<(i64, i64)> {
    let Some(attn) = h.attention.as_ref() else { return Vec::new() };
    let src_valid: Vec<usize> = (0..src.len()).filter(|&j| src[j] != pad && src[j] != eos).collect();
    // token index -> word index (fairseq's get_token_to_word_mapping: 1-based over non-special tokens)
    let word_of =
        |toks: &[i64], idx: usize| -> i64 { toks[..=idx].iter().filter(|&&t| t != pad && t != eos).count() as i64 };
    let mut out = Vec::new();
    if src_valid.is_empty() {
        return out;
    }
    for (t, &tok) in h.tokens.iter().enumerate() {
        if tok == pad || tok == eos {
            continue;
        }
        let Some(row) = attn.get(t) else { continue };
        let mut best = src_valid[0];
        for &j in &src_valid {
            if row[j] > row[best] {
                best = j;
            }
        }
        out.push((word_of(src, best) - 1, word_of(&h.tokens, t) - 1));
    }
    out
}

