//! `tchseq serve` with the other kinds of model: a multilingual model's pairs (one pair an
//! entry, or every pair on one copy of the weights) and a language model, each answering what the
//! CLI gives.

use std::f64::consts::LN_2;

use serde_json::{json, Value};

use super::serve::{http, sse_events, Server, SENTENCES};
use crate::util::{repo, tchseq};

/// `NAME=DIR@SRC-TGT` serves one pair of a multilingual model; LibreTranslate's source and target
/// pick the entry, and the text is the CLI's.
#[test]
fn a_multilingual_model_serves_the_pairs_it_is_given() {
    let dir = repo("tests/fixtures/multilingual/m2m");
    let en_fr = format!("m2m-en-fr={}@en-fr", dir.display());
    let fr_en = format!("m2m-fr-en={}@fr-en", dir.display());
    let de_fr = format!("m2m-de-fr={}@de-fr", dir.display());
    let s = Server::start(&["--model", &en_fr, "--model", &fr_en, "--model", &de_fr]);
    let cli = |src: &str, tgt: &str, text: &str| -> String {
        let out = crate::util::tchseq().args(["translate", "--batch-size", "1", "-m"]).arg(&dir).args(["-s", src, "-t", tgt, text]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim_end().to_string()
    };
    let fr = "Deux chiens jouent dans la neige.";
    for (src, tgt, text) in [("en", "fr", SENTENCES[0]), ("fr", "en", fr)] {
        let r = s.post("/translate", &json!({ "q": text, "source": src, "target": tgt }));
        assert_eq!(r.json(), json!({ "translatedText": cli(src, tgt, text) }), "{src}-{tgt}");
    }
    let r = s.post("/v1/translate", &json!({ "model": "m2m-en-fr", "text": [SENTENCES[1]] }));
    assert_eq!(r.json()["translations"][0]["hypotheses"][0]["text"], json!(cli("en", "fr", SENTENCES[1])));
    let langs = s.get("/languages").json();
    let en = langs.as_array().unwrap().iter().find(|l| l["code"] == "en").unwrap();
    assert_eq!(en["targets"], json!(["de", "fr"]));
    // "auto" stands for the one source served into the target, and is refused where there are two
    let r = s.post("/translate", &json!({ "q": fr, "source": "auto", "target": "en" }));
    assert_eq!(r.json(), json!({ "translatedText": cli("fr", "en", fr) }));
    s.post("/translate", &json!({ "q": fr, "source": "auto", "target": "fr" }))
        .assert_error(400, "source \"auto\": the served models cannot detect languages, and more than one translates into fr: name the source, one of de, en");
    s.post("/detect", &json!({ "q": fr })).assert_error(400, "one of de, en, fr");
}

/// The server's peak resident memory (`VmHWM`), in KiB.
fn peak_rss_kib(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()).expect("VmHWM")
}

/// The first line of a multilingual fixture's input in `lang`.
fn multilingual_line(lang: &str, n: usize) -> String {
    std::fs::read_to_string(crate::util::fixture(&format!("multilingual/input.{lang}"))).unwrap().lines().nth(n).unwrap().to_string()
}

/// `tchseq translate -s SRC -t TGT --format jsonl --batch-size 1` on the m2m fixture: (text, score).
fn m2m_cli(src: &str, tgt: &str, text: &str) -> (String, f64) {
    let out = crate::util::tchseq()
        .args(["translate", "--batch-size", "1", "--format", "jsonl", "-m"])
        .arg(repo("tests/fixtures/multilingual/m2m"))
        .args(["-s", src, "-t", tgt, text])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim_end()).unwrap();
    (v["hypotheses"][0]["text"].as_str().unwrap().to_string(), v["hypotheses"][0]["score"].as_f64().unwrap())
}

