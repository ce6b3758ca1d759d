//! `--constraints ordered|unordered`: fairseq's LexicallyConstrainedBeamSearch, with the
//! constraints after tabs on the input line (fairseq-interactive's `C-` lines) or in a JSONL
//! `constraints` list; against fairseq 0.12.2's output for the bundled model
//! (tests/fixtures/decoding/constraints_*.txt, made by reference/decoding_goldens.sh).
//! `make parity` runs three of these side by side with fairseq, bit for bit.

use std::collections::BTreeMap;
use std::fs;

use crate::util::fairseq_out::{bundled_model_args, compare_settled, parse_fairseq, Rule};
use crate::util::{fixture, repo, tchseq};

fn translate(args: &[&str]) -> std::process::Output {
    crate::util::translate_bundled(&fixture("decoding/constraints.en"), args)
}

/// The `C-` lines of fairseq-format output, per sentence id.
fn constraint_lines(text: &str) -> BTreeMap<usize, Vec<String>> {
    let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("C-")) {
        let (id, c) = line[2..].split_once('\t').unwrap();
        out.entry(id.parse().unwrap()).or_default().push(c.to_string());
    }
    out
}

/// Where `needle` occurs in `hay` at or after `from`, as token sequences.
fn find(hay: &[&str], needle: &[&str], from: usize) -> Option<usize> {
    (from..=hay.len().saturating_sub(needle.len())).find(|&i| hay.get(i..i + needle.len()) == Some(needle))
}

#[test]
fn constrained_search_matches_fairseq_interactive() {
    for (golden, args, hyps, ordered) in [
        ("constraints_ordered_nbest2.txt", vec!["--beam", "5", "--nbest", "2", "--constraints"], 80, true),
        ("constraints_unordered_nbest2.txt", vec!["--beam", "5", "--nbest", "2", "--constraints", "unordered"], 80, false),
        (
            "constraints_unordered_batch1.txt",
            vec!["--beam", "4", "--constraints", "unordered", "--batch-size", "1", "--buffer-size", "1"],
            40,
            false,
        ),
        (
            "constraints_ordered_lenpen0.6_nbest3.txt",
            vec!["--beam", "6", "--nbest", "3", "--lenpen", "0.6", "--constraints", "ordered"],
            120,
            true,
        ),
    ] {
        let out = translate(&args);
        assert!(out.status.success(), "{golden}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let golden_text = fs::read_to_string(fixture(&format!("decoding/{golden}"))).unwrap();
        let want = parse_fairseq(&golden_text);
        assert_eq!(want.values().map(|e| e.hyps.len()).sum::<usize>(), hyps, "{golden}");
        let got = parse_fairseq(&text);
        let c = compare_settled(&want, &got, &bundled_model_args(), &Rule::of(&args));
        c.assert_ok(golden);
        // the C- lines are fairseq's
        let constraints = constraint_lines(&text);
        assert_eq!(constraints, constraint_lines(&golden_text), "{golden}");
        assert_eq!(constraints.values().map(Vec::len).sum::<usize>(), 58, "{golden}");
        // and every hypothesis holds its constraints (ordered: in their order)
        for (id, e) in &got {
            for h in &e.hyps {
                let tokens: Vec<&str> = h.h_str.split(' ').collect();
                let mut from = 0;
                for c in constraints.get(id).into_iter().flatten() {
                    let needle: Vec<&str> = c.split(' ').collect();
                    let at = find(&tokens, &needle, if ordered { from } else { 0 });
                    assert!(at.is_some(), "{golden} id {id}: {:?} lacks {c:?}", h.h_str);
                    from = at.unwrap() + needle.len();
                }
            }
        }
        eprintln!("{golden}: {} hypotheses, {} of {} lines bit-identical", c.hyps, c.identical_lines, c.total_lines);
    }
}

/// JSONL `constraints` give what tabs give; a bad constraint costs only its line.
#[test]
fn jsonl_constraints_and_bad_constraint_lines() {
    let lines = ["A dog runs in the park.\tHund\tPark", "Two men play football.\tFußball", "A woman reads.\t\tBuch"];
    let text_input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let run = |input: String, args: &[&str]| {
        tchseq()
            .args(["translate", "--format", "fairseq", "--beam", "4", "--constraints", "-m"])
            .arg(repo("weights/multi30k.en-de"))
            .args(args)
            .write_stdin(input)
            .output()
            .unwrap()
    };
    let out = run(text_input, &[]);
    assert_eq!(out.status.code(), Some(2), "one bad line: {}", String::from_utf8_lossy(&out.stderr));
    let from_text = String::from_utf8(out.stdout).unwrap();
    assert!(from_text.contains("E-2\tconstraint 1 is empty; not translated"), "{from_text}");
    assert!(from_text.contains("C-0\tHund\nC-0\tPark\n") && from_text.contains("C-1\tFußball\n"), "{from_text}");

    let jsonl: String = lines[..2]
        .iter()
        .map(|l| {
            let mut f = l.split('\t');
            let src = f.next().unwrap();
            format!("{}\n", serde_json::json!({"src": src, "constraints": f.collect::<Vec<_>>()}))
        })
        .collect();
    let out = run(jsonl.clone(), &["--input-format", "jsonl"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let strip = |s: &str| -> Vec<String> {
        s.lines().filter(|l| !l.starts_with("W-") && !l.contains("-2\t")).map(str::to_string).collect()
    };
    assert_eq!(strip(&String::from_utf8(out.stdout).unwrap()), strip(&from_text));

    // constraints in a JSONL line without --constraints: that line's error
    let out = tchseq()
        .args(["translate", "--format", "jsonl", "--input-format", "jsonl", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .write_stdin(jsonl)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.lines().all(|l| l.contains("--constraints is not given")), "{stdout}");
}

#[test]
fn constraints_with_a_search_that_cannot_take_them_is_a_one_line_error() {
    for args in [
        vec!["--constraints", "--sampling", "--beam", "2", "--nbest", "2"],
        vec!["--constraints", "unordered", "--diverse-beam-groups", "5"],
        vec!["--constraints", "--diversity-rate", "0"],
    ] {
        let out = translate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{args:?}: {stderr}");
        assert!(errors[0].contains("--constraints cannot be combined with --sampling"), "{args:?}: {stderr}");
    }
    let out = translate(&["--constraints", "sideways"]);
    assert_eq!(out.status.code(), Some(2));
}
