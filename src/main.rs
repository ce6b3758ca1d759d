//! `tchseq`: thin entry point. Parsing lives in `cli::args`, each command in `cli/<command>.rs`.
mod cli;
mod serve;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