/// `--model NAME=DIR` on a multilingual model serves every pair it knows on one copy of the
/// weights: each request names its pair, requests of three pairs share one batch, and each
/// sentence gets what the CLI gives for its pair (the bits, when it is translated alone).
#[test]
fn a_multilingual_model_loaded_once_serves_every_pair() {
    let m2m = format!("m2m={}", repo("tests/fixtures/multilingual/m2m").display());
    let pairs = [("en", "de", multilingual_line("en", 0)), ("fr", "en", multilingual_line("fr", 1)), ("de", "fr", multilingual_line("de", 2))];
    let cli: Vec<(String, f64)> = pairs.iter().map(|(s, t, text)| m2m_cli(s, t, text)).collect();

    let s = Server::start(&["--model", &m2m, "--deterministic"]);
    let models = s.get("/v1/models").json();
    let served = &models["models"][1];
    assert_eq!(served["name"], "m2m");
    for (src, tgt, _) in &pairs {
        assert!(served["pairs"].as_array().unwrap().contains(&json!(format!("{src}-{tgt}"))), "{served}");
    }
    for ((src, tgt, text), (want, score)) in pairs.iter().zip(&cli) {
        let r = s.post("/v1/translate", &json!({ "model": "m2m", "text": [text], "source_lang": src, "target_lang": tgt }));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let best = r.json()["translations"][0]["hypotheses"][0].clone();
        assert_eq!(best["text"], want.as_str(), "{src}-{tgt}");
        assert_eq!(best["score"].as_f64().unwrap() as f32, *score as f32, "{src}-{tgt}: alone, the CLI's bits");
    }
    // LibreTranslate finds the pair on the model that serves it
    let r = s.post("/translate", &json!({ "q": pairs[1].2, "source": "fr", "target": "en" }));
    assert_eq!(r.json(), json!({ "translatedText": cli[1].0 }));
    let langs = s.get("/languages").json();
    let fr = langs.as_array().unwrap().iter().find(|l| l["code"] == "fr").unwrap();
    assert!(fr["targets"].as_array().unwrap().contains(&json!("de")), "{langs}");
    s.post("/v1/translate", &json!({ "model": "m2m", "text": ["x"], "source_lang": "en", "target_lang": "xx" }))
        .assert_error(400, "does not serve en-xx");
    s.post("/v1/translate", &json!({ "text": ["x"], "source_lang": "fr", "target_lang": "en" }))
        .assert_error(400, "model \"multi30k.en-de\" does not serve fr-en (it serves en-de)");
    // the weights are held once: peak RSS within 10% of a server of one pair that translated one sentence
    let every_pair = peak_rss_kib(&s);
    drop(s);
    let one = Server::start(&["--model", &format!("{m2m}@en-de"), "--deterministic"]);
    let r = one.post("/v1/translate", &json!({ "model": "m2m", "text": [&pairs[0].2] }));
    assert_eq!(r.json()["translations"][0]["hypotheses"][0]["text"], cli[0].0.as_str());
    let one_pair = peak_rss_kib(&one);
    drop(one);
    assert!(every_pair * 10 <= one_pair * 11, "peak RSS serving every pair {every_pair} KiB, one pair {one_pair} KiB");

    // three pairs sent together share one batch (the budget is exactly their estimate)
    let budget: usize = pairs.iter().map(|(_, _, t)| t.split_whitespace().count() + 1).sum();
    let s = Server::start(&["--model", &m2m, "--max-wait-ms", "60000", "--max-tokens", &budget.to_string()]);
    let port = s.port;
    let handles: Vec<_> = pairs
        .iter()
        .map(|(src, tgt, text)| {
            let body = json!({ "model": "m2m", "text": [text], "source_lang": src, "target_lang": tgt }).to_string();
            std::thread::spawn(move || http(port, "POST", "/v1/translate", &[], Some(body.as_bytes())).json())
        })
        .collect();
    for (h, (want, score)) in handles.into_iter().zip(&cli) {
        let best = h.join().unwrap()["translations"][0]["hypotheses"][0].clone();
        assert_eq!(best["text"], want.as_str());
        crate::util::tolerance::SENTENCE_SCORE.assert(best["score"].as_f64().unwrap() / LN_2, score / LN_2, want);
    }
    let metrics = String::from_utf8(s.get("/metrics").body).unwrap();
    assert!(metrics.contains("tchseq_batch_sentences_count{model=\"m2m\"} 1"), "three pairs, one batch: {metrics}");
}

