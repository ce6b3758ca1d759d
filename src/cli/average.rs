//! `tchseq average`: fairseq's `scripts/average_checkpoints.py`, with its flags, file selection
//! and arithmetic; the output is a torch zip checkpoint that fairseq loads.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use tchseq::checkpoint::average::{average_checkpoints, last_n_checkpoints, Numbered};

use super::partial::{OutputPath, PartialFile};
use super::Outcome;

/// Arguments of `tchseq average`; names follow fairseq's `average_checkpoints.py`.
#[derive(Debug, Clone, Args)]
pub struct AverageArgs {
    /// Input checkpoint files; with --num-epoch-checkpoints or --num-update-checkpoints, the one
    /// directory that holds them.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    pub inputs: Vec<PathBuf>,
    /// Write the new checkpoint containing the averaged weights to this file.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Average the last N `checkpoint<epoch>.pt` files of the --inputs directory.
    #[arg(long, value_name = "N", conflicts_with = "num_update_checkpoints", value_parser = clap::value_parser!(u64).range(1..))]
    pub num_epoch_checkpoints: Option<u64>,
    /// Average the last N `checkpoint_<epoch>_<update>.pt` files of the --inputs directory.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub num_update_checkpoints: Option<u64>,
    /// With --num-epoch-checkpoints or --num-update-checkpoints: only checkpoints of this epoch
    /// (or update) and earlier; e.g. --num-epoch-checkpoints 10 --checkpoint-upper-bound 50
    /// averages epochs 41-50.
    #[arg(long, value_name = "N")]
    pub checkpoint_upper_bound: Option<u64>,
}

pub fn run(a: &AverageArgs) -> Result<Outcome> {
    let Some(output) = &a.output else { bail!("--output FILE is required: where to write the averaged checkpoint") };
    if a.inputs.is_empty() {
        bail!("no checkpoints to average: give --inputs FILE..., or one directory with --num-epoch-checkpoints N or --num-update-checkpoints N");
    }
    let numbered = match (a.num_epoch_checkpoints, a.num_update_checkpoints) {
        (Some(n), None) => Some((n, Numbered::Epoch, "--num-epoch-checkpoints")),
        (None, Some(n)) => Some((n, Numbered::Update, "--num-update-checkpoints")),
        _ => None,
    };
    if numbered.is_none() && a.checkpoint_upper_bound.is_some() {
        bail!("--checkpoint-upper-bound requires --num-epoch-checkpoints or --num-update-checkpoints");
    }
    let inputs = match numbered {
        None => a.inputs.clone(),
        Some((n, numbered, flag)) => {
            let [dir] = a.inputs.as_slice() else { bail!("{flag} takes one directory in --inputs, not {} paths", a.inputs.len()) };
            if !dir.is_dir() {
                bail!("{}: not a directory ({flag} takes the directory that holds the checkpoints)", dir.display());
            }
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            last_n_checkpoints(dir, n, numbered, a.checkpoint_upper_bound)?
        }
    };
    if !matches!(OutputPath::resolve(output)?, OutputPath::Atomic(_)) {
        bail!("--output must name a file");
    }
    // made now, so that a missing directory is reported before the checkpoints are read
    let out = PartialFile::for_output(Some(output))?.context("--output must name a file")?;
    let averaged = average_checkpoints(&inputs)?;
    let out = averaged.save(out).with_context(|| format!("writing {}", output.display()))?;
    out.commit()?;
    eprintln!("averaged {} checkpoints ({} parameters) into {}", inputs.len(), averaged.params.len(), output.display());
    Ok(Outcome::Ok)
}
