//! fairseq-interactive's and fairseq-generate's flags, as `tchseq translate` takes them: each is
//! ours under the same name, becomes one of ours, is accepted as the no-op it is here, or is
//! refused with a line naming what to use instead. [`FLAGS`] is the table docs/commands.md
//! prints; a test holds it to every option fairseq 0.12.2's parsers define.

use std::ffi::OsString;

/// What a fairseq flag takes after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// Nothing (`store_true`).
    Flag,
    /// One value.
    Value,
    /// An optional value (`nargs='?'`), taken only when it is one fairseq knows.
    Optional(&'static [&'static str]),
}

/// What `tchseq translate` does with a fairseq flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// Ours under the same name, with fairseq's meaning.
    Same,
    /// Ours under another name: the words it becomes (a value given to it follows them).
    Becomes(&'static [&'static str]),
    /// No meaning for tchseq (training, logging, distributed runs): accepted and dropped. The
    /// text says why.
    Ignored(&'static str),
    /// Refused: the text names what to use instead.
    Refused(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct FairseqFlag {
    pub name: &'static str,
    pub arity: Arity,
    pub treatment: Treatment,
}

const fn f(name: &'static str, arity: Arity, treatment: Treatment) -> FairseqFlag {
    FairseqFlag { name, arity, treatment }
}

/// `fairseq.data.data_utils.post_process`'s symbols (`--post-process` / `--remove-bpe`).
pub const POST_PROCESS: &[&str] = &["sentencepiece", "wordpiece", "letter", "silence", "_EOW", "subword_nmt", "@@ ", "@@", "none"];

include!("fairseq_table.rs");

/// Looks a flag up by its name (`--fp16`).
pub fn lookup(name: &str) -> Option<&'static FairseqFlag> {
    FLAGS.iter().find(|f| f.name == name)
}

/// What `tchseq generate` does where it differs from `translate` (fairseq-generate's own
/// options, and those that mean something else without a text input).
pub const GENERATE_FLAGS: &[FairseqFlag] = &[
    f("--buffer-size", Arity::Value, Treatment::Ignored("fairseq-interactive's: fairseq-generate reads its split batch by batch")),
    f("--constraints", Arity::Optional(&["ordered", "unordered"]), Treatment::Refused("a binarized split holds no constraints: give text lines to `tchseq translate --constraints`")),
    f("--dataset-impl", Arity::Value, Treatment::Same),
    f("--distributed-rank", Arity::Value, Treatment::Becomes(&["--shard-id"])),
    f("--distributed-world-size", Arity::Value, Treatment::Becomes(&["--num-shards"])),
    f("--gen-subset", Arity::Value, Treatment::Same),
    f("--input", Arity::Value, Treatment::Refused("fairseq-generate reads the data-bin DATA; `tchseq translate --input FILE` reads text")),
    f("--left-pad-source", Arity::Flag, Treatment::Refused("fairseq-generate reads it as its default's opposite (sources padded on the right), which tchseq does not do: drop it for fairseq's default, left padding")),
    f("--left-pad-target", Arity::Flag, Treatment::Refused("fairseq-generate reads it as its default's opposite (references padded on the left, which --prefix-size then takes as tokens): drop it")),
    f("--max-source-positions", Arity::Value, Treatment::Same),
    f("--max-target-positions", Arity::Value, Treatment::Same),
    f("--no-progress-bar", Arity::Flag, Treatment::Ignored("the progress bar shows only on a terminal; fairseq-generate's --quiet is tchseq's too")),
    f("--replace-unk", Arity::Optional(&[]), Treatment::Same),
    f("--required-batch-size-multiple", Arity::Value, Treatment::Same),
    f("--results-path", Arity::Value, Treatment::Same),
    f("--sacrebleu", Arity::Flag, Treatment::Ignored("fairseq-generate 0.12.2 only silences a warning with it: the scorer is --scoring's")),
    f("--score-reference", Arity::Flag, Treatment::Same),
    f("--scoring", Arity::Value, Treatment::Same),
    f("--skip-invalid-size-inputs-valid-test", Arity::Flag, Treatment::Same),
    f("--truncate-source", Arity::Flag, Treatment::Refused("tchseq generate does not cut sources: leave long pairs out with --skip-invalid-size-inputs-valid-test")),
];

/// [`lookup`] for `command`: `generate`'s own treatment first.
pub fn lookup_for(command: &str, name: &str) -> Option<&'static FairseqFlag> {
    let own = if command == "generate" { GENERATE_FLAGS.iter().find(|f| f.name == name) } else { None };
    own.or_else(|| lookup(name))
}

