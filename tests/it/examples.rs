//! Every `$ …` example with its output in the README and docs/ runs here, and its output must be
//! what the page shows (stdout and stderr together, as a terminal shows them).
//!
//! A page's ```text block is a transcript: a line `$ COMMAND` (continued by a trailing `\`), then
//! the lines it prints. The block's commands run in turn with bash in a scratch directory
//! holding links to the checkout's `weights/` and `tests/`, with this build's `tchseq` first on
//! the PATH. In an expected line `[..]` stands for any text (timings, paths), a line `...` for
//! any number of lines, and numbers need only be equal within 1e-4 (another CPU computes a
//! score's last digits otherwise); runs of whitespace count as one. `$ cat FILE` of a file that is not there
//! writes it from the lines shown (a transcript's input file is part of it). A block that cannot
//! run here (a GPU, fairseq, `make`) follows a line `<!-- example: not run (why) -->`.

use std::path::Path;

use crate::util::repo;

struct Command {
    page: String,
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The transcripts of a page: one list of commands per block.
fn transcripts(page: &str, text: &str) -> Vec<Vec<Command>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start() != "```text" {
            i += 1;
            continue;
        }
        let skipped = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("<!-- example: not run"));
        let mut commands: Vec<Command> = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim_start() != "```" {
            if let Some(first) = lines[i].strip_prefix("$ ") {
                let (start, mut command) = (i, first.to_string());
                while command.ends_with('\\') && i + 1 < lines.len() {
                    i += 1;
                    command.push('\n');
                    command.push_str(lines[i]);
                }
                commands.push(Command { page: page.to_string(), line: start + 1, command, expected: Vec::new() });
            } else if let Some(c) = commands.last_mut() {
                c.expected.push(lines[i].to_string());
            }
            i += 1;
        }
        if !skipped && !commands.is_empty() {
            blocks.push(commands);
        }
        i += 1;
    }
    blocks
}

/// Whether `actual` is what `expected` shows, `[..]` and `...` as above.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    let Some((first, rest)) = expected.split_first() else { return actual.is_empty() };
    if first == "..." {
        return (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]));
    }
    let Some((line, actual_rest)) = actual.split_first() else { return false };
    line_matches(first, line) && matches(rest, actual_rest)
}

/// One line against its expected form, token by token: `[..]` takes any tokens, runs of
/// whitespace count as one (columns align to their widths), and numbers need only be equal
/// within 1e-4 (relative beyond 1): a score's last digits are another CPU's to compute otherwise.
fn line_matches(expected: &str, actual: &str) -> bool {
    let mut want: Vec<Option<&str>> = Vec::new();
    for (k, part) in expected.trim().split("[..]").enumerate() {
        if k > 0 {
            want.push(None);
        }
        want.extend(tokens(part).into_iter().map(Some));
    }
    tokens_match(&want, &tokens(actual.trim()))
}

fn tokens(s: &str) -> Vec<&str> {
    let separator = |c: char| c.is_whitespace() || ",:;[](){}\"=".contains(c);
    let mut out: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if !separator(c) {
            continue;
        }
        if start < i {
            out.push(&s[start..i]);
        }
        if !c.is_whitespace() {
            out.push(&s[i..i + c.len_utf8()]);
        } else if out.last() != Some(&" ") {
            out.push(" ");
        }
        start = i + c.len_utf8();
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

fn tokens_match(want: &[Option<&str>], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((None, rest)) => (0..=got.len()).any(|skip| tokens_match(rest, &got[skip..])),
        Some((Some(w), rest)) => got.first().is_some_and(|g| same_token(w, g)) && tokens_match(rest, &got[1..]),
    }
}

fn same_token(want: &str, got: &str) -> bool {
    want == got
        || match (want.parse::<f64>(), got.parse::<f64>()) {
            (Ok(w), Ok(g)) => crate::util::tolerance::TRANSCRIPT_NUMBER.holds((w - g).abs() / w.abs().max(1.0)),
            _ => false,
        }
}

