//! `--score-reference`: fairseq-generate with its `SequenceScorer`, each reference scored in
//! the batches generation would have used, printed as its one hypothesis.

use std::collections::HashMap;

use anyhow::{bail, Result};
use tchseq::generate::batching::collate;
use tchseq::generate::Hypothesis;
use tchseq::hub::{Encoded, Scored, Translation, Translator};

use super::Samples;

/// Batches handed to the workers at a time, per worker: what is finished is written before the
/// next ones start.
const BATCHES_PER_WORKER: usize = 4;

/// Scores `batches` of `data`'s pairs and tells `on_batch` each batch's sentences in fairseq's
/// order (the batch's rows sorted by descending source length).
pub fn score(
    t: &Translator,
    samples: &Samples,
    batches: &[Vec<usize>],
    inter_threads: usize,
    on_batch: &dyn Fn(&[(usize, Translation)]),
) -> Result<()> {
    let Some(targets) = &samples.targets else {
        bail!("--score-reference scores the split's references, and this split has none");
    };
    let pairs: Vec<Encoded> =
        samples.sources.iter().zip(targets).map(|(s, t)| Encoded { source: s.clone(), target: t.clone() }).collect();
    let pad = t.src_dict.pad();
    for chunk in batches.chunks(BATCHES_PER_WORKER * inter_threads.max(1)) {
        let refs: Vec<Vec<&Encoded>> = chunk.iter().map(|b| b.iter().map(|&i| &pairs[i]).collect()).collect();
        for (batch, scored) in chunk.iter().zip(t.score_batches(&refs, inter_threads)) {
            let samples: Vec<(usize, &[i64])> = batch.iter().map(|&i| (i, pairs[i].source.as_slice())).collect();
            let order = collate(&samples, pad)?.ids;
            let done: Vec<(usize, Translation)> = match scored {
                Ok(scores) => {
                    let mut by_id: HashMap<usize, Scored> = batch.iter().copied().zip(scores).collect();
                    order.iter().filter_map(|&i| Some((i, as_hypothesis(&pairs[i], by_id.remove(&i)?)))).collect()
                }
                Err(e) => order.iter().map(|&i| (i, Translation::Failed { reason: e.to_string() })).collect(),
            };
            on_batch(&done);
        }
    }
    Ok(())
}

/// `SequenceScorer.generate`'s hypothesis: the reference, its average log-probability as the
/// score.
fn as_hypothesis(pair: &Encoded, s: Scored) -> Translation {
    let hypo = Hypothesis {
        tokens: pair.target.clone(),
        score: s.avg_logprob,
        positional_scores: s.positional_scores,
        attention: None,
        alignment: None,
    };
    Translation::Done { src_tokens: pair.source.clone(), hypos: vec![hypo], seconds: 0.0 }
}
