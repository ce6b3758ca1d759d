//! The command-line front end: clap definitions in [`args`], one module per command.
//!
//! Exit codes: 0 ok, 1 a check failed (e.g. `verify` found a mismatch), 2 usage, input or
//! environment error. Errors are one line on stderr starting with `error:`. A closed stdout pipe
//! ends quietly with success.

pub mod args;
mod attention;
mod average;
mod common;
mod decode;
mod doctor;
mod encode;
mod generate;
mod lines;
mod memory;
mod merge;
mod output;
mod partial;
mod translate;
mod translate_input;
mod translate_lm;
mod translate_output;
mod translate_resume;
mod inspect;
mod interrupt;
mod positions;
mod progress;
mod sacrebleu;
mod score;
mod serve;
mod shard;
mod settings;
mod side_text;
mod verify;

use args::{Cli, Command};
use tchseq::generate::workers::panic_message;

/// What a command reports when it finished without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything went fine (exit 0).
    Ok,
    /// The command ran, but a check it performs failed (exit 1).
    CheckFailed,
}

/// Runs the command line; the process's exit status.
pub fn main() -> u8 {
    tchseq::libtorch::end_startup_huge_pages();
    tchseq::libtorch::library_pages::release();
    ignore_file_size_signal();
    report_panics_in_one_line();
    let cli = match args::parse_from(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            e.print();
            return e.exit_code();
        }
    };
    // a panic that no batch caught still ends as an error: files being written are removed as
    // their owners unwind
    let outcome = std::panic::catch_unwind(move || run(cli)).unwrap_or_else(|payload| {
        Err(anyhow::anyhow!("internal error (please report it): {}", panic_message(payload.as_ref())))
    });
    match outcome {
        Ok(Outcome::Ok) => 0,
        Ok(Outcome::CheckFailed) => 1,
        Err(err) => {
            if common::is_broken_pipe(&err) {
                return 0;
            }
            eprintln!("error: {}", common::one_line(&err));
            2
        }
    }
}

/// A panic prints one line (where, and its message), not Rust's two lines and a backtrace
/// hint: a caught one costs only its batch, and the run goes on.
fn report_panics_in_one_line() {
    std::panic::set_hook(Box::new(|info| {
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("a worker");
        eprintln!("tchseq: internal error in {name}{at}: {}", panic_message(info.payload()));
    }));
}

/// A file-size limit (`ulimit -f`) is then a write error we report (and `.partial` files are
/// removed), instead of SIGXFSZ killing the process with half a file on disk.
fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: sets a signal's disposition to "ignore", before any thread starts
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn run(cli: Cli) -> anyhow::Result<Outcome> {
    // before libtorch computes anything
    if cli.global.reproducible || tchseq::libtorch::reproducible_requested() {
        tchseq::libtorch::pin_reproducible_kernels();
    }
    tchseq::libtorch::keep_freed_memory();
    common::load_cuda_for(cli.global.device)?;
    common::apply_threads(cli.global.threads, cli.global.inter_threads)?;
    if !matches!(cli.command, Command::Doctor(_)) {
        tchseq::libtorch::mute_nested_tensor_warning();
    }
    let profile = tchseq::libtorch::OpProfile::from_env();
    let outcome = match cli.command {
        Command::Attention(a) => attention::run(&cli.global, &a),
        Command::Positions(a) => positions::run(&cli.global, &a),
        Command::Doctor(a) => doctor::run(&cli.global, &a),
        Command::Translate(a) if tchseq::hub::language_model_checkpoint(&common::model_spec(&a.model)).is_some() => {
            translate_lm::run(&cli.global, &a)
        }
        Command::Translate(a) => translate::run(&cli.global, &a),
        Command::Generate(a) => generate::run(&cli.global, &a),
        Command::Score(a) => score::run(&cli.global, &a),
        Command::Serve(a) => serve::run(&cli.global, &a),
        Command::Merge(a) => merge::run(&a),
        Command::Average(a) => average::run(&a),
        Command::Verify(a) => match &a.against {
            Some(against) => verify::against::run(&cli.global, &a, against),
            None => verify::run(&cli.global, &a),
        },
        Command::Inspect(a) => inspect::run(&cli.global, &a),
        Command::Sacrebleu(a) => sacrebleu::run(&a).map(|()| Outcome::Ok),
        Command::Encode(a) => encode::run(&cli.global, &a),
        Command::Decode(a) => decode::run(&cli.global, &a),
    };
    if let Some(profile) = profile {
        anyhow::Context::with_context(profile.write(), || format!("cannot write {}", tchseq::libtorch::OpProfile::ENV))?;
    }
    if let Some(report) = tchseq::libtorch::MemoryReport::from_env() {
        anyhow::Context::with_context(report.write(), || format!("cannot write {}", tchseq::libtorch::MemoryReport::ENV))?;
    }
    outcome
}
