//! fairseq-interactive's printed output (`S-`/`H-`/`D-`/`P-`/`E-` lines), parsed and compared
//! with a golden the way the parity contract reads: the same hypotheses, the same detokenized
//! text, scores within [`SENTENCE_SCORE`] and [`POSITIONAL_SCORE`].
//!
//! The goldens carry the bits of the CPU that made them. On another CPU a near-tie in the beam
//! can flip, so a hypothesis whose *tokens* differ from the golden's is accepted only when it is
//! proven to be one: fairseq's own score for its hypothesis (the golden's `H-`) and the score of
//! ours, force-decoded by `tchseq score --tokenized` (with the run's `--lenpen` and `--unkpen`),
//! must be within [`SENTENCE_SCORE`]. A differing `D-` line, spacing or `E-` line is always a
//! failure, sampling and searches whose scores carry penalties get no near-ties, and a test
//! accepts near-ties in at most 1% of its hypotheses ([`Tally`]).

use std::collections::BTreeMap;
use std::path::Path;

use super::tchseq;
use super::tolerance::{POSITIONAL_SCORE, SENTENCE_SCORE};

/// One hypothesis as fairseq-interactive prints it.
#[derive(Debug, Clone)]
pub struct Hyp {
    pub h_score: f64,
    pub h_str: String,
    pub d_score: f64,
    pub d_str: String,
    pub p: Vec<f64>,
}

/// Per input id: the S- line and the hypotheses in printed (nbest) order, or an E- error.
#[derive(Debug, Default, Clone)]
pub struct Entry {
    pub src: Option<String>,
    pub hyps: Vec<Hyp>,
    pub error: Option<String>,
}

pub fn parse_fairseq(text: &str) -> BTreeMap<usize, Entry> {
    let mut out: BTreeMap<usize, Entry> = BTreeMap::new();
    for line in text.lines() {
        let Some((tag, rest)) = line.split_once('\t') else { continue };
        let Some((kind, id)) = tag.split_once('-') else { continue };
        let Ok(id) = id.parse::<usize>() else { continue };
        let e = out.entry(id).or_default();
        match kind {
            "S" => e.src = Some(rest.to_string()),
            "E" => e.error = Some(rest.to_string()),
            "H" => {
                let (score, s) = rest.split_once('\t').unwrap_or((rest, ""));
                e.hyps.push(Hyp {
                    h_score: score.parse().unwrap(),
                    h_str: s.into(),
                    d_score: f64::NAN,
                    d_str: String::new(),
                    p: vec![],
                });
            }
            "D" => {
                let (score, s) = rest.split_once('\t').unwrap_or((rest, ""));
                let h = e.hyps.last_mut().expect("D- before H-");
                h.d_score = score.parse().unwrap();
                h.d_str = s.into();
            }
            "P" => {
                let h = e.hyps.last_mut().expect("P- before H-");
                h.p = rest.split(' ').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
            }
            _ => {}
        }
    }
    out
}

/// A hypothesis whose tokens differ from the golden's at the same place.
#[derive(Debug, Clone)]
pub struct Differing {
    pub id: usize,
    pub k: usize,
    pub src: String,
    pub want: String,
    pub want_score: f64,
    pub got: String,
    pub got_score: f64,
}

#[derive(Debug, Default)]
pub struct Compare {
    pub sentences: usize,
    pub hyps: usize,
    pub identical_lines: usize,
    pub total_lines: usize,
    pub max_h_diff: f64,
    pub max_p_diff: f64,
    pub problems: Vec<String>,
    /// Hypotheses whose tokens differ, not yet proven to be near-ties (see [`settle_near_ties`]).
    pub differing: Vec<Differing>,
    /// Differing hypotheses proven to be near-ties.
    pub near_ties: usize,
    /// The input ids of those near-ties.
    pub near_tie_ids: Vec<usize>,
}

impl Compare {
    /// Problems, and differing hypotheses not proven to be near-ties.
    pub fn failures(&self) -> Vec<String> {
        let unsettled = self.differing.iter().map(|d| format!("id {} hyp {}: {:?} expected, {:?} printed", d.id, d.k, d.want, d.got));
        self.problems.iter().cloned().chain(unsettled).collect()
    }

    /// No problem, no unproven difference, and at most 1% of the hypotheses near-ties.
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.differing.is_empty() && within_cap(self.near_ties, self.hyps)
    }

    /// Asserts [`Self::ok`], naming `what`, with the failures.
    #[track_caller]
    pub fn assert_ok(&self, what: &str) {
        assert!(self.hyps > 0, "{what}: no hypothesis compared");
        assert!(within_cap(self.near_ties, self.hyps), "{what}: {} near-ties in {} hypotheses, over 1%", self.near_ties, self.hyps);
        assert!(self.ok(), "{what}: {:?}", self.failures());
    }
}

fn within_cap(near_ties: usize, hyps: usize) -> bool {
    near_ties * 100 <= hyps
}

