//! fairseq's `EnsembleModel` over one `TransformerLanguageModel`: no encoder, only the
//! decoder's incremental state (what `SequenceGenerator` runs for `--task language_modeling`).

use tch::Tensor;

use super::{GenerateError, StepModel};
use crate::model::{get_normalized_probs, IncrementalState, TransformerLanguageModel};

pub struct LanguageModelStep<'m> {
    model: &'m TransformerLanguageModel,
    state: IncrementalState,
}

impl<'m> LanguageModelStep<'m> {
    pub fn new(model: &'m TransformerLanguageModel) -> Self {
        LanguageModelStep { model, state: IncrementalState::new() }
    }
}

impl StepModel for LanguageModelStep<'_> {
    fn max_decoder_positions(&self) -> usize {
        self.model.max_positions()
    }

    fn begin(&mut self, _src_tokens: &Tensor, _new_order: &Tensor) -> Result<(), GenerateError> {
        self.state = IncrementalState::new();
        Ok(())
    }

    fn reorder(&mut self, new_order: &Tensor) -> Result<(), GenerateError> {
        Ok(self.state.reorder(new_order)?)
    }

    fn forward_decoder(&mut self, tokens: &Tensor, temperature: f64, _need_attn: bool) -> Result<(Tensor, Option<Tensor>), GenerateError> {
        let out = self.model.forward(tokens, Some(&mut self.state))?;
        let t = out.logits.size()[1];
        let mut last = out.logits.f_narrow(1, t - 1, 1)?;
        if temperature != 1.0 {
            let _ = last.f_div_(&crate::model::python_float(temperature)?)?;
        }
        Ok((get_normalized_probs(&last, true).f_select(1, -1)?, None))
    }
}
