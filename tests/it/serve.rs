//! `tchseq serve` on an ephemeral port: every endpoint, every error path, batching across
//! requests, the API key, graceful shutdown.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::f64::consts::LN_2;
use std::time::Duration;

use serde_json::{json, Value};

use crate::util::{repo, test_threads, tchseq};

const MODEL: &str = "weights/multi30k.en-de";

pub struct Server {
    child: Child,
    pub port: u16,
    stderr: mpsc::Receiver<String>,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        Server::start_with_env(extra, &[])
    }

    /// [`Server::start`] with `env` set in its environment.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tchseq"));
        cmd.arg("--threads").arg(test_threads().to_string());
        cmd.args(["serve", "--model"]).arg(repo(MODEL)).args(["--port", "0"]).args(extra);
        cmd.envs(env.iter().copied());
        cmd.env_remove("LD_LIBRARY_PATH").stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("starting tchseq serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // from here on the child is in `Server`, whose drop kills and reaps it if a check fails
        let mut server = Server { child, port: 0, stderr: rx };
        loop {
            let line = server.stderr.recv_timeout(Duration::from_secs(120)).expect("tchseq serve did not say where it listens");
            if let Some(addr) = line.strip_prefix("tchseq serve: listening on http://") {
                server.port = addr.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
                assert!(addr.starts_with("127.0.0.1:"), "binds to loopback by default: {addr}");
                return server;
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn get(&self, path: &str) -> Reply {
        http(self.port, "GET", path, &[], None)
    }

    /// Waits for the event "`n` sentences are queued or being computed", read from `/metrics`
    /// (a minute at most: only a hung server takes that long).
    pub fn wait_queued(&self, n: usize) {
        let start = std::time::Instant::now();
        loop {
            let metrics = String::from_utf8(self.get("/metrics").body).unwrap();
            let queued: usize = metrics
                .lines()
                .filter_map(|l| l.strip_prefix("tchseq_queue_sentences{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
                .sum();
            if queued >= n {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{n} sentences never queued: {metrics}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn post(&self, path: &str, body: &Value) -> Reply {
        http(self.port, "POST", path, &[], Some(body.to_string().as_bytes()))
    }

    /// Waits (a minute at most) for the server to exit by itself; its status and the rest of
    /// stderr.
    pub fn wait_exit(mut self) -> (std::process::ExitStatus, String) {
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().expect("polling the server") {
                let rest: Vec<String> = self.stderr.try_iter().collect();
                return (status, rest.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the server did not exit");
    }

    /// Sends SIGTERM and returns the exit status and the rest of stderr.
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: signalling our own child process
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("waiting for the server");
        let rest: Vec<String> = self.stderr.try_iter().collect();
        (status, rest.join("\n"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// An error reply: the status, and a JSON body with a one-line `error`.
    pub fn assert_error(&self, status: u16, contains: &str) {
        assert_eq!(self.status, status, "{}", String::from_utf8_lossy(&self.body));
        let error = self.json()["error"].as_str().map(str::to_string).expect("an error message");
        assert!(error.contains(contains), "{error:?} should contain {contains:?}");
        assert!(!error.contains('\n'), "one line: {error:?}");
    }
}

/// One HTTP/1.1 request on a fresh connection.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting");
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    if let Some(b) = body {
        // the server may answer (413) before it has read everything
        let _ = stream.write_all(b);
    }
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no HTTP reply: {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status line");
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Reply { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
    out
}

/// What `tchseq translate --format jsonl` gives for each sentence on its own: (text, score).
fn cli_best(sentences: &[&str]) -> Vec<(String, f64)> {
    // one sentence at a time, as the deterministic server answers each request
    let out = tchseq().args(["translate", "--batch-size", "1", "--format", "jsonl", "-m"]).arg(repo(MODEL)).args(sentences).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let h = &v["hypotheses"][0];
            (h["text"].as_str().unwrap().to_string(), h["score"].as_f64().unwrap())
        })
        .collect()
}

pub const SENTENCES: [&str; 3] = ["A man in a blue shirt is riding a bike.", "Two dogs are playing in the snow.", "A little girl is eating an ice cream."];

#[test]
fn every_endpoint_answers_in_its_own_shape() {
    let s = Server::start(&[]);
    assert_eq!(s.get("/health").json(), json!({ "status": "ok" }));

    let models = s.get("/v1/models").json();
    assert_eq!(models["models"][0]["name"], "multi30k.en-de");
    assert_eq!(models["models"][0]["source_lang"], "en");
    assert_eq!(models["models"][0]["target_lang"], "de");
    assert_eq!(models["models"][0]["report"]["source_dictionary"]["size"].as_u64().map(|n| n > 4), Some(true));
    // file names, never where the server keeps them
    assert_eq!(models["models"][0]["report"]["source_dictionary"]["path"], "dict.en.txt");
    // each text-pipeline file under its own kind
    assert_eq!(models["models"][0]["report"]["bpe_codes"], "bpecodes");
    assert_eq!(models["models"][0]["report"]["sentencepiece_model"], Value::Null, "{models}");
    assert!(!models.to_string().contains(&*repo("").to_string_lossy()), "{models}");

    let cli = cli_best(&SENTENCES[..1]);
    let r = s.post("/v1/translate", &json!({ "text": SENTENCES[0], "options": { "nbest": 3, "token_scores": true, "alignment": true, "attention": true } }));
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["model"], "multi30k.en-de");
    let hyps = v["translations"][0]["hypotheses"].as_array().unwrap();
    assert_eq!(hyps.len(), 3);
    assert_eq!(hyps[0]["text"], cli[0].0.as_str());
    // one sentence alone is one batch of one, as in the CLI: the same bits
    assert_eq!(hyps[0]["score"].as_f64().unwrap() as f32, cli[0].1 as f32);
    let scores: Vec<f64> = hyps.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    let tokens = hyps[0]["tokens"].as_array().unwrap().len();
    assert_eq!(hyps[0]["token_scores"].as_array().unwrap().len(), tokens + 1, "EOS included");
    assert!(!hyps[0]["alignment"].as_array().unwrap().is_empty());
    let attention = &hyps[0]["attention"];
    assert_eq!(attention["weights"].as_array().unwrap().len(), tokens + 1);
    assert_eq!(attention["source"].as_array().unwrap().last().unwrap(), "</s>");

    let r = s.post("/v1/score", &json!({ "pairs": [{ "source": SENTENCES[0], "target": cli[0].0 }], "token_scores": true }));
    assert_eq!(r.status, 200);
    let score = &r.json()["scores"][0];
    let n = score["tokens"].as_u64().unwrap() as usize;
    assert_eq!(score["token_scores"].as_array().unwrap().len(), n);
    assert_eq!(score["target_tokens"].as_array().unwrap().len(), n);
    let avg = score["avg_logprob"].as_f64().unwrap();
    crate::util::tolerance::SAME_RUN_F32.assert(score["logprob"].as_f64().unwrap() / n as f64, avg, "logprob / tokens");
    assert!((score["ppl"].as_f64().unwrap() - (-avg).exp()).abs() < 1e-6);
    // forced decoding of the beam's own best hypothesis gives its unnormalized score back
    crate::util::tolerance::FORCED_DECODING.assert(score["logprob"].as_f64().unwrap(), cli[0].1 * n as f64, &format!("{score} vs {:?}", cli[0]));

    let r = s.post("/v1/attention", &json!({ "text": SENTENCES[1] }));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("image/svg+xml"));
    let svg = String::from_utf8(r.body.clone()).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(svg.contains("Hunde"), "target tokens label the rows");

    let page = s.get("/");
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").unwrap().starts_with("text/html"));
    assert!(String::from_utf8_lossy(&page.body).contains("id=\"heatmap\""));

    let metrics = String::from_utf8(s.get("/metrics").body).unwrap();
    assert!(metrics.contains("tchseq_requests_total{route=\"/v1/translate\",status=\"200\"} 1"), "{metrics}");
    assert!(metrics.contains("tchseq_request_duration_seconds_bucket{route=\"/v1/score\",le=\"+Inf\"} 1"), "{metrics}");
    assert!(metrics.contains("tchseq_batch_sentences_count{model=\"multi30k.en-de\"}"), "{metrics}");
    assert!(metrics.contains("tchseq_queue_sentences{model=\"multi30k.en-de\"} 0"), "{metrics}");
    assert!(metrics.contains("tchseq_sentences_total{model=\"multi30k.en-de\"}"), "{metrics}");
}

#[test]
fn sampling_with_a_seed_repeats_itself() {
    let s = Server::start(&[]);
    let sample = |seed: u64| {
        let options = json!({ "sampling": true, "beam": 4, "nbest": 4, "sampling_topk": 10, "seed": seed, "lenpen": 0.8 });
        let r = s.post("/v1/translate", &json!({ "text": SENTENCES[2], "options": options }));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let hyps = r.json()["translations"][0]["hypotheses"].clone();
        hyps.as_array().unwrap().iter().map(|h| h["text"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    let first = sample(7);
    assert_eq!(first.len(), 4);
    assert_eq!(sample(7), first, "the same seed draws the same samples");
    let others: Vec<Vec<String>> = (8..12).map(sample).collect();
    assert!(others.iter().any(|o| *o != first), "other seeds draw other samples: {first:?} {others:?}");
    s.post("/v1/translate", &json!({ "text": "a", "options": { "sampling": true, "beam": 2 } })).assert_error(400, "sampling requires nbest to be equal to beam");
}

/// `target_prefix` in `/v1/translate`: fairseq's `prefix_tokens` hypotheses
/// (tests/fixtures/decoding/prefix.json), the same tokens, scores within the cross-CPU
/// tolerance.
#[test]
fn a_target_prefix_gives_fairseqs_prefix_tokens_hypotheses() {
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(crate::util::fixture("decoding/prefix.json")).unwrap()).unwrap();
    let cases = cases.as_array().unwrap();
    let text: Vec<&str> = cases.iter().map(|c| c["source"].as_str().unwrap()).collect();
    let prefixes: Vec<Value> = cases
        .iter()
        .map(|c| match c["prefix"].as_str().unwrap() {
            "" => Value::Null,
            p => json!(p),
        })
        .collect();
    let s = Server::start(&["--deterministic"]);
    let r = s.post("/v1/translate", &json!({ "text": text, "target_prefix": prefixes, "options": { "nbest": 2 } }));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let replies = r.json()["translations"].clone();
    assert_eq!(replies.as_array().unwrap().len(), cases.len());
    assert!(!cases.is_empty());
    for (c, reply) in cases.iter().zip(replies.as_array().unwrap()) {
        let (want, got) = (c["hypotheses"].as_array().unwrap(), reply["hypotheses"].as_array().unwrap());
        assert_eq!(got.len(), want.len(), "{reply}");
        for (w, g) in want.iter().zip(got) {
            let tokens: Vec<&str> = g["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
            assert_eq!(tokens.join(" "), w["tokens"].as_str().unwrap(), "{}", c["source"]);
            crate::util::tolerance::SENTENCE_SCORE.assert(g["score"].as_f64().unwrap() / LN_2, w["score"].as_f64().unwrap() / LN_2, &format!("{g} vs {w}"));
        }
    }
    s.post("/v1/translate", &json!({ "text": ["a", "b"], "target_prefix": ["x"] })).assert_error(400, "1 target prefixes for 2 sentences");
}

/// `constraints` in `/v1/translate`, one request per sentence as the deterministic server
/// answers it: the bits of `tchseq translate --constraints --batch-size 1` on the same lines
/// (whose tab-separated fields are the constraints, fairseq-interactive's format).
#[test]
fn constraints_in_a_request_give_the_clis_constrained_bits() {
    let lines: Vec<String> = std::fs::read_to_string(crate::util::fixture("decoding/constraints.en")).unwrap().lines().take(5).map(str::to_string).collect();
    let s = Server::start(&["--deterministic"]);
    for order in ["ordered", "unordered"] {
        let out = tchseq()
            .args(["translate", "--batch-size", "1", "--format", "jsonl", "--nbest", "2", "--constraints", order, "-m"])
            .arg(repo(MODEL))
            .write_stdin(lines.iter().map(|l| format!("{l}\n")).collect::<String>())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let cli: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(cli.len(), lines.len());
        for (line, want) in lines.iter().zip(&cli) {
            let mut fields = line.split('\t');
            let text = fields.next().unwrap();
            let constraints: Vec<&str> = fields.collect();
            let mut options = json!({ "nbest": 2 });
            if order == "unordered" {
                options["constraints"] = json!("unordered");
            }
            let r = s.post("/v1/translate", &json!({ "text": [text], "constraints": [constraints], "options": options }));
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            let got = r.json()["translations"][0]["hypotheses"].clone();
            let want = want["hypotheses"].as_array().unwrap();
            assert_eq!(got.as_array().unwrap().len(), want.len(), "{line}: {got}");
            for (g, w) in got.as_array().unwrap().iter().zip(want) {
                assert_eq!(g["text"], w["text"], "{order} {line}");
                assert_eq!(g["score"].as_f64().unwrap() as f32, w["score"].as_f64().unwrap() as f32, "{order} {line}");
                for c in &constraints {
                    assert!(g["text"].as_str().unwrap().contains(c), "{order}: {g} lacks {c}");
                }
            }
        }
    }
    // a bad constraint costs only its sentence; a count that does not fit is the request's error
    let r = s.post("/v1/translate", &json!({ "text": ["A dog runs.", "A cat sleeps."], "constraints": [[""], ["Katze"]] }));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let t = r.json()["translations"].clone();
    assert_eq!(t[0]["error"], "constraint 1 is empty", "{t}");
    assert!(t[1]["hypotheses"][0]["text"].as_str().unwrap().contains("Katze"), "{t}");
    s.post("/v1/translate", &json!({ "text": ["a", "b"], "constraints": [["x"]] })).assert_error(400, "1 constraint lists for 2 sentences");
    s.post("/v1/translate", &json!({ "text": ["a"], "constraints": [["x"]], "options": { "sampling": true, "beam": 1 } }))
        .assert_error(400, "constraints cannot be combined with sampling");
}

#[test]
fn libretranslate_and_opennmt_clients_work_unchanged() {
    let s = Server::start(&[]);
    let cli = cli_best(&SENTENCES[..2]);
    let r = s.post("/translate", &json!({ "q": SENTENCES[0], "source": "en", "target": "de", "format": "text" }));
    assert_eq!(r.json(), json!({ "translatedText": cli[0].0 }));
    let r = s.post("/translate", &json!({ "q": SENTENCES[..2], "source": "auto", "target": "de", "alternatives": 2 }));
    let v = r.json();
    assert_eq!(v["translatedText"], json!([cli[0].0, cli[1].0]));
    assert_eq!(v["alternatives"][0].as_array().unwrap().len(), 2);
    // libretranslatepy posts an HTML form
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let body = format!("q={}&source=en&target=de&format=text", SENTENCES[0].replace(' ', "+"));
    let r = http(s.port, "POST", "/translate", &form, Some(body.as_bytes()));
    assert_eq!(r.json(), json!({ "translatedText": cli[0].0 }));
    http(s.port, "POST", "/translate", &form, Some(b"source=en&target=de")).assert_error(422, "invalid form");
    s.post("/translate", &json!({ "q": "x", "source": "en", "target": "fr" })).assert_error(400, "en → fr is not supported");
    s.post("/translate", &json!({ "q": "x", "source": "en", "target": "de", "format": "html" })).assert_error(400, "html");
    assert_eq!(s.get("/languages").json(), json!([{ "code": "en", "name": "en", "targets": ["de"] }]));
    // libretranslatepy's detect(): no served model detects languages
    s.post("/detect", &json!({ "q": SENTENCES[0] })).assert_error(400, "cannot detect languages; name the source language, one of en");

    let r = s.post("/translator/translate", &json!([{ "src": SENTENCES[0], "id": 0 }, { "src": SENTENCES[1], "id": 0 }]));
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v[0][0]["tgt"], cli[0].0.as_str());
    assert_eq!(v[0][1]["tgt"], cli[1].0.as_str());
    assert_eq!(v[0][0]["src"], SENTENCES[0]);
    assert!(v[0][0]["pred_score"].as_f64().unwrap() < 0.0);
    s.post("/translator/translate", &json!([{ "src": "x", "id": 7 }])).assert_error(404, "unknown model id 7");
    assert_eq!(s.get("/translator/models").json()[0]["model_id"], 0);
}

#[test]
fn bad_requests_get_a_json_error_and_the_server_goes_on() {
    let s = Server::start(&["--max-sentences", "4", "--max-body-bytes", "2000", "--max-sentence-tokens", "12"]);
    let raw = |body: &[u8]| http(s.port, "POST", "/v1/translate", &[], Some(body));
    raw(b"{\"text\": ").assert_error(400, "malformed JSON");
    raw(b"{\"text\": [1, 2]}").assert_error(422, "expected a string");
    // our words, not serde's ("untagged enum OneOrMany")
    let r = raw(b"{\"text\": 5}");
    r.assert_error(422, "invalid type: integer `5`, expected a string or a list of strings");
    assert!(!String::from_utf8_lossy(&r.body).contains("OneOrMany"));
    let r = s.get("/v1/translate");
    r.assert_error(405, "GET is not allowed on /v1/translate; it takes POST");
    assert_eq!(r.header("allow"), Some("POST"));
    raw(b"{\"text\": \"a\", \"colour\": 1}").assert_error(422, "unknown field `colour`");
    raw(b"{\"text\": \"a\", \"options\": {\"beam\": \"five\"}}").assert_error(422, "invalid request");
    http(s.port, "POST", "/v1/translate", &[("Content-Type", "text/plain")], Some(b"hello")).assert_error(415, "must be JSON");
    s.post("/v1/translate", &json!({ "text": "a", "model": "nope" })).assert_error(404, "unknown model \"nope\"");
    s.post("/v1/translate", &json!({ "text": vec!["a"; 5] })).assert_error(413, "the limit is 4");
    s.post("/v1/translate", &json!({ "text": [] })).assert_error(400, "no sentences");
    s.post("/v1/translate", &json!({ "text": "a", "options": { "beam": 2, "nbest": 3 } })).assert_error(400, "nbest must be between 1 and beam (2)");
    s.post("/v1/translate", &json!({ "text": "a", "options": { "compute_type": "int8" } })).assert_error(400, "compute_type");
    s.post("/v1/translate", &json!({ "text": "a".repeat(3000) })).assert_error(413, "too large");
    s.get("/v2/nothing").assert_error(404, "no such route");

    // one sentence too long fails alone
    let long = "a dog ".repeat(20);
    let r = s.post("/v1/translate", &json!({ "text": [SENTENCES[1], long, SENTENCES[2]] }));
    assert_eq!(r.status, 200);
    let t = r.json()["translations"].clone();
    assert!(t[0]["hypotheses"][0]["text"].as_str().unwrap().contains("Hunde"));
    assert!(t[1]["error"].as_str().unwrap().contains("at most 12"), "{t}");
    assert!(t[1].get("hypotheses").is_none());
    assert!(t[2]["hypotheses"][0]["text"].as_str().is_some());
    let r = s.post("/v1/score", &json!({ "pairs": [{ "source": "", "target": "Hallo" }, { "source": "A dog.", "target": "Ein Hund." }] }));
    let scores = r.json()["scores"].clone();
    assert!(scores[0]["error"].as_str().unwrap().contains("empty 'source'"));
    assert!(scores[1]["logprob"].as_f64().unwrap() < 0.0);
    assert_eq!(s.get("/health").status, 200);
}

/// One request per sentence of [`SENTENCES`], all at once; the replies in sentence order.
fn translate_concurrently(port: u16) -> Vec<Value> {
    let post = move |sentence: &str| http(port, "POST", "/v1/translate", &[], Some(json!({ "text": sentence }).to_string().as_bytes())).json();
    let handles: Vec<_> = SENTENCES.iter().map(|&sentence| std::thread::spawn(move || post(sentence))).collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The batch closes on an event, not a clock: its token budget (`--max-tokens`) is exactly the
/// three requests' estimate (whitespace words + EOS), and the wait for company is a minute.
#[test]
fn concurrent_requests_share_batches_and_match_the_cli() {
    let budget: usize = SENTENCES.iter().map(|s| s.split_whitespace().count() + 1).sum();
    let s = Server::start(&["--max-wait-ms", "60000", "--max-tokens", &budget.to_string()]);
    let cli = cli_best(&SENTENCES);
    let replies = translate_concurrently(s.port);
    assert_eq!(replies.len(), SENTENCES.len());
    for (reply, (text, score)) in replies.iter().zip(&cli) {
        let h = &reply["translations"][0]["hypotheses"][0];
        // in one batch with others the last bits may move, as in fairseq
        assert_eq!(h["text"], text.as_str());
        crate::util::tolerance::SENTENCE_SCORE.assert(h["score"].as_f64().unwrap() / LN_2, score / LN_2, text);
    }
    let metrics = String::from_utf8(s.get("/metrics").body).unwrap();
    let batches: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tchseq_batch_sentences_count{model=\"multi30k.en-de\"} "))
        .and_then(|n| n.parse().ok())
        .expect("a batch count");
    assert_eq!(batches, 1.0, "three requests share one batch");
}

#[test]
fn deterministic_mode_answers_each_request_alone_with_the_cli_bits() {
    let s = Server::start(&["--deterministic", "--max-wait-ms", "1500"]);
    let cli = cli_best(&SENTENCES);
    let replies = translate_concurrently(s.port);
    assert_eq!(replies.len(), SENTENCES.len());
    for (reply, (text, score)) in replies.into_iter().zip(&cli) {
        let best = &reply["translations"][0]["hypotheses"][0];
        assert_eq!(best["text"], text.as_str());
        assert_eq!(best["score"].as_f64().unwrap() as f32, *score as f32);
    }
    let metrics = String::from_utf8(s.get("/metrics").body).unwrap();
    assert!(metrics.contains("tchseq_batch_sentences_count{model=\"multi30k.en-de\"} 3"), "{metrics}");
}

#[test]
fn the_api_key_guards_every_route_but_health() {
    let s = Server::start(&["--api-key", "s3cret"]);
    let body = json!({ "text": "A dog runs." }).to_string();
    assert_eq!(s.get("/health").status, 200);
    for path in ["/", "/metrics", "/v1/models", "/languages", "/translator/models"] {
        s.get(path).assert_error(401, "API key");
    }
    http(s.port, "POST", "/v1/translate", &[], Some(body.as_bytes())).assert_error(401, "API key");
    http(s.port, "POST", "/v1/translate", &[("Authorization", "Bearer wrong")], Some(body.as_bytes())).assert_error(401, "API key");
    assert_eq!(http(s.port, "POST", "/v1/translate", &[("Authorization", "Bearer s3cret")], Some(body.as_bytes())).status, 200);
    assert_eq!(http(s.port, "POST", "/v1/translate", &[("X-API-Key", "s3cret")], Some(body.as_bytes())).status, 200);
    assert_eq!(s.get("/v1/models?api_key=s3cret").status, 200);
    // LibreTranslate clients send the key in the body
    let libre = json!({ "q": "A dog runs.", "source": "en", "target": "de", "api_key": "s3cret" });
    assert_eq!(s.post("/translate", &libre).status, 200);
    let libre = json!({ "q": "A dog runs.", "source": "en", "target": "de", "api_key": "nope" });
    s.post("/translate", &libre).assert_error(401, "API key");
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    assert_eq!(http(s.port, "POST", "/translate", &form, Some(b"q=A+dog+runs.&source=en&target=de&api_key=s3cret")).status, 200);
    http(s.port, "POST", "/translate", &form, Some(b"q=A+dog+runs.&source=en&target=de&api_key=nope")).assert_error(401, "API key");
}

/// The request waits ten minutes for company: only the shutdown can have computed it.
#[test]
fn sigterm_finishes_the_request_in_flight_then_exits_0() {
    let s = Server::start(&["--max-wait-ms", "600000", "--request-timeout", "600"]);
    let port = s.port;
    let in_flight = std::thread::spawn(move || http(port, "POST", "/v1/translate", &[], Some(br#"{"text": "A dog runs."}"#)));
    s.wait_queued(1);
    let (status, stderr) = s.terminate();
    let reply = in_flight.join().unwrap();
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.json()["translations"][0]["hypotheses"][0]["text"].as_str().unwrap().contains("Hund"));
    assert!(status.success(), "exit status {status:?}; stderr: {stderr}");
    assert!(stderr.contains("shutting down"), "{stderr}");
}

#[test]
fn bad_flags_are_one_line_errors() {
    let out = tchseq().args(["serve", "--model", "/nonexistent/model", "--port", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: ") && err.trim_end().lines().count() == 1, "{err}");
    let out = tchseq().args(["serve", "--model"]).arg(repo(MODEL)).args(["--host", "localhost:80"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--host"));
}

#[test]
fn an_int8_server_answers_int8_requests_and_refuses_exact_ones() {
    let s = Server::start(&["--compute-type", "int8"]);
    for options in [json!({}), json!({ "compute_type": "int8" })] {
        let reply = s.post("/v1/translate", &json!({ "text": SENTENCES[1], "options": options })).json();
        let text = reply["translations"][0]["hypotheses"][0]["text"].as_str().unwrap_or_default().to_string();
        assert!(text.starts_with("Zwei Hunde"), "{reply}");
    }
    s.post("/v1/translate", &json!({ "text": "a", "options": { "compute_type": "exact" } }))
        .assert_error(400, "compute_type \"exact\": this model runs in \"int8\"");
}

/// The events of a server-sent event stream: (event, data as JSON).
pub fn sse_events(body: &[u8]) -> Vec<(String, Value)> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_string()).unwrap_or_default();
            (field("event:"), serde_json::from_str(&field("data:")).unwrap_or(Value::Null))
        })
        .collect()
}

/// `"stream": true`: server-sent events, read by a plain HTTP client. With beam 1 (greedy, and
/// sampling with a seed) each sentence's `token` events spell its final hypothesis as it was
/// decoded; then one `sentence` event per sentence in order, each what the request without
/// `stream` answers (the same bits, in deterministic mode), then `done`. With beam 5 there are no
/// token events (a beam's past changes).
#[test]
fn a_streamed_translation_sends_tokens_as_decoded_then_each_sentence() {
    let s = Server::start(&["--deterministic"]);
    for options in [json!({ "beam": 1 }), json!({ "beam": 1, "nbest": 1, "sampling": true, "seed": 7 }), json!({ "beam": 5, "nbest": 2 })] {
        let plain = s.post("/v1/translate", &json!({ "text": SENTENCES, "options": options }));
        assert_eq!(plain.status, 200, "{}", String::from_utf8_lossy(&plain.body));
        let want = plain.json()["translations"].clone();
        let body = json!({ "text": SENTENCES, "stream": true, "options": options }).to_string();
        let r = http(s.port, "POST", "/v1/translate", &[], Some(body.as_bytes()));
        assert_eq!(r.status, 200);
        assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{:?}", r.headers);
        let events = sse_events(&r.body);
        let kinds: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
        let tokens: Vec<&(String, Value)> = events.iter().filter(|(e, _)| e == "token").collect();
        let sentences: Vec<&Value> = events.iter().filter(|(e, _)| e == "sentence").map(|(_, d)| d).collect();
        assert_eq!(kinds.last(), Some(&"done"), "{kinds:?}");
        let first_sentence = kinds.iter().position(|k| *k == "sentence").unwrap();
        assert!(kinds[..first_sentence].iter().all(|k| *k == "token"), "tokens come first: {kinds:?}");
        assert_eq!(sentences.len(), SENTENCES.len(), "{kinds:?}");
        for (i, (got, want)) in sentences.iter().zip(want.as_array().unwrap()).enumerate() {
            assert_eq!(got["index"], i, "in order");
            assert_eq!(got["source"], want["source"]);
            assert_eq!(got["hypotheses"], want["hypotheses"], "{options}: the reply without stream");
            let spelled: Vec<&str> = tokens.iter().filter(|(_, d)| d["index"] == i).map(|(_, d)| d["token"].as_str().unwrap()).collect();
            if options["beam"] == 1 {
                assert_eq!(json!(spelled), got["hypotheses"][0]["tokens"], "{options}: sentence {i}'s tokens as decoded");
            } else {
                assert!(spelled.is_empty(), "no token events with a beam of 5");
            }
        }
    }
    s.post("/v1/translate", &json!({ "text": ["A dog."], "stream": true, "options": { "alignment": true } })).assert_error(400, "alignment and attention need \"stream\": false");
}

/// A client that sends its whole body before it reads (Python's urllib) still reads the 413 of
/// a body over `--max-body-bytes`: the server reads and discards it first.
#[test]
fn an_oversized_body_sent_whole_still_gets_its_413() {
    let s = Server::start(&["--max-body-bytes", "2000"]);
    let body = vec![b' '; 16 << 20];
    let mut stream = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!("POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).expect("the server stopped reading the body: the client sees a broken pipe");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("the request body is too large: 16777216 bytes, the limit is 2000"), "{text}");
    assert_eq!(s.get("/health").status, 200);
}
