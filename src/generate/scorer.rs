//! fairseq's `SequenceScorer` (`fairseq-generate --score-reference`) and the batching
//! `fairseq-generate` feeds it with (`LanguagePairDataset.ordered_indices`,
//! `language_pair_dataset.collate`; `data_utils.batch_by_size` is [`super::batching::batch_by_size`]
//! with `required_batch_size_multiple` 8).

use tch::{Kind, Tensor};

use crate::model::{ModelError, TransformerModel};

#[derive(Debug, thiserror::Error)]
pub enum ScorerError {
    #[error("cannot score an empty batch")]
    EmptyBatch,
    #[error("cannot score without a model")]
    NoModels,
    #[error("sentence {index} of the batch is empty (it needs at least the EOS token)")]
    EmptySentence { index: usize },
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Generate(#[from] super::GenerateError),
}

/// `LanguagePairDataset.ordered_indices` without shuffling: sorted by target length, then
/// (stably) by source length.
pub fn ordered_indices(src_sizes: &[usize], tgt_sizes: &[usize]) -> Vec<usize> {
    let mut indices: Vec<usize> = (0..src_sizes.len()).collect();
    indices.sort_by_key(|&i| tgt_sizes.get(i).copied().unwrap_or(0));
    indices.sort_by_key(|&i| src_sizes[i]);
    indices
}

/// A collated batch (`language_pair_dataset.collate`): rows sorted by descending source length.
#[derive(Debug)]
pub struct Sample {
    /// `[B, S]`, padded on the left when `left_pad_source`.
    pub src_tokens: Tensor,
    pub src_lengths: Tensor,
    /// `[B, T]`: `[eos, t_1 .. t_n]`, right-padded unless `left_pad_target`.
    pub prev_output_tokens: Tensor,
    /// `[B, T]`: `[t_1 .. t_n, eos]`.
    pub target: Tensor,
    /// `order[b]` = index into the collated pairs of batch row `b`.
    pub order: Vec<usize>,
}

/// `data_utils.collate_tokens`.
fn collate_tokens(
    values: &[&[i64]],
    pad: i64,
    eos: i64,
    left_pad: bool,
    move_eos_to_beginning: bool,
) -> Result<Tensor, ScorerError> {
    let size = values.iter().map(|v| v.len()).max().unwrap_or(0);
    let mut res = vec![pad; values.len() * size];
    for (i, v) in values.iter().enumerate() {
        let row = &mut res[i * size..(i + 1) * size];
        let dst = if left_pad { &mut row[size - v.len()..] } else { &mut row[..v.len()] };
        if move_eos_to_beginning {
            if let Some((first, rest)) = dst.split_first_mut() {
                *first = eos;
                rest.copy_from_slice(&v[..v.len() - 1]);
            }
        } else {
            dst.copy_from_slice(v);
        }
    }
    let rows = i64::try_from(values.len()).unwrap_or(i64::MAX);
    let cols = i64::try_from(size).unwrap_or(i64::MAX);
    Ok(Tensor::from_slice(&res).f_view([rows, cols])?)
}

/// `language_pair_dataset.collate` for (source, target) pairs that both end with EOS.
pub fn collate(
    pairs: &[(&[i64], &[i64])],
    pad: i64,
    eos: i64,
    left_pad_source: bool,
    left_pad_target: bool,
) -> Result<Sample, ScorerError> {
    if pairs.is_empty() {
        return Err(ScorerError::EmptyBatch);
    }
    if let Some(index) = pairs.iter().position(|(s, t)| s.is_empty() || t.is_empty()) {
        return Err(ScorerError::EmptySentence { index });
    }
    let sources: Vec<&[i64]> = pairs.iter().map(|p| p.0).collect();
    let targets: Vec<&[i64]> = pairs.iter().map(|p| p.1).collect();
    let src_tokens = collate_tokens(&sources, pad, eos, left_pad_source, false)?;
    let lengths: Vec<i64> =
        sources.iter().map(|s| s.iter().filter(|&&t| t != pad).count() as i64).collect();
    // torch's sort (not a Rust sort) so ties keep libtorch's order
    let (src_lengths, sort_order) = Tensor::from_slice(&lengths).f_sort(0, true)?;
    let src_tokens = src_tokens.f_index_select(0, &sort_order)?;
    let target = collate_tokens(&targets, pad, eos, left_pad_target, false)?
        .f_index_select(0, &sort_order)?;
    let prev_output_tokens = collate_tokens(&targets, pad, eos, left_pad_target, true)?
        .f_index_select(0, &sort_order)?;
    let order = Vec::<i64>::try_from(&sort_order)?
        .into_iter()
        .map(|i| usize::try_from(i).unwrap_or(0))
        .collect();
    Ok(Sample { src_tokens, src_lengths, prev_output_tokens, target, order })
}

/// What `SequenceScorer.generate` returns for one sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredHypo {
    /// The reference tokens, EOS included (`strip_pad(target)`).
    pub tokens: Vec<i64>,
    /// `positional_scores.sum()` (natural log).
    pub sum: f32,
    /// fairseq's `score`: `sum / len(tokens)`.
    pub score: f32,
    /// Log-probability of each reference token, EOS included.
    pub positional_scores: Vec<f32>,
}

