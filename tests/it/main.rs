//! The one integration-test binary (every test binary links libtorch, so there is only one).
//! One module per area.

mod against;
mod bad_input;
mod browser;
mod bundled;
mod cli;
mod compute_type;
mod constraints;
mod decoding;
mod examples;
mod faults;
mod fixed_cache;
mod fuzz_corpus;
mod hf;
mod hub;
mod install;
mod language_model;
mod loader;
mod look_inside;
mod malformed;
mod model;
mod multilingual;
mod option_sets;
mod reproducible;
mod robustness;
mod score;
mod serve;
mod serve_models;
mod shard;
mod text;
mod translate;
mod util;
mod verify;