/// The command line after fairseq's flags were rewritten, and how many arguments came after a
/// literal `--` (text given explicitly, never a flag).
#[derive(Debug)]
pub struct Rewritten {
    pub argv: Vec<OsString>,
    pub explicit_positionals: usize,
}

/// The commands that take fairseq's generation flags.
const TAKES_FAIRSEQ_FLAGS: &[&str] = &["translate", "generate"];

/// Global flags that take a value (they may come before the command's name).
const GLOBAL_WITH_VALUE: &[&str] = &["--threads", "--inter-threads", "--device"];

/// Rewrites fairseq's flags after a command that takes them (see [`Treatment`]); other
/// commands' arguments pass unchanged. An error is one line.
pub fn rewrite(argv: Vec<OsString>) -> Result<Rewritten, String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut args = argv.into_iter();
    out.extend(args.next());
    // up to the command's name
    let mut command = None;
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy().into_owned();
        out.push(arg);
        if GLOBAL_WITH_VALUE.contains(&text.as_str()) {
            out.extend(args.next());
        } else if !text.starts_with('-') {
            command = Some(text);
            break;
        } else if text == "--" {
            break;
        }
    }
    let rest: Vec<OsString> = args.collect();
    let Some(command) = command.filter(|c| TAKES_FAIRSEQ_FLAGS.contains(&c.as_str())) else {
        let explicit = rest.iter().position(|a| a == "--").map_or(0, |i| rest.len() - i - 1);
        out.extend(rest);
        return Ok(Rewritten { argv: out, explicit_positionals: explicit });
    };
    let mut rest = rest.into_iter().peekable();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str().filter(|t| t.starts_with("--")) else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            out.push(arg);
            let explicit = rest.len();
            out.extend(rest);
            return Ok(Rewritten { argv: out, explicit_positionals: explicit });
        }
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (text, None),
        };
        let Some(flag) = lookup_for(&command, name) else {
            out.push(arg);
            continue;
        };
        match flag.treatment {
            Treatment::Same => out.push(arg),
            Treatment::Refused(instead) => return Err(format!("fairseq's {name} is not supported: {instead}")),
            Treatment::Ignored(_) | Treatment::Becomes(_) => {
                let value = match (flag.arity, inline) {
                    (Arity::Flag, Some(_)) => return Err(format!("{name} takes no value")),
                    (Arity::Flag, None) => None,
                    (Arity::Value, Some(v)) => Some(v),
                    (Arity::Value, None) => match rest.next() {
                        Some(v) => Some(v.to_string_lossy().into_owned()),
                        None => return Err(format!("{name} needs a value")),
                    },
                    (Arity::Optional(known), Some(v)) if known.contains(&v.as_str()) => Some(v),
                    (Arity::Optional(known), Some(v)) => {
                        return Err(format!("{name}: unknown value '{v}' (fairseq takes one of: {})", known.join(", ")))
                    }
                    (Arity::Optional(known), None) => {
                        let next = rest.peek().and_then(|v| v.to_str()).filter(|v| known.contains(v)).map(str::to_string);
                        if next.is_some() {
                            rest.next();
                        }
                        next
                    }
                };
                if let Treatment::Becomes(words) = flag.treatment {
                    match (words.split_last(), value) {
                        // an optional value joins the last word, so that it is never read as text
                        (Some((last, first)), Some(v)) if matches!(flag.arity, Arity::Optional(_)) => {
                            out.extend(first.iter().map(OsString::from));
                            out.push(format!("{last}={v}").into());
                        }
                        (_, v) => {
                            out.extend(words.iter().map(OsString::from));
                            out.extend(v.map(OsString::from));
                        }
                    }
                }
            }
        }
    }
    Ok(Rewritten { argv: out, explicit_positionals: 0 })
}

/// The table as docs/commands.md prints it (`generate`: the rows where it differs).
#[cfg(test)]
pub fn markdown_table(command: &str) -> String {
    let rows = if command == "generate" { GENERATE_FLAGS } else { FLAGS };
    let mut s = format!("| fairseq flag | what `tchseq {command}` does |\n|---|---|\n");
    for flag in rows {
        let what = match flag.treatment {
            Treatment::Same => "the same flag".to_string(),
            Treatment::Becomes(words) => format!("`{}`", words.join(" ")),
            Treatment::Ignored(why) => format!("accepted, no effect: {why}"),
            Treatment::Refused(instead) => format!("refused: {instead}"),
        };
        s.push_str(&format!("| `{}` | {what} |\n", flag.name));
    }
    s
}
