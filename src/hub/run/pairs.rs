//! The other language pairs of a multilingual model, on the weights loaded once: a sentence
//! takes its pair's language tokens ([`Translator::pair_tokens`]) when it is encoded, forced
//! first in the decoder ([`TargetGuide::language`](super::TargetGuide)) and stripped from the
//! hypothesis text. Sentences of different pairs share batches, as the task's language tokens
//! are per sentence; the generator's EOS is the one thing a batch shares, so a pair whose task
//! ends with another EOS (mBART fine-tuning's `[tgt]`) is refused.

use super::translator::HypothesisText;
use super::translator::Translator;
use crate::hub::{HubError, LanguageTokens};
use crate::generate::Hypothesis;
use crate::text::pipeline::PipelineError;

impl Translator {
    /// The language pairs this model translates: every ordered pair of its languages for a
    /// multilingual model, else the loaded pair.
    pub fn language_pairs(&self) -> Vec<(String, String)> {
        let langs = &self.languages.langs;
        if !self.languages.is_multilingual() || langs.is_empty() {
            return vec![(self.report.source_lang.clone(), self.report.target_lang.clone())];
        }
        langs.iter().flat_map(|s| langs.iter().filter(move |t| *t != s).map(move |t| (s.clone(), t.clone()))).collect()
    }

    /// The language tokens of `source_lang` → `target_lang`: the loaded pair's, or another pair
    /// of a multilingual model that can share its batches.
    pub fn pair_tokens(&self, source_lang: &str, target_lang: &str) -> Result<LanguageTokens, HubError> {
        if source_lang == self.report.source_lang && target_lang == self.report.target_lang {
            return Ok(self.language_tokens.clone());
        }
        if !self.languages.is_multilingual() {
            return Err(HubError::NotMultilingual { pair: self.language_pair() });
        }
        let tokens = self.languages.tokens(source_lang, target_lang, &self.src_dict, &self.tgt_dict)?;
        if tokens.eos != self.language_tokens.eos {
            return Err(HubError::PairNeedsOwnLoad { pair: format!("{source_lang}-{target_lang}") });
        }
        Ok(tokens)
    }

    /// [`Translator::encode`] with another pair's language tokens.
    pub fn encode_in(&self, line: &str, tokens: &LanguageTokens) -> Vec<i64> {
        tokens.source(self.src_dict.encode_line(&self.pipeline.encode(line), true))
    }

    /// [`Translator::hypothesis_text`] of a sentence translated in another pair.
    pub fn hypothesis_text_in(&self, h: &Hypothesis, tokens: &LanguageTokens) -> Result<HypothesisText, PipelineError> {
        HypothesisText::new(&self.tgt_dict, &self.pipeline, h, &tokens.output_strip(self.tgt_dict.eos()))
    }
}