/// fairseq's `SequenceScorer`: scores the reference target of every sentence of a batch with a
/// full-sequence decoder pass (no search, no length or unk penalty).
#[derive(Debug, Clone, Copy)]
pub struct SequenceScorer {
    pub pad: i64,
    pub eos: i64,
}

impl SequenceScorer {
    pub fn new(pad: i64, eos: i64) -> Self {
        Self { pad, eos }
    }

    /// `SequenceScorer.generate(models, sample)`: one hypothesis per batch row, in the sample's
    /// (sorted) row order. A single model gives `log_softmax` scores; an ensemble averages the
    /// models' *probabilities* and takes the log of the average.
    pub fn generate(&self, models: &[TransformerModel], sample: &Sample) -> Result<Vec<ScoredHypo>, ScorerError> {
        let first = models.first().ok_or(ScorerError::NoModels)?;
        let _guard = tch::no_grad_guard();
        let _inference = crate::libtorch::InferenceMode::enter();
        let device = first.device;
        let src_tokens = sample.src_tokens.f_to_device(device)?;
        let prev_output_tokens = sample.prev_output_tokens.f_to_device(device)?;
        let target = sample.target.f_to_device(device)?;
        let index = target.f_unsqueeze(-1)?;
        let log_probs = models.len() == 1;
        let mut avg_probs: Option<Tensor> = None;
        for model in models {
            let encoder_out = model.encoder.forward(&src_tokens, false)?;
            let decoder_out = model.decoder.forward(&prev_output_tokens, Some(&encoder_out), None, false, false)?;
            let probs = normalized_target_probs(&decoder_out.logits, &index, log_probs)?
                .f_view(target.size().as_slice())?;
            avg_probs = Some(match avg_probs {
                None => probs,
                Some(mut avg) => {
                    let _ = avg.f_add_(&probs)?;
                    avg
                }
            });
        }
        let mut avg_probs = avg_probs.ok_or(ScorerError::NoModels)?;
        if !log_probs {
            let _ = avg_probs.f_div_scalar_(models.len() as i64)?;
            let _ = avg_probs.f_log_()?;
        }
        hypos_from_probs(&avg_probs.f_to_device(tch::Device::Cpu)?, &sample.target, self.pad)
    }
}

/// Rows of the `[B, T, V]` logits normalized at a time: about 8M floats (32 MB).
const NORMALIZE_FLOATS: i64 = 8 << 20;

/// `get_normalized_probs` (`utils.log_softmax` / `utils.softmax`, dtype float32) gathered at
/// `index` (`[B, T, 1]`), a slice of batch rows at a time: each row's (log-)softmax is computed
/// alone, so the result is fairseq's bit for bit, without a second `[B, T, V]` tensor in memory.
/// One slice buffer serves every slice (fresh ones fragment the heap: RSS grew by a slice each).
fn normalized_target_probs(logits: &Tensor, index: &Tensor, log_probs: bool) -> Result<Tensor, ScorerError> {
    let size = logits.size();
    let (bsz, per_row) = (size[0], size[1..].iter().product::<i64>().max(1));
    let rows = (NORMALIZE_FLOATS / per_row).clamp(1, bsz.max(1));
    let options = (Kind::Float, logits.device());
    let out = Tensor::f_empty(index.size().as_slice(), options)?;
    let mut buffer_size = size.clone();
    buffer_size[0] = rows;
    let buffer = Tensor::f_empty(buffer_size.as_slice(), options)?;
    for start in (0..bsz).step_by(usize::try_from(rows).unwrap_or(1)) {
        let n = rows.min(bsz - start);
        let (slice, probs) = (logits.f_narrow(0, start, n)?, buffer.f_narrow(0, 0, n)?);
        if log_probs {
            let _ = slice.f_log_softmax_int_out(&probs, -1, Kind::Float)?;
        } else {
            let _ = slice.f_softmax_int_out(&probs, -1, Kind::Float)?;
        }
        let _ = probs.f_gather_out(&out.f_narrow(0, start, n)?, 2, &index.f_narrow(0, start, n)?, false)?;
    }
    Ok(out)
}