/// The near-ties of a whole test: at most 1% of its hypotheses, and in each of its runs at most
/// 1% of that run's hypotheses (rounded up: one in a run of up to 100), so that no run takes
/// the whole test's allowance.
#[derive(Debug, Default)]
pub struct Tally {
    pub hyps: usize,
    pub near_ties: usize,
    /// The runs over their own cap: (run number, near-ties, hypotheses).
    pub over: Vec<(usize, usize, usize)>,
    runs: usize,
}

impl Tally {
    pub fn add(&mut self, c: &Compare) {
        self.runs += 1;
        self.hyps += c.hyps;
        self.near_ties += c.near_ties;
        if c.near_ties * 100 > c.hyps.div_ceil(100) * 100 {
            self.over.push((self.runs, c.near_ties, c.hyps));
        }
    }

    #[track_caller]
    pub fn assert_within_cap(&self, what: &str) {
        assert!(self.hyps > 0, "{what}: no hypothesis compared");
        assert!(within_cap(self.near_ties, self.hyps), "{what}: {} near-ties in {} hypotheses, over 1%", self.near_ties, self.hyps);
        assert!(self.over.is_empty(), "{what}: runs over their own 1% of near-ties (run, near-ties, hypotheses): {:?}", self.over);
    }
}

/// What a search's scores are, for the near-tie proof: beam search's `sum(log p) / len^lenpen`
/// with `--unkpen` subtracted per `<unk>`, or a search whose scores no force-decoding gives
/// (sampling; diverse beams and siblings, whose scores carry their penalties; `--match-source-len`,
/// whose EOS costs nothing), which gets none.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub lenpen: f64,
    pub unkpen: f64,
    pub near_ties: bool,
}

impl Rule {
    /// Plain beam search with `--lenpen`.
    pub fn beam(lenpen: f64) -> Rule {
        Rule { lenpen, unkpen: 0.0, near_ties: true }
    }

    /// A search with no near-ties: every differing hypothesis fails.
    pub fn exact_tokens() -> Rule {
        Rule { lenpen: 1.0, unkpen: 0.0, near_ties: false }
    }

    /// The rule of a fairseq option list.
    pub fn of<S: AsRef<str>>(opts: &[S]) -> Rule {
        let opts: Vec<&str> = opts.iter().map(AsRef::as_ref).collect();
        let value = |flag: &str, default: f64| opts.iter().position(|o| *o == flag).map_or(default, |i| opts[i + 1].parse().unwrap());
        let penalized = ["--sampling", "--diverse-beam-groups", "--diversity-rate", "--match-source-len"];
        Rule {
            lenpen: value("--lenpen", 1.0),
            unkpen: value("--unkpen", 0.0),
            near_ties: !opts.iter().any(|o| penalized.contains(o)),
        }
    }
}

/// Identical hypotheses (tokens, detokenized text, order, count), scores within
/// [`SENTENCE_SCORE`] / [`POSITIONAL_SCORE`]. Hypotheses whose tokens differ are listed in
/// `differing`, for [`settle_near_ties`]; every other difference is a problem.
pub fn compare(want: &BTreeMap<usize, Entry>, got: &BTreeMap<usize, Entry>) -> Compare {
    let mut c = Compare::default();
    if want.len() != got.len() {
        c.problems.push(format!("{} sentences expected, {} printed", want.len(), got.len()));
    }
    for (id, w) in want {
        c.sentences += 1;
        let Some(g) = got.get(id) else {
            c.problems.push(format!("id {id} missing"));
            continue;
        };
        if w.src != g.src {
            c.problems.push(format!("id {id}: S- differs: {:?} vs {:?}", w.src, g.src));
        }
        if w.error != g.error {
            c.problems.push(format!("id {id}: E- differs: {:?} vs {:?}", w.error, g.error));
        }
        if w.hyps.len() != g.hyps.len() {
            c.problems.push(format!("id {id}: {} hypotheses expected, {} printed", w.hyps.len(), g.hyps.len()));
        }
        for (k, (wh, gh)) in w.hyps.iter().zip(&g.hyps).enumerate() {
            c.hyps += 1;
            c.total_lines += 3;
            if wh.h_str != gh.h_str {
                if wh.h_str.split_whitespace().eq(gh.h_str.split_whitespace()) {
                    c.problems.push(format!("id {id} hyp {k}: the same tokens spaced differently: {:?} vs {:?}", wh.h_str, gh.h_str));
                } else {
                    c.differing.push(Differing {
                        id: *id,
                        k,
                        src: g.src.clone().unwrap_or_default(),
                        want: wh.h_str.clone(),
                        want_score: wh.h_score,
                        got: gh.h_str.clone(),
                        got_score: gh.h_score,
                    });
                }
                continue;
            }
            if wh.d_str != gh.d_str {
                c.problems.push(format!("id {id} hyp {k}: D- differs with the same tokens: {:?} vs {:?}", wh.d_str, gh.d_str));
                continue;
            }
            let hd = (wh.h_score - gh.h_score).abs().max((wh.d_score - gh.d_score).abs());
            c.max_h_diff = c.max_h_diff.max(hd);
            if !SENTENCE_SCORE.holds(hd) {
                c.problems.push(format!("id {id} hyp {k}: score {} vs {} (|diff| {hd:e})", wh.h_score, gh.h_score));
            }
            if wh.h_score.to_bits() == gh.h_score.to_bits() {
                c.identical_lines += 2;
            }
            if wh.p.len() != gh.p.len() {
                c.problems.push(format!("id {id} hyp {k}: {} positional scores vs {}", wh.p.len(), gh.p.len()));
                continue;
            }
            let pd = wh.p.iter().zip(&gh.p).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
            c.max_p_diff = c.max_p_diff.max(pd);
            if !POSITIONAL_SCORE.holds(pd) {
                c.problems.push(format!("id {id} hyp {k}: positional scores {:?} vs {:?}", wh.p, gh.p));
            }
            if wh.p == gh.p {
                c.identical_lines += 1;
            }
        }
    }
    c
}

