//! Search: beam search, sampling, and the sequence scorer.
pub mod scorer;