/// A `transformer_lm` behind `/v1/translate` (it continues each text) and `/v1/score` (with
/// `texts`): the bits of `tchseq translate` and `tchseq score --lm --sample-break-mode eos` on the
/// same input, in deterministic mode.
#[test]
fn a_language_model_continues_and_scores_as_the_cli_does() {
    let dir = repo("tests/fixtures/lm/lm-gpt");
    let s = Server::start(&["--model", &format!("lm={}", dir.display()), "--deterministic"]);
    assert_eq!(s.get("/v1/models").json()["models"][1]["kind"], "language_model");

    let prompts: Vec<String> = std::fs::read_to_string(crate::util::fixture("lm/prompts.en")).unwrap().lines().take(3).map(str::to_string).collect();
    for prompt in &prompts {
        let out = tchseq()
            .args(["translate", "--batch-size", "1", "--format", "jsonl", "--beam", "4", "--nbest", "2", "--max-len-b", "12", "-m"])
            .arg(&dir)
            .arg(prompt)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let want: Value = serde_json::from_str(String::from_utf8(out.stdout).unwrap().trim_end()).unwrap();
        let r = s.post("/v1/translate", &json!({ "model": "lm", "text": [prompt], "options": { "beam": 4, "nbest": 2, "max_len_b": 12 } }));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let got = r.json()["translations"][0]["hypotheses"].clone();
        let want = want["hypotheses"].as_array().unwrap();
        assert_eq!(got.as_array().unwrap().len(), want.len(), "{prompt}");
        for (g, w) in got.as_array().unwrap().iter().zip(want) {
            assert_eq!(g["text"], w["text"], "{prompt}");
            assert!(g["text"].as_str().unwrap().starts_with(prompt.as_str()), "{g}");
            assert_eq!(g["score"].as_f64().unwrap() as f32, w["score"].as_f64().unwrap() as f32, "{prompt}");
        }
    }

    let input = crate::util::fixture("lm/input.en");
    let out = tchseq().args(["score", "--lm", "--sample-break-mode", "eos", "--format", "jsonl", "--per-token", "-m"]).arg(&dir).arg("--input").arg(&input).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let texts: Vec<String> = std::fs::read_to_string(&input).unwrap().lines().map(str::to_string).collect();
    assert_eq!(cli.len(), texts.len());
    let r = s.post("/v1/score", &json!({ "model": "lm", "texts": texts, "token_scores": true }));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let scores = r.json()["scores"].clone();
    assert_eq!(scores.as_array().unwrap().len(), cli.len());
    for (g, w) in scores.as_array().unwrap().iter().zip(&cli) {
        let pairs = w["token_logprobs"].as_array().unwrap();
        let want_tokens: Vec<&Value> = pairs.iter().map(|p| &p[0]).collect();
        let want_scores: Vec<f32> = pairs.iter().map(|p| p[1].as_f64().unwrap() as f32).collect();
        let got_scores: Vec<f32> = g["token_scores"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(g["target_tokens"].as_array().unwrap().iter().collect::<Vec<_>>(), want_tokens);
        assert_eq!(got_scores, want_scores, "{}", w["text"]);
        assert_eq!(g["tokens"], w["tokens"]);
    }

    // streamed at beam 1: the continuation's tokens as decoded (the prompt is not sent again)
    let body = json!({ "model": "lm", "text": prompts, "stream": true, "options": { "beam": 1, "max_len_b": 12 } }).to_string();
    let events = sse_events(&http(s.port, "POST", "/v1/translate", &[], Some(body.as_bytes())).body);
    let plain = s.post("/v1/translate", &json!({ "model": "lm", "text": prompts, "options": { "beam": 1, "max_len_b": 12 } })).json();
    for (i, want) in plain["translations"].as_array().unwrap().iter().enumerate() {
        let spelled: Vec<Value> = events.iter().filter(|(e, d)| e == "token" && d["index"] == i).map(|(_, d)| d["token"].clone()).collect();
        let tokens = want["hypotheses"][0]["tokens"].as_array().unwrap();
        assert!(!spelled.is_empty() && spelled.len() < tokens.len(), "{spelled:?} of {tokens:?}");
        assert_eq!(&tokens[tokens.len() - spelled.len()..], spelled.as_slice(), "prompt {i}: the continuation's tokens");
        let sentence = events.iter().find(|(e, d)| e == "sentence" && d["index"] == i).map(|(_, d)| d).unwrap();
        assert_eq!(sentence["hypotheses"], want["hypotheses"]);
    }
    assert_eq!(events.last().map(|(e, _)| e.as_str()), Some("done"));

    s.post("/v1/score", &json!({ "model": "lm", "pairs": [{ "source": "a", "target": "b" }] })).assert_error(400, "is a language model: give \"texts\"");
    s.post("/v1/score", &json!({ "texts": ["a"] })).assert_error(400, "is a translation model: give \"pairs\"");
    s.post("/v1/translate", &json!({ "model": "lm", "text": ["A dog"], "target_prefix": ["x"] })).assert_error(400, "is a language model");
    s.post("/v1/attention", &json!({ "model": "lm", "text": "A dog" })).assert_error(400, "is a language model");
}

/// A Hugging Face directory served as a model: every pair of its vocabulary's languages, each
/// answering what the CLI gives from the fairseq checkpoint it was converted from.
#[test]
fn a_hugging_face_directory_serves_as_its_fairseq_checkpoint_translates() {
    let hf = repo("tests/fixtures/hf/m2m");
    let s = Server::start(&["--model", &format!("hf={}", hf.display()), "--deterministic"]);
    for (src, tgt) in [("en", "de"), ("en", "fr")] {
        let (cli, _) = m2m_cli(src, tgt, SENTENCES[1]);
        let r = s.post("/translate", &json!({ "q": SENTENCES[1], "source": src, "target": tgt }));
        assert_eq!(r.json(), json!({ "translatedText": cli }), "{src}-{tgt}");
    }
}