/// Bit-identical results: the same lines but the `W-` timings, in the same order.
pub fn assert_same_bits(want: &str, got: &str, what: &str) {
    let (w, g) = (super::result_lines(want), super::result_lines(got));
    assert!(!w.is_empty(), "{what}: an empty golden");
    let first = w.iter().zip(&g).position(|(a, b)| a != b);
    assert!(first.is_none() && w.len() == g.len(), "{what}: {} lines expected, {} printed; first difference: {:?}", w.len(), g.len(), first.map(|i| (&w[i], &g[i])));
}

/// Beam search's score of each (source, hypothesis) pair of subword tokens, base 2:
/// `(sum(log p) - unkpen * #<unk>) / len^lenpen` with the EOS counted, from
/// `tchseq score --tokenized`. `model` is the model part of the command line
/// (`-m DIR -s src -t tgt ...`).
pub fn force_decoded_scores(model: &[String], pairs: &[(String, String)], rule: &Rule) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pairs.csv");
    super::write_pairs_csv(&path, pairs.iter().map(|(s, t)| (s.as_str(), t.as_str())));
    let out = tchseq().args(["--device", "cpu", "score", "-q", "--tokenized"]).args(model).arg("--input").arg(&path).output().unwrap();
    assert!(out.status.success(), "force-decoding failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut r = csv::Reader::from_reader(out.stdout.as_slice());
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), pairs.len());
    rows.iter()
        .zip(pairs)
        .map(|(row, (_, target))| {
            assert_eq!(&row[6], "", "force-decoding {:?}", &row[1]);
            let logprob: f64 = row[2].parse().unwrap();
            let tokens: f64 = row[3].parse().unwrap();
            let unks = target.split_whitespace().filter(|t| *t == "<unk>").count() as f64;
            (logprob - rule.unkpen * unks) / tokens.powf(rule.lenpen) / std::f64::consts::LN_2
        })
        .collect()
}

/// Keeps in `c.differing` only the hypotheses not proven to be near-ties. A proof: our
/// hypothesis, force-decoded, scores within [`SENTENCE_SCORE`] of fairseq's own score for its
/// hypothesis, and of the score we printed for it. Under a rule without near-ties, none is.
pub fn settle_near_ties(c: &mut Compare, model: &[String], rule: &Rule) {
    if c.differing.is_empty() || !rule.near_ties {
        return;
    }
    let pairs: Vec<(String, String)> = c.differing.iter().map(|d| (d.src.clone(), d.got.clone())).collect();
    let forced = force_decoded_scores(model, &pairs, rule);
    let before = c.differing.len();
    let mut kept = Vec::new();
    for (d, ours) in c.differing.drain(..).zip(forced) {
        let (gap, printed) = ((d.want_score - ours).abs(), (d.got_score - ours).abs());
        // (not logged as drift: a gap between two hypotheses is no measure of the CPU's)
        if gap <= SENTENCE_SCORE.limit && printed <= SENTENCE_SCORE.limit {
            c.near_tie_ids.push(d.id);
            eprintln!(
                "near-tie: id {} hyp {}: fairseq's {:?} scores {} (its golden), ours {:?} {} force-decoded (base 2)",
                d.id, d.k, d.want, d.want_score, d.got, ours
            );
        } else {
            let got = format!("{} (not a near-tie: fairseq's score {}, ours force-decoded {ours}, printed {})", d.got, d.want_score, d.got_score);
            kept.push(Differing { got, ..d });
        }
    }
    c.near_ties += before - kept.len();
    c.differing = kept;
}

/// [`compare`], then [`settle_near_ties`].
pub fn compare_settled(want: &BTreeMap<usize, Entry>, got: &BTreeMap<usize, Entry>, model: &[String], rule: &Rule) -> Compare {
    let mut c = compare(want, got);
    settle_near_ties(&mut c, model, rule);
    c
}

/// The model part of a command line for the bundled model (weights/multi30k.en-de).
pub fn bundled_model_args() -> Vec<String> {
    vec!["-m".to_string(), super::repo("weights/multi30k.en-de").display().to_string()]
}

/// The model part of a command line for a fixture directory with `src`/`tgt` dictionaries.
pub fn fixture_model_args(dir: &Path) -> Vec<String> {
    ["-m", &dir.display().to_string(), "-s", "src", "-t", "tgt"].iter().map(|s| s.to_string()).collect()
}
