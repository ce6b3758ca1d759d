//! `--compute-type int8`: not fairseq's arithmetic, so held to a BLEU floor against the
//! references instead of to fairseq's bits (`exact`, the default, is what every parity test
//! checks). The Python package's int8 is tested in python/tests.

use std::collections::HashMap;

use crate::util::{fixture, repo, tchseq};

/// The hypotheses (H- lines: tokenized, BPE removed) and scores of the bundled input, in order.
fn hypotheses(compute_type: &str) -> Vec<(String, f64)> {
    let out = tchseq()
        .args(["translate", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .args(["--compute-type", compute_type, "--format", "fairseq", "--batch-size", "16", "--buffer-size", "64", "--input"])
        .arg(fixture("bundled/input.en"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut hyps: Vec<(usize, String, f64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("H-"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].parse().unwrap(), f[2].to_string(), f[1].parse().unwrap())
        })
        .collect();
    hyps.sort_by_key(|h| h.0);
    hyps.into_iter().map(|(_, text, score)| (text, score)).collect()
}

/// Corpus BLEU-4 on whitespace tokens (uniform weights, brevity penalty), in percent.
fn bleu(hyps: &[String], refs: &[String]) -> f64 {
    let (mut matches, mut totals) = ([0usize; 4], [0usize; 4]);
    let (mut hyp_len, mut ref_len) = (0, 0);
    for (h, r) in hyps.iter().zip(refs) {
        let (h, r): (Vec<&str>, Vec<&str>) = (h.split_whitespace().collect(), r.split_whitespace().collect());
        hyp_len += h.len();
        ref_len += r.len();
        for n in 1..=4 {
            let mut counts: HashMap<&[&str], usize> = HashMap::new();
            for g in r.windows(n) {
                *counts.entry(g).or_default() += 1;
            }
            for g in h.windows(n) {
                totals[n - 1] += 1;
                if let Some(c) = counts.get_mut(g).filter(|c| **c > 0) {
                    *c -= 1;
                    matches[n - 1] += 1;
                }
            }
        }
    }
    let log_precision: f64 = (0..4).map(|i| (matches[i] as f64 / totals[i].max(1) as f64).ln()).sum::<f64>() / 4.0;
    let brevity = if hyp_len < ref_len { 1.0 - ref_len as f64 / hyp_len.max(1) as f64 } else { 0.0 };
    100.0 * (log_precision + brevity).exp()
}

#[test]
fn int8_stays_within_two_bleu_points_of_exact_on_the_bundled_model() {
    let refs: Vec<String> = std::fs::read_to_string(fixture("bundled/score_reference/test.bpe.de"))
        .unwrap()
        .lines()
        .take(40)
        .map(|l| l.replace("@@ ", ""))
        .collect();
    let exact = hypotheses("exact");
    let int8 = hypotheses("int8");
    assert_eq!((exact.len(), int8.len()), (40, 40));
    let text = |h: &[(String, f64)]| h.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>();
    let (bleu_exact, bleu_int8) = (bleu(&text(&exact), &refs), bleu(&text(&int8), &refs));
    let changed = exact.iter().zip(&int8).filter(|(e, i)| e.0 != i.0).count();
    let moved = exact.iter().zip(&int8).filter(|(e, i)| e.1 != i.1).count();
    eprintln!("BLEU exact {bleu_exact:.2}, int8 {bleu_int8:.2}; {changed} of 40 hypotheses changed, {moved} scores moved");
    // 40 sentences: one changed hypothesis moves BLEU by up to a point (on all 1,000 of
    // test_2016_flickr, int8 loses 0.1: README)
    assert!(bleu_exact > 20.0, "the bundled model's exact BLEU is {bleu_exact:.2}");
    assert!(bleu_int8 >= bleu_exact - 2.0, "int8 BLEU {bleu_int8:.2} against exact {bleu_exact:.2}");
    // int8 really ran: its arithmetic moves scores
    assert!(moved > 20, "only {moved} of 40 scores differ from exact");
}

#[test]
fn an_unknown_compute_type_is_refused_by_name() {
    let out = tchseq()
        .args(["translate", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .args(["--compute-type", "float16", "A dog."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("float16") && err.contains("exact") && err.contains("int8"), "{err}");
}