fn run_block(block: &[Command], bin: &Path) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    for shared in ["weights", "tests"] {
        std::os::unix::fs::symlink(repo(shared), dir.path().join(shared)).unwrap();
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut failures = Vec::new();
    for c in block {
        let mut expected = c.expected.clone();
        while expected.last().is_some_and(|l| l.trim().is_empty()) {
            expected.pop();
        }
        if let Some(file) = c.command.strip_prefix("cat ").filter(|f| !f.contains(' ') && !dir.path().join(f).exists()) {
            std::fs::write(dir.path().join(file), expected.join("\n") + "\n").unwrap();
            continue;
        }
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("set -o pipefail; {{ {}\n}} 2>&1", c.command))
            .current_dir(dir.path())
            .env("PATH", &path)
            .env_remove("LIBTORCH")
            .env_remove("VIRTUAL_ENV")
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let actual: Vec<&str> = text.lines().collect();
        if !matches(&expected, &actual) {
            failures.push(format!("{}:{}: $ {}\n--- shown\n{}\n--- printed\n{}", c.page, c.line, c.command, expected.join("\n"), text.trim_end()));
        }
    }
    failures
}

#[test]
fn every_example_in_the_readme_and_docs_prints_what_it_shows() {
    use std::os::unix::fs::PermissionsExt;
    // this build's tchseq as `tchseq`
    let bin = tempfile::tempdir().unwrap();
    let wrapper = bin.path().join("tchseq");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{}' \"$@\"\n", env!("CARGO_BIN_EXE_tchseq"))).unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut pages = vec![repo("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(repo("docs")).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "md")).collect();
    docs.sort();
    pages.extend(docs);
    let (mut ran, mut failures) = (0, Vec::new());
    for page in &pages {
        let name = page.strip_prefix(repo("")).unwrap().display().to_string();
        for block in transcripts(&name, &std::fs::read_to_string(page).unwrap()) {
            ran += block.len();
            failures.extend(run_block(&block, bin.path()));
        }
    }
    eprintln!("{ran} example commands run");
    assert!(ran >= 20, "only {ran} examples found");
    assert!(failures.is_empty(), "{} of {ran} examples differ:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn the_transcript_matcher_takes_wildcards_and_elided_lines() {
    let s = |v: &[&str]| v.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(matches(&s(&["a [..] c"]), &["a b c"]));
    assert!(!matches(&s(&["a [..] c"]), &["a b d"]));
    assert!(matches(&s(&["x", "...", "z"]), &["x", "y1", "y2", "z"]));
    assert!(matches(&s(&["x", "...", "z"]), &["x", "z"]));
    assert!(!matches(&s(&["x", "z"]), &["x", "y", "z"]));
    assert!(!matches(&s(&["W-0\t[..]\tseconds"]), &["W-0\t0.1\tminutes"]));
    assert!(matches(&s(&["H-0\t-0.31810179352760315\tEin Mann"]), &["H-0\t-0.31810152530670166\tEin Mann"]));
    assert!(matches(&s(&["attn   [7, 18]    4.768e-7  ok"]), &["attn   [7, 18]     0.000e0  ok"]));
    assert!(matches(&s(&[r#"{"logprob":-32.68095,"t":[["A",-0.4],[..],["</s>",-0.001]]}"#]), &[r#"{"logprob":-32.680946,"t":[["A",-0.4],["b",1],["</s>",-0.001]]}"#]));
    assert!(!matches(&s(&[r#"{"logprob":-32.68095,[..]}"#]), &[r#"{"logprob":-31.68095,"x":1}"#]));
    assert!(!matches(&s(&["H-0\t-0.3181\tEin Mann"]), &["H-0\t-0.3191\tEin Mann"]));
    assert!(!matches(&s(&["P-0\t-0.1 -0.2"]), &["P-0\t-0.1,-0.2"]));
    let blocks = transcripts("p", "<!-- example: not run (gpu) -->\n```text\n$ a\nb\n```\n\n```text\n$ c \\\n  d\ne\n```\n");
    assert_eq!(blocks.len(), 1);
    assert_eq!((blocks[0][0].command.as_str(), blocks[0][0].expected.clone()), ("c \\\n  d", s(&["e"])));
}

/// GitHub's anchor of a heading: lowercased, punctuation but `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every relative link of the README and docs/ reaches its file, and its `#anchor` a heading there.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut pages = vec![repo("README.md")];
    pages.extend(std::fs::read_dir(repo("docs")).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "md")));
    let headings = |path: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut fenced = false;
        let mut out = Vec::new();
        for l in text.lines() {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
            } else if !fenced && l.starts_with('#') {
                out.push(anchor(l.trim_start_matches('#')));
            }
        }
        out
    };
    let (mut checked, mut broken) = (0, Vec::new());
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, frag) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            checked += 1;
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
            } else if !frag.is_empty() && path.extension().is_some_and(|e| e == "md") && !headings(&path).contains(&frag.to_string()) {
                broken.push(format!("{}: {target}: no such heading", page.display()));
            }
        }
    }
    assert!(checked >= 10, "only {checked} links found");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
