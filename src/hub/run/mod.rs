//! The runtime: a loaded model's translation, scoring and continuation, as every door runs them.

mod guide;
mod language_model;
mod options;
mod pairs;
mod scorer;
mod scoring;
mod translate_batches;
mod translator;

pub use guide::{GuideError, TargetGuide};
pub use language_model::{LanguageModel, LmScored, TooLongText};
pub use options::{OptionError, OptionName, TranslateOptions};
pub use scorer::{PairError, Scorer};
pub use scoring::{Encoded, Scored};
pub use translator::{AttentionMatrix, Batching, HypothesisText, TextMode, TranslateRequest, Translation, Translator};
