//! `transformer_lm` checkpoints (`tests/fixtures/lm`, trained by fairseq 0.12.2 with
//! reference/lm_goldens.sh): `tchseq score --lm` against fairseq-eval-lm's
//! `--output-word-probs` lines and summary, in every `--sample-break-mode`, with
//! `--context-window`, for a post-norm model with sinusoidal positions and project_in/out
//! dims and a pre-norm (gpt) model with learned positions trained with `--add-bos-token`.

use std::collections::BTreeMap;
use std::fs;

use crate::util::tolerance::TOKEN_LOGPROB;
use crate::util::{fixture, tchseq};

/// fairseq-eval-lm's word-prob lines: sample id → (symbol, natural-log probability), and the
/// summary's `Loss (base 2)`.
fn eval_lm_golden(path: &str) -> (BTreeMap<usize, Vec<(String, f64)>>, f64) {
    let text = fs::read_to_string(fixture(path)).unwrap();
    let mut samples = BTreeMap::new();
    let mut loss = f64::NAN;
    for line in text.lines() {
        let Some(msg) = line.strip_prefix("INFO | fairseq_cli.eval_lm | ") else { continue };
        if let Some(rest) = msg.strip_prefix("Loss (base 2): ") {
            loss = rest.split(',').next().unwrap().parse().unwrap();
            continue;
        }
        let Some((id, words)) = msg.split_once(' ') else { continue };
        let Ok(id) = id.parse::<usize>() else { continue };
        let pairs = words
            .split('\t')
            .map(|w| {
                let (sym, p) = w.rsplit_once(" [").unwrap();
                (sym.to_string(), p.trim_end_matches(']').parse::<f64>().unwrap())
            })
            .collect();
        samples.insert(id, pairs);
    }
    (samples, loss)
}

fn score_lm(model: &str, input: &str, args: &[&str]) -> (Vec<serde_json::Value>, String, Option<i32>) {
    let out = tchseq()
        .args(["score", "--lm", "-m"])
        .arg(fixture(&format!("lm/{model}")))
        .arg("--input")
        .arg(fixture(&format!("lm/{input}")))
        .args(["--format", "jsonl", "--per-token"])
        .args(args)
        .output()
        .unwrap();
    let records = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (records, String::from_utf8_lossy(&out.stderr).into_owned(), out.status.code())
}

#[test]
fn score_lm_matches_fairseq_eval_lm_word_probs() {
    let runs: [(&str, &[&str], usize); 6] = [
        ("eval_lm_eos", &["--sample-break-mode", "eos"], 120),
        ("eval_lm_eos_remove_bpe_at", &["--sample-break-mode", "eos", "--remove-bpe", "@@ "], 120),
        ("eval_lm_eos_bs1", &["--sample-break-mode", "eos", "--batch-size", "1"], 120),
        ("eval_lm_none_tps32", &["--sample-break-mode", "none", "--tokens-per-sample", "32"], 57),
        ("eval_lm_none_tps32_cw16", &["--sample-break-mode", "none", "--tokens-per-sample", "32", "--context-window", "16"], 114),
        ("eval_lm_complete_tps48", &["--sample-break-mode", "complete", "--tokens-per-sample", "48"], 45),
    ];
    for model in ["lm-postnorm", "lm-gpt"] {
        for (golden, args, samples) in runs {
            let (want, loss) = eval_lm_golden(&format!("lm/{model}/goldens/{golden}.txt"));
            assert_eq!(want.len(), samples, "{model}/{golden}");
            let (records, stderr, code) = score_lm(model, "input.en", args);
            assert_eq!(code, Some(0), "{model}/{golden}: {stderr}");
            assert_eq!(records.len(), samples, "{model}/{golden}");
            let mut worst = 0f64;
            for r in &records {
                let id = r["id"].as_u64().unwrap() as usize;
                let got = r["token_logprobs"].as_array().unwrap();
                let theirs = &want[&id];
                assert_eq!(got.len(), theirs.len(), "{model}/{golden} sample {id}");
                for (g, (sym, p)) in got.iter().zip(theirs) {
                    assert_eq!(g[0].as_str().unwrap(), sym, "{model}/{golden} sample {id}");
                    TOKEN_LOGPROB.assert(g[1].as_f64().unwrap(), *p, &format!("{model}/{golden} sample {id} {sym:?}"));
                    worst = worst.max((g[1].as_f64().unwrap() - p).abs());
                }
            }
            let summary = format!("Loss (base 2): {loss:.4},");
            assert!(stderr.contains(&summary), "{model}/{golden}: {stderr} lacks {summary}");
            eprintln!("{model}/{golden}: {samples} samples, largest difference {worst:.1e}");
        }
    }
}

