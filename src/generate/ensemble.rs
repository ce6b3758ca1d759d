//! fairseq's `EnsembleModel` (`sequence_generator.py`): one or more `TransformerModel`s decoded
//! in lock step; log-probs averaged as `logsumexp(stack(lprobs)) - ln(n)`.

use tch::{Kind, Tensor};

use super::{Bookkeeping, GenerateError, StepModel};
use crate::generate::InvalidOption;
use crate::model::{get_normalized_probs, EncoderOut, IncrementalState, TransformerModel};

/// The models of an ensemble plus the encoder outputs and caches of the batch being decoded.
pub struct EnsembleModel<'m> {
    models: &'m [TransformerModel],
    state: Vec<(EncoderOut, IncrementalState)>,
}

impl<'m> EnsembleModel<'m> {
    pub fn new(models: &'m [TransformerModel]) -> Result<Self, GenerateError> {
        if models.is_empty() {
            return Err(InvalidOption::EmptyEnsemble.into());
        }
        Ok(EnsembleModel { models, state: Vec::new() })
    }
}

impl StepModel for EnsembleModel<'_> {
    fn bookkeeping(&self) -> Bookkeeping {
        // on the CPU every compute type, `exact` included: the host's bookkeeping makes the
        // selections and the f32 arithmetic of fairseq's ops (`host_beam.rs`), without some
        // seventy small ops a step
        if self.models.iter().all(|m| m.device == tch::Device::Cpu) {
            Bookkeeping::Host
        } else if self.models.iter().all(|m| m.fast_tier() && m.device.is_cuda()) {
            Bookkeeping::DeviceCandidates
        } else {
            Bookkeeping::Tensors
        }
    }

    fn max_decoder_positions(&self) -> usize {
        self.models.iter().map(|m| m.max_decoder_positions()).min().unwrap_or(usize::MAX)
    }

    fn begin(&mut self, src_tokens: &Tensor, new_order: &Tensor) -> Result<(), GenerateError> {
        self.state.clear();
        let sentences = src_tokens.size().first().copied().unwrap_or(0).max(1);
        let beam = new_order.size().first().copied().unwrap_or(0) / sentences;
        for model in self.models {
            let enc = model.encoder.forward(src_tokens, false)?;
            if beam > 1 && model.beamable_encoder_attention() {
                // BART's dummy reorder_encoder_out: one row per sentence, for good
                self.state.push((enc, IncrementalState { beamable: beam, ..IncrementalState::new() }));
            } else {
                self.state.push((enc.reorder(new_order), IncrementalState::new()));
            }
        }
        Ok(())
    }

    fn reorder(&mut self, new_order: &Tensor) -> Result<(), GenerateError> {
        let rows = new_order.size().first().copied().unwrap_or(0);
        for (enc, inc) in self.state.iter_mut() {
            inc.reorder(new_order)?;
            if inc.beamable > 1 {
                continue;
            }
            // Between shrinks `new_order` only moves rows among the beams of one sentence, and
            // those rows of the encoder output are identical copies: fairseq's per-step
            // reorder_encoder_out then changes nothing, so it is skipped.
            if enc.encoder_out.size().get(1).copied() != Some(rows) {
                *enc = enc.reorder(new_order);
            }
        }
        Ok(())
    }

    fn forward_decoder(
        &mut self,
        tokens: &Tensor,
        temperature: f64,
        need_attn: bool,
    ) -> Result<(Tensor, Option<Tensor>), GenerateError> {
        let n = self.models.len();
        // the fast compute types' own log-softmax kernel; `exact` keeps libtorch's
        let on_host = self.models.iter().all(TransformerModel::fast_tier_on_cpu);
        let mut log_probs = Vec::with_capacity(n);
        let mut avg_attn: Option<Tensor> = None;
        for (model, (enc, inc)) in self.models.iter().zip(self.state.iter_mut()) {
            let out = model.decoder.forward(tokens, Some(enc), Some(inc), need_attn, false)?;
            let attn = match out.attn.as_ref() {
                Some(a) => {
                    let t = a.size()[1];
                    Some(a.f_select(1, t - 1)?)
                }
                None => None,
            };
            let t = out.logits.size()[1];
            let mut last = out.logits.f_narrow(1, t - 1, 1)?;
            // fairseq divides by the temperature unconditionally; x / 1.0 is x, so skip that pass
            if temperature != 1.0 {
                let _ = last.f_div_(&crate::model::python_float(temperature)?)?;
            }
            let probs = log_probs_in_place(last, on_host)?.f_select(1, -1)?;
            if n == 1 {
                return Ok((probs, attn));
            }
            log_probs.push(probs);
            if let Some(a) = attn {
                avg_attn = Some(match avg_attn.take() {
                    None => a,
                    Some(mut acc) => {
                        let _ = acc.f_add_(&a)?;
                        acc
                    }
                });
            }
        }
        let avg = Tensor::f_stack(&log_probs, 0)?.f_logsumexp([0], false)?.f_sub_scalar((n as f64).ln())?;
        if let Some(a) = avg_attn.as_mut() {
            let _ = a.f_div_scalar_(n as f64)?;
        }
        Ok((avg, avg_attn))
    }
}

/// `get_normalized_probs(logits, log_probs=True)`, written over `logits` when it is a contiguous
/// f32 tensor that nothing else reads (the decoder's fresh output): the same kernel and the same
/// bits, without a second `[rows, vocab]` tensor each step. `on_host` (the fast compute types on
/// the CPU): the host's kernel, another summation order.
fn log_probs_in_place(mut logits: Tensor, on_host: bool) -> Result<Tensor, GenerateError> {
    if logits.kind() != Kind::Float || !logits.is_contiguous() {
        return Ok(get_normalized_probs(&logits, true));
    }
    if on_host && crate::model::log_softmax_in_place(&mut logits) {
        return Ok(logits);
    }
    Ok(logits.f_log_softmax_int_out(&logits, -1, Kind::Float)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn log_probs_in_place_have_the_bits_of_the_out_of_place_op() {
        let spread = |n: i64| (Tensor::arange(n, (Kind::Float, Device::Cpu)) * 0.7548776662).frac() * 40.0 - 20.0;
        for shape in [[160i64, 1, 32000], [5, 1, 7944], [1, 1, 7944], [37, 1, 33]] {
            let logits = spread(shape.iter().product()).view(shape);
            let want = get_normalized_probs(&logits, true);
            let got = log_probs_in_place(logits.copy(), false).unwrap();
            assert!(got.equal(&want), "{shape:?}");
        }
        let half = spread(64).view([4, 1, 16]).to_kind(Kind::Half);
        let got = log_probs_in_place(half.shallow_clone(), true).unwrap();
        assert_eq!(got.kind(), Kind::Float);
        assert!(got.equal(&get_normalized_probs(&half, true)));
    }
}
