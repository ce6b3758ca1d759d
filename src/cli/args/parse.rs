//! Raw arguments → [`Cli`], as a fairseq user types them: fairseq's own flags are rewritten or
//! refused by name ([`super::fairseq`]), a negative number is a value after any flag that takes
//! one, a flag given twice takes its last value, and a sentence argument that names a file or a
//! directory is refused (it was meant for `--input` or `-m`), unless it comes after `--`.

use std::ffi::OsString;
use std::path::Path;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches};

use super::fairseq::{self, Rewritten};
use super::{Cli, Command};

/// Why the command line was not taken.
#[derive(Debug)]
pub enum ParseError {
    /// clap's own answer: help, version, or an error it words well.
    Clap(clap::Error),
    /// One line, printed after `error: `.
    Usage(String),
}

impl ParseError {
    /// The process's exit status: 0 for help and version, 2 for a usage error.
    pub fn exit_code(&self) -> u8 {
        match self {
            ParseError::Clap(e) if !e.use_stderr() => 0,
            _ => 2,
        }
    }

    /// Prints it as clap would (help on stdout), or as one `error:` line on stderr.
    pub fn print(&self) {
        match self {
            ParseError::Clap(e) => {
                let _ = e.print();
            }
            ParseError::Usage(message) => eprintln!("error: {message}"),
        }
    }
}

/// The clap command with the settings every subcommand shares.
pub fn command() -> clap::Command {
    let mut command = Cli::command().args_override_self(true);
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        command = command.mut_subcommand(name, |s| numbers_may_be_negative(s.args_override_self(true)));
    }
    super::hide_global_flags_where_meaningless(command)
}

/// fairseq's argparse takes `--lenpen -0.5`: a value that reads as a negative number is a value.
fn numbers_may_be_negative(mut cmd: clap::Command) -> clap::Command {
    let ids: Vec<String> =
        cmd.get_arguments().filter(|a| a.get_action().takes_values()).map(|a| a.get_id().to_string()).collect();
    for id in ids {
        cmd = cmd.mut_arg(id, |a| a.allow_negative_numbers(true));
    }
    cmd
}

/// Parses a whole command line (`argv[0]` first).
pub fn parse_from<I, T>(argv: I) -> Result<Cli, ParseError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let Rewritten { argv, explicit_positionals } = fairseq::rewrite(sacrebleu_short_options(argv)).map_err(ParseError::Usage)?;
    let command = command();
    let name = command_name(&command, &argv);
    let matches = command.try_get_matches_from(&argv).map_err(|e| reword(e, &name))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| reword(e, &name))?;
    refuse_paths_as_sentences(&cli, explicit_positionals)?;
    Ok(cli)
}

/// sacrebleu's two-letter options (`-tok intl`, `-lc`) after `sacrebleu`, as the long ones clap
/// knows them by (`--tok`, `--lc`).
fn sacrebleu_short_options(argv: Vec<OsString>) -> Vec<OsString> {
    const TWO_LETTER: &[&str] =
        &["-tok", "-lc", "-sv", "-cw", "-cc", "-sh", "-ci", "-cin", "-pbs", "-pbsn", "-par", "-parn"];
    let Some(at) = argv.iter().position(|a| a == "sacrebleu") else { return argv };
    let mut explicit = false;
    argv.into_iter()
        .enumerate()
        .map(|(i, a)| {
            explicit |= a == "--";
            match a.to_str() {
                Some(t) if i > at && !explicit && TWO_LETTER.contains(&t) => format!("-{t}").into(),
                _ => a,
            }
        })
        .collect()
}

/// clap's unknown-argument error carries a tip to pass the flag after `--`, which would turn a
/// mistyped flag into text to translate: say instead where the flags are listed.
/// `tchseq translate`, or `tchseq` before a command is named.
fn command_name(command: &clap::Command, argv: &[OsString]) -> String {
    let names: Vec<&str> = command.get_subcommands().map(clap::Command::get_name).collect();
    match argv.iter().skip(1).filter_map(|a| a.to_str()).find(|a| names.contains(a)) {
        Some(sub) => format!("tchseq {sub}"),
        None => "tchseq".to_string(),
    }
}

fn reword(e: clap::Error, command: &str) -> ParseError {
    if e.kind() != ErrorKind::UnknownArgument {
        return ParseError::Clap(e);
    }
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let Some(arg) = text(ContextKind::InvalidArg) else { return ParseError::Clap(e) };
    let similar = text(ContextKind::SuggestedArg).map(|s| format!("; did you mean {s}?")).unwrap_or_default();
    ParseError::Usage(format!("unknown flag '{arg}'{similar} (`{command} --help` lists its flags)"))
}

/// `tchseq translate -m M small.en` would translate the words "small.en".
fn refuse_paths_as_sentences(cli: &Cli, explicit: usize) -> Result<(), ParseError> {
    let sentences: &[String] = match &cli.command {
        Command::Translate(a) => &a.sentences,
        Command::Attention(a) => std::slice::from_ref(&a.sentence),
        _ => return Ok(()),
    };
    let checked = &sentences[..sentences.len().saturating_sub(explicit)];
    let Some(path) = checked.iter().find(|s| !s.trim().is_empty() && Path::new(s.as_str()).exists()) else { return Ok(()) };
    let (what, pointer) = if Path::new(path).is_dir() {
        ("a directory", "a model directory goes after -m".to_string())
    } else if matches!(cli.command, Command::Translate(_)) {
        ("a file", "to translate its lines, give it with --input".to_string())
    } else {
        ("a file", "`attention` draws one sentence, given as text".to_string())
    };
    Err(ParseError::Usage(format!(
        "'{path}' names {what}, not a sentence: {pointer} (to translate these very words, put them after `--`)"
    )))
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