/// A line longer than the model's positions: fairseq-eval-lm skips it (a warning); here it is
/// an error record at its place, the others are scored as fairseq scores them, and the exit
/// status says that one was not.
#[test]
fn a_sentence_longer_than_the_model_is_its_own_error_record() {
    let (want, _) = eval_lm_golden("lm/lm-gpt/goldens/eval_lm_long_eos.txt");
    assert_eq!(want.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
    let (records, stderr, code) = score_lm("lm-gpt", "input_long.en", &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(records.len(), 3);
    assert!(records[1]["error"].as_str().unwrap().contains("longer than the model's 64 positions"), "{}", records[1]);
    for i in [0usize, 2] {
        let got = records[i]["token_logprobs"].as_array().unwrap();
        assert_eq!(got.len(), want[&i].len());
        assert!(got.iter().zip(&want[&i]).all(|(g, (_, p))| TOKEN_LOGPROB.holds((g[1].as_f64().unwrap() - p).abs())));
    }
    assert_eq!(stderr.lines().filter(|l| l.starts_with("error:")).count(), 1, "{stderr}");

    // the same records as CSV columns
    let out = tchseq()
        .args(["score", "--lm", "--format", "csv", "--per-token", "-m"])
        .arg(fixture("lm/lm-gpt"))
        .arg("--input")
        .arg(fixture("lm/input_long.en"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let mut reader = csv::Reader::from_reader(out.stdout.as_slice());
    let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 3);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no {name} in {header:?}"));
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[col("id")].parse::<usize>().unwrap(), i);
        let json = &records[i];
        assert_eq!(row[col("error")].is_empty(), json["error"].is_null());
        if json["error"].is_null() {
            assert_eq!(row[col("tokens")], json["tokens"].to_string());
            let logprob: f64 = row[col("logprob")].parse().unwrap();
            crate::util::tolerance::SAME_RUN_F32.assert(logprob, json["logprob"].as_f64().unwrap(), &format!("row {i}: csv logprob against jsonl"));
            assert!(row[col("token_logprobs")].starts_with("[[\""), "{:?}", &row[col("token_logprobs")]);
        }
    }
}

#[test]
fn score_lm_refuses_what_it_cannot_do_in_one_line() {
    for (args, wanted) in [
        (vec!["--sample-break-mode", "none", "--tokens-per-sample", "16", "--context-window", "16"], "--tokens-per-sample (16) must be larger than --context-window (16)"),
        (vec!["--resume"], "not supported with --lm"),
    ] {
        let (_, stderr, code) = score_lm("lm-postnorm", "input.en", &args);
        assert_eq!(code, Some(2), "{args:?}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(errors[0].contains(wanted), "{stderr}");
    }
    // a translation model is not a language model
    let out = tchseq()
        .args(["score", "--lm", "-m"])
        .arg(crate::util::repo("weights/multi30k.en-de"))
        .arg("--input")
        .arg(fixture("lm/input.en"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a transformer_lm language model"));
}

/// `translate -m LM_DIR` continues each line as fairseq-interactive `--task language_modeling`
/// does (the line is every hypothesis' forced prefix): the same hypotheses, scores within the
/// cross-CPU tolerance, and no near-ties (`score` does not force-decode a continuation with its
/// prompt's scores, so none can be proven); top-k sampling too (fairseq's random draws replayed: the model's initialisation, each
/// buffer's DataLoader).
/// fairseq 0.12.2 on CPU blocks no n-gram, and neither does tchseq's default (sizes 1 to 4:
/// tests/it/ngram.rs).
#[test]
fn translate_with_a_language_model_matches_fairseq_interactive() {
    use crate::util::fairseq_out::{compare_settled, parse_fairseq, Rule};
    let runs: [(&str, &[&str], usize); 5] = [
        (
            "interactive_sampling_topk10",
            &["--buffer-size", "1024", "--batch-size", "16", "--sampling", "--sampling-topk", "10", "--seed", "1", "--beam", "2", "--nbest", "2"],
            80,
        ),
        ("interactive_beam5_nbest2", &["--buffer-size", "1024", "--batch-size", "16", "--beam", "5", "--nbest", "2"], 80),
        ("interactive_beam5_bs1", &["--beam", "5", "--batch-size", "1", "--buffer-size", "1"], 40),
        ("interactive_greedy", &["--buffer-size", "1024", "--batch-size", "16", "--beam", "1"], 40),
        (
            "interactive_beam4_lenpen_norepeat",
            &["--buffer-size", "1024", "--batch-size", "16", "--beam", "4", "--lenpen", "0.6", "--no-repeat-ngram-size", "2"],
            40,
        ),
    ];
    for model in ["lm-postnorm", "lm-gpt"] {
        for (golden, args, hyps) in runs {
            let out = tchseq()
                .args(["translate", "--format", "fairseq", "--max-len-b", "20", "-m"])
                .arg(fixture(&format!("lm/{model}")))
                .arg("--input")
                .arg(fixture("lm/prompts.en"))
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{model}/{golden}: {}", String::from_utf8_lossy(&out.stderr));
            let want = parse_fairseq(&fs::read_to_string(fixture(&format!("lm/{model}/goldens/{golden}.txt"))).unwrap());
            assert_eq!(want.values().map(|e| e.hyps.len()).sum::<usize>(), hyps, "{model}/{golden}");
            let got = parse_fairseq(&String::from_utf8(out.stdout).unwrap());
            let c = compare_settled(&want, &got, &[], &Rule::exact_tokens());
            c.assert_ok(&format!("{model}/{golden}"));
            // every hypothesis begins with its prompt
            for e in got.values() {
                let src = e.src.as_deref().unwrap();
                assert!(e.hyps.iter().all(|h| h.h_str.starts_with(src)), "{model}/{golden}: {src:?}");
            }
            eprintln!("{model}/{golden}: {} of {} lines bit-identical", c.identical_lines, c.total_lines);
        }
    }
    let out = tchseq().args(["translate", "--constraints", "-m"]).arg(fixture("lm/lm-gpt")).arg("Two dogs\tcat").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--constraints") && stderr.contains("not supported with a language model"), "{stderr}");
}

/// The LM fixtures' activation goldens (`verify.pt`, made by reference/lm_tensors.py from
/// fairseq's own forward): our decoder's final features (after the last layer norm and
/// `project_out_dim`), logits and log-probabilities at every real position, within the
/// activation tolerance (1e-5 + 1e-5 relative) for the features, and the end-to-end logit drift
/// for logits and log-probabilities.
#[test]
fn activations_match_fairseq_s_verify_goldens() {
    use tch::{Device, Kind, Tensor};
    use tchseq::model::{get_normalized_probs, TransformerLanguageModel};

    use crate::util::tolerance::END_TO_END_LOGIT;
    crate::util::set_test_threads();
    let mut compared = 0;
    for model in ["lm-postnorm", "lm-gpt"] {
        let dir = fixture(&format!("lm/{model}"));
        let ckpt = tchseq::checkpoint::load_checkpoint(&dir.join("model.pt")).unwrap();
        let (lm, _) = TransformerLanguageModel::from_checkpoint(&ckpt, Device::Cpu, Kind::Float).unwrap();
        let g = tchseq::checkpoint::load_tensor_dict(&dir.join("verify.pt")).unwrap();
        let keep = g["target"].ne(1).unsqueeze(-1);
        assert!(keep.sum(Kind::Int64).int64_value(&[]) >= 40, "{model}: too few real positions");
        let out = lm.decoder.forward(&g["src_tokens"], None, None, false, true).unwrap();
        let mut hidden = out.inner_states.last().unwrap().shallow_clone();
        if let Some(ln) = &lm.decoder.layer_norm {
            hidden = ln.forward(&hidden).unwrap();
        }
        hidden = hidden.transpose(0, 1);
        if let Some(proj) = &lm.decoder.project_out_dim {
            hidden = proj.forward(&hidden).unwrap();
        }
        let lprobs = get_normalized_probs(&out.logits, true);
        let beyond = |ours: &Tensor, name: &str| -> f64 {
            let theirs = &g[name];
            assert_eq!(ours.size(), theirs.size(), "{model} {name}");
            let (a, b) = (ours.multiply(&keep).to_kind(Kind::Double), theirs.multiply(&keep).to_kind(Kind::Double));
            ((&a - &b).abs() - b.abs() * crate::util::tolerance::ACTIVATION_RELATIVE).max().double_value(&[]).max(0.0)
        };
        let h = beyond(&hidden, "hidden");
        assert!(crate::util::tolerance::ACTIVATION.holds(h), "{model} hidden: {h:e} beyond 1e-5 relative, over 1e-5");
        for (name, ours) in [("logits", &out.logits), ("lprobs", &lprobs)] {
            let d = beyond(ours, name);
            assert!(END_TO_END_LOGIT.holds(d), "{model} {name}: {d:e} beyond 1e-5 relative");
        }
        compared += 3;
    }
    assert_eq!(compared, 6);
}
