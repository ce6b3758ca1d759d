#![deny(missing_docs)]
//! The one place that assembles a model and runs it, in two rooms:
//! - the loader: the files, checkpoints, dictionaries, languages and text pipelines, and the
//!   compute type, resolved once for the device; every model kind loads through it
//!   ([`ModelBundle::load`], [`LanguageModelBundle::load`]), and so does every door (the CLI's
//!   commands, the server, the Python API);
//! - the runtime: what the doors compute with a loaded model: [`Translator`] (translation and
//!   scoring), [`LanguageModel`], and the options they share ([`TranslateOptions`]).
//!
//! The runtime uses the loader, never the other way round.

pub mod fault;
mod load;
mod run;

pub use load::*;
pub use run::*;
