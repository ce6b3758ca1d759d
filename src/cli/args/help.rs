//! Help text that clap's derive cannot shape: global flags shown only where they mean something,
//! and the help of a flag that two commands share but mean differently.

use clap::{Arg, Command};

/// Commands that never run a model: libtorch's threads, the device and pinned kernels mean
/// nothing to them.
const NO_MODEL_RUN: [&str; 3] = ["merge", "encode", "decode"];

/// `attention`'s `--beam` (SearchArgs' help is `translate`'s, which speaks of `--sampling`).
const ATTENTION_BEAM: &str = "Beam size of the search that translates the sentence (not used with --target).";

/// Hides the global flags (`--threads`, `--inter-threads`, `--device`, `--reproducible`) from
/// the help of `merge`, `encode` and `decode`, which accept them and ignore them, and gives
/// `attention --beam` help of its own. Parsing is unchanged: a hidden global flag is still taken
/// there, and its value still reaches the top level as every global flag's does.
///
/// clap copies a global flag into each subcommand only when the command is built, and skips a
/// subcommand that has a flag of that id already: so each subcommand here gets its own hidden
/// copy first (or, built already, its propagated copy is hidden).
pub fn hide_global_flags_where_meaningless(cmd: Command) -> Command {
    let globals: Vec<Arg> = cmd.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    let mut cmd = cmd;
    for name in NO_MODEL_RUN {
        cmd = cmd.mut_subcommand(name, |mut sub| {
            for global in &globals {
                let id = global.get_id().clone();
                let propagated = sub.get_arguments().any(|a| *a.get_id() == id);
                sub = match propagated {
                    true => sub.mut_arg(id, |a| a.hide(true)),
                    false => sub.arg(global.clone().hide(true)),
                };
            }
            sub
        });
    }
    cmd.mut_subcommand("attention", |sub| sub.mut_arg("beam", |a| a.help(ATTENTION_BEAM)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::Cli;
    use clap::{CommandFactory, FromArgMatches};

    const GLOBAL_FLAGS: [&str; 4] = ["--threads", "--inter-threads", "--device", "--reproducible"];

    /// The help `tchseq <words> --help` prints, through the function above.
    fn help(words: &[&str]) -> String {
        let argv = std::iter::once("tchseq").chain(words.iter().copied()).chain(["--help"]);
        let err = hide_global_flags_where_meaningless(Cli::command()).try_get_matches_from(argv).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp, "{err}");
        err.to_string()
    }

    #[test]
    fn global_flags_are_hidden_where_no_model_runs_and_shown_elsewhere() {
        for name in NO_MODEL_RUN {
            let text = help(&[name]);
            for flag in GLOBAL_FLAGS {
                assert!(!text.contains(flag), "{name} --help shows {flag}:\n{text}");
            }
        }
        for name in ["translate", "score", "serve", "verify", "inspect", "attention", "doctor"] {
            let text = help(&[name]);
            for flag in GLOBAL_FLAGS {
                assert!(text.contains(flag), "{name} --help lacks {flag}:\n{text}");
            }
        }
        let top = help(&[]);
        assert!(GLOBAL_FLAGS.iter().all(|f| top.contains(f)), "{top}");
    }

    /// A hidden global flag is still taken, and its value still reaches `cli.global`.
    #[test]
    fn hidden_global_flags_still_parse() {
        let cmd = hide_global_flags_where_meaningless(Cli::command());
        let matches = cmd.try_get_matches_from(["tchseq", "merge", "--threads", "3", "--device", "auto", "--reproducible", "a.jsonl"]).unwrap();
        let cli = Cli::from_arg_matches(&matches).unwrap();
        assert_eq!(cli.global.threads, Some(3));
        assert_eq!(cli.global.device, crate::cli::args::DeviceArg::Auto);
        assert!(cli.global.reproducible);
        assert_eq!(cli.global.inter_threads, 1);
        let matches = hide_global_flags_where_meaningless(Cli::command()).try_get_matches_from(["tchseq", "--threads", "2", "decode"]).unwrap();
        assert_eq!(Cli::from_arg_matches(&matches).unwrap().global.threads, Some(2));
    }

    /// Built first (as a caller may), the function still hides the propagated copies.
    #[test]
    fn a_built_command_is_shaped_too() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut cmd = hide_global_flags_where_meaningless(cmd);
        let text = cmd.find_subcommand_mut("encode").unwrap().render_help().to_string();
        assert!(GLOBAL_FLAGS.iter().all(|f| !text.contains(f)), "{text}");
    }

    #[test]
    fn attention_beam_help_does_not_mention_sampling() {
        let text = help(&["attention"]);
        let beam = text.lines().skip_while(|l| !l.contains("--beam")).take(3).collect::<Vec<_>>().join("\n");
        assert!(beam.contains("Beam size of the search that translates the sentence"), "{text}");
        assert!(!text.contains("--sampling"), "{text}");
        // translate's keeps its own
        assert!(help(&["translate"]).contains("with --sampling: the number of samples"));
    }
}