/// Turns the `[B, T]` gathered (log-)probabilities into hypotheses, as the tail of
/// `SequenceScorer.generate` does.
fn hypos_from_probs(avg_probs: &Tensor, target: &Tensor, pad: i64) -> Result<Vec<ScoredHypo>, ScorerError> {
    let bsz = avg_probs.size().first().copied().unwrap_or(0);
    let mut hypos = Vec::with_capacity(usize::try_from(bsz).unwrap_or(0));
    for i in 0..bsz {
        let row: Vec<i64> = Vec::<i64>::try_from(&target.f_get(i)?)?;
        let tokens: Vec<i64> = row.into_iter().filter(|&t| t != pad).collect();
        let tgt_len = tokens.len() as i64;
        let avg_probs_i = avg_probs.f_get(i)?.f_narrow(0, 0, tgt_len)?;
        let sum = avg_probs_i.f_sum(Kind::Float)?;
        let score = sum.f_div_scalar(tgt_len)?;
        hypos.push(ScoredHypo {
            tokens,
            sum: f32::try_from(&sum)?,
            score: f32::try_from(&score)?,
            positional_scores: Vec::<f32>::try_from(&avg_probs_i)?,
        });
    }
    Ok(hypos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::batching::batch_by_size;
    use crate::testing::TestRng;

    #[test]
    fn normalizing_a_slice_of_rows_at_a_time_changes_no_bit() {
        let mut rng = TestRng::new(7);
        for (b, t, v) in [(600, 23, 7944), (3, 5, 11), (1, 1, 4)] {
            let logits = rng.randn([b, t, v]) * 6.0;
            let index = rng.randint(v, [b, t, 1]);
            for log_probs in [true, false] {
                let whole = if log_probs { logits.log_softmax(-1, Kind::Float) } else { logits.softmax(-1, Kind::Float) }
                    .gather(2, &index, false);
                let sliced = normalized_target_probs(&logits, &index, log_probs).unwrap();
                assert!(sliced.equal(&whole), "{b}x{t}x{v} log_probs={log_probs}");
            }
        }
    }

    #[test]
    fn ordered_indices_sorts_by_source_then_target() {
        // ties in source length are broken by target length, then by index
        let src = [3, 2, 3, 2, 1];
        let tgt = [5, 4, 1, 4, 9];
        assert_eq!(ordered_indices(&src, &tgt), vec![4, 1, 3, 2, 0]);
    }

    #[test]
    fn batch_by_size_max_sentences_with_multiple() {
        let idx: Vec<usize> = (0..37).collect();
        let nt = vec![5; 37];
        let b = batch_by_size(&idx, &nt, None, Some(16), 8);
        let sizes: Vec<usize> = b.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![16, 16, 5]);
        assert_eq!(b.concat(), idx);
    }

    #[test]
    fn batch_by_size_max_tokens_rounds_to_multiple() {
        // 10 tokens each, budget 95 -> at most 9 sentences, rounded down to a multiple of 8
        let idx: Vec<usize> = (0..20).collect();
        let nt = vec![10; 20];
        let b = batch_by_size(&idx, &nt, Some(95), None, 8);
        let sizes: Vec<usize> = b.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![8, 8, 4]);
        // with growing lengths the longest sentence decides
        let nt: Vec<usize> = (1..=20).collect();
        let b = batch_by_size(&idx, &nt, Some(40), None, 1);
        for batch in &b {
            let longest = batch.iter().map(|&k| nt[k]).max().unwrap();
            assert!(batch.len() * longest <= 40, "{batch:?}");
        }
        assert_eq!(b.concat(), idx);
    }

    #[test]
    fn batch_by_size_oversized_sentence_gets_own_batch() {
        let idx: Vec<usize> = (0..5).collect();
        let nt = vec![3, 3, 50, 3, 3];
        let b = batch_by_size(&idx, &nt, Some(10), None, 1);
        assert!(b.iter().any(|batch| batch == &vec![2]), "{b:?}");
        assert_eq!(b.concat(), idx);
        let b = batch_by_size(&idx, &[50, 3, 3, 3, 3], Some(10), None, 1);
        assert_eq!(b[0], vec![0]);
        assert_eq!(b.concat(), idx);
    }

    #[test]
    fn collate_pads_shifts_and_sorts() {
        let (pad, eos) = (1, 2);
        let s0: &[i64] = &[10, 2];
        let t0: &[i64] = &[20, 21, 2];
        let s1: &[i64] = &[11, 12, 13, 2];
        let t1: &[i64] = &[22, 2];
        let sample = collate(&[(s0, t0), (s1, t1)], pad, eos, true, false).unwrap();
        assert_eq!(sample.order, vec![1, 0]);
        let src: Vec<i64> = Vec::try_from(&sample.src_tokens.view(-1)).unwrap();
        assert_eq!(src, vec![11, 12, 13, 2, 1, 1, 10, 2]);
        let tgt: Vec<i64> = Vec::try_from(&sample.target.view(-1)).unwrap();
        assert_eq!(tgt, vec![22, 2, 1, 20, 21, 2]);
        let prev: Vec<i64> = Vec::try_from(&sample.prev_output_tokens.view(-1)).unwrap();
        assert_eq!(prev, vec![2, 22, 1, 2, 20, 21]);
        let lens: Vec<i64> = Vec::try_from(&sample.src_lengths).unwrap();
        assert_eq!(lens, vec![4, 2]);
        assert!(matches!(collate(&[], pad, eos, true, false), Err(ScorerError::EmptyBatch)));
    }

    #[test]
    fn hypos_strip_padding_and_average() {
        let probs = Tensor::from_slice(&[-1.0f32, -2.0, -3.0, -0.5, -0.25, 0.0]).view([2, 3]);
        let target = Tensor::from_slice(&[5i64, 6, 2, 7, 2, 1]).view([2, 3]);
        let h = hypos_from_probs(&probs, &target, 1).unwrap();
        assert_eq!(h[0].tokens, vec![5, 6, 2]);
        assert_eq!(h[0].sum, -6.0);
        assert_eq!(h[0].score, -2.0);
        assert_eq!(h[1].tokens, vec![7, 2]);
        assert_eq!(h[1].positional_scores, vec![-0.5, -0.25]);
        assert_eq!(h[1].score, -0.375);
    }

    /// fairseq's own ordering, batching and in-batch sort (reference/score_batching.py).
    #[test]
    fn batching_matches_fairseq() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/score/batching.json");
        let text = std::fs::read_to_string(path).unwrap();
        let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
        let to_vec = |v: &serde_json::Value| -> Vec<usize> {
            v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect()
        };
        let cases = golden["cases"].as_array().unwrap();
        assert!(cases.len() >= 40);
        for (c, case) in cases.iter().enumerate() {
            let src = to_vec(&case["src_sizes"]);
            let tgt = to_vec(&case["tgt_sizes"]);
            let indices = ordered_indices(&src, &tgt);
            assert_eq!(indices, to_vec(&case["ordered_indices"]), "case {c}");
            let num_tokens: Vec<usize> = indices.iter().map(|&i| src[i].max(tgt[i])).collect();
            let opt = |k: &str| case[k].as_u64().map(|x| x as usize);
            let mult = case["bsz_mult"].as_u64().unwrap() as usize;
            let positions: Vec<usize> = (0..indices.len()).collect();
            let batches: Vec<Vec<usize>> =
                batch_by_size(&positions, &num_tokens, opt("max_tokens"), opt("max_sentences"), mult)
                    .into_iter()
                    .map(|b| b.into_iter().map(|k| indices[k]).collect())
                    .collect();
            let expected: Vec<Vec<usize>> =
                case["batches"].as_array().unwrap().iter().map(to_vec).collect();
            assert_eq!(batches, expected, "case {c}");
            for (b, batch) in batches.iter().enumerate() {
                let seqs: Vec<(Vec<i64>, Vec<i64>)> =
                    batch.iter().map(|&i| (vec![5; src[i]], vec![6; tgt[i]])).collect();
                let pairs: Vec<(&[i64], &[i64])> =
                    seqs.iter().map(|(s, t)| (s.as_slice(), t.as_slice())).collect();
                let sample = collate(&pairs, 1, 2, true, false).unwrap();
                assert_eq!(sample.order, to_vec(&case["collate_order"][b]), "case {c} batch {b}");
            }
        }
    }
}
