//! Counters and histograms, written in Prometheus' text format at `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

const LATENCY_BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

#[derive(Default, Clone)]
struct Histogram {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len()];
        }
        for (b, &bound) in self.buckets.iter_mut().zip(bounds) {
            if v <= bound {
                *b += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, &bound) in bounds.iter().enumerate() {
            let n = self.buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", self.count);
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

#[derive(Default)]
struct State {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    batches: BTreeMap<String, Histogram>,
    sentences: BTreeMap<String, u64>,
    tokens: BTreeMap<String, u64>,
}

pub struct Metrics {
    state: Mutex<State>,
    started: Instant,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics { state: Mutex::new(State::default()), started: Instant::now() }
    }
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn observe_request(&self, route: &str, status: u16, seconds: f64) {
        self.with(|s| {
            *s.requests.entry((route.to_string(), status)).or_default() += 1;
            s.latency.entry(route.to_string()).or_default().observe(&LATENCY_BUCKETS, seconds);
        });
    }

    pub fn observe_batch(&self, model: &str, sentences: usize) {
        self.with(|s| s.batches.entry(model.to_string()).or_default().observe(&BATCH_BUCKETS, sentences as f64));
    }

    /// Sentences (or pairs) done and the target tokens they produced or scored.
    pub fn add_work(&self, model: &str, sentences: usize, tokens: usize) {
        self.with(|s| {
            *s.sentences.entry(model.to_string()).or_default() += sentences as u64;
            *s.tokens.entry(model.to_string()).or_default() += tokens as u64;
        });
    }

    /// The Prometheus text exposition; `queued` is each model's queue depth now.
    pub fn render(&self, queued: &[(String, usize)]) -> String {
        let mut out = String::new();
        let uptime = self.started.elapsed().as_secs_f64();
        self.with(|s| {
            out.push_str("# HELP tchseq_requests_total HTTP requests by route and status.\n# TYPE tchseq_requests_total counter\n");
            for ((route, status), n) in &s.requests {
                let _ = writeln!(out, "tchseq_requests_total{{route=\"{}\",status=\"{status}\"}} {n}", escape(route));
            }
            out.push_str("# HELP tchseq_request_duration_seconds Request latency.\n# TYPE tchseq_request_duration_seconds histogram\n");
            for (route, h) in &s.latency {
                h.write(&mut out, "tchseq_request_duration_seconds", &format!("route=\"{}\"", escape(route)), &LATENCY_BUCKETS);
            }
            out.push_str("# HELP tchseq_batch_sentences Sentences per gathered batch.\n# TYPE tchseq_batch_sentences histogram\n");
            for (model, h) in &s.batches {
                h.write(&mut out, "tchseq_batch_sentences", &format!("model=\"{}\"", escape(model)), &BATCH_BUCKETS);
            }
            out.push_str("# HELP tchseq_sentences_total Sentences translated or pairs scored (rate() gives sentences/s).\n# TYPE tchseq_sentences_total counter\n");
            for (model, n) in &s.sentences {
                let _ = writeln!(out, "tchseq_sentences_total{{model=\"{}\"}} {n}", escape(model));
            }
            out.push_str("# HELP tchseq_tokens_total Target tokens produced or scored (rate() gives tokens/s).\n# TYPE tchseq_tokens_total counter\n");
            for (model, n) in &s.tokens {
                let _ = writeln!(out, "tchseq_tokens_total{{model=\"{}\"}} {n}", escape(model));
            }
        });
        out.push_str("# HELP tchseq_queue_sentences Sentences waiting or being computed.\n# TYPE tchseq_queue_sentences gauge\n");
        for (model, n) in queued {
            let _ = writeln!(out, "tchseq_queue_sentences{{model=\"{}\"}} {n}", escape(model));
        }
        out.push_str("# HELP tchseq_uptime_seconds Seconds since the server started.\n# TYPE tchseq_uptime_seconds gauge\n");
        let _ = writeln!(out, "tchseq_uptime_seconds {uptime}");
        out
    }
}
