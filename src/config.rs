//! The typed model configuration resolved from a checkpoint's `args` or `cfg`.
