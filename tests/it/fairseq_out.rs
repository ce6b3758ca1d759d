//! fairseq-interactive's printed output (`S-`/`H-`/`D-`/`P-`/`E-` lines), parsed and compared
//! with a golden the way the parity contract reads: the same hypotheses, scores within 1e-4.
//!
//! The goldens carry the bits of the CPU that made them. On another CPU a near-tie in the beam
//! can flip, so a hypothesis that differs from the golden is accepted only when it is proven to
//! be one: both are force-decoded by `tchseq score --tokenized`, and their scores (as beam search
//! computes them) must be within 1e-4 of each other.

use std::collections::BTreeMap;
use std::path::Path;

use crate::util::tchseq;

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

/// A hypothesis that differs from the golden's at the same place.
#[derive(Debug, Clone)]
pub struct Differing {
    pub id: usize,
    pub k: usize,
    pub src: String,
    pub want: String,
    pub got: String,
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
    /// Differing hypotheses, not yet proven to be near-ties (see [`settle_near_ties`]).
    pub differing: Vec<Differing>,
    /// Differing hypotheses proven to be near-ties.
    pub near_ties: usize,
}

impl Compare {
    /// Problems, and differing hypotheses not proven to be near-ties.
    pub fn failures(&self) -> Vec<String> {
        let unsettled = self.differing.iter().map(|d| format!("id {} hyp {}: {:?} expected, {:?} printed", d.id, d.k, d.want, d.got));
        self.problems.iter().cloned().chain(unsettled).collect()
    }

    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.differing.is_empty()
    }
}

/// The difference allowed between a score and the golden's, and between the two scores of a
/// near-tie (base 2, as printed).
pub const SCORE_TOL: f64 = 1e-4;

/// Identical hypotheses (strings, order, count), scores within 1e-4. Differing hypotheses are
/// listed in `differing`, for [`settle_near_ties`].
pub fn compare(want: &BTreeMap<usize, Entry>, got: &BTreeMap<usize, Entry>) -> Compare {
    // printed P values have 4 decimals: a difference below 1e-4 may still flip the last digit
    const TOL: f64 = SCORE_TOL + 1e-9;
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
            if wh.h_str != gh.h_str || wh.d_str != gh.d_str {
                c.differing.push(Differing {
                    id: *id,
                    k,
                    src: g.src.clone().unwrap_or_default(),
                    want: wh.h_str.clone(),
                    got: gh.h_str.clone(),
                });
                continue;
            }
            let hd = (wh.h_score - gh.h_score).abs().max((wh.d_score - gh.d_score).abs());
            c.max_h_diff = c.max_h_diff.max(hd);
            if !(hd <= TOL) {
                c.problems.push(format!("id {id} hyp {k}: score {} vs {}", wh.h_score, gh.h_score));
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
            if !(pd <= TOL) {
                c.problems.push(format!("id {id} hyp {k}: positional scores {:?} vs {:?}", wh.p, gh.p));
            }
            if wh.p == gh.p {
                c.identical_lines += 1;
            }
        }
    }
    c
}

/// Beam search's score of each (source, hypothesis) pair of subword tokens, base 2:
/// `sum(log p) / len^lenpen` with the EOS counted, from `tchseq score --tokenized`.
/// `model` is the model part of the command line (`-m DIR -s src -t tgt ...`).
pub fn force_decoded_scores(model: &[String], pairs: &[(String, String)], lenpen: f64) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pairs.csv");
    let mut w = csv::Writer::from_path(&path).unwrap();
    w.write_record(["source", "target"]).unwrap();
    for (s, t) in pairs {
        w.write_record([s, t]).unwrap();
    }
    w.flush().unwrap();
    let out = tchseq().args(["--device", "cpu", "score", "-q", "--tokenized"]).args(model).arg("--input").arg(&path).output().unwrap();
    assert!(out.status.success(), "force-decoding failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut r = csv::Reader::from_reader(out.stdout.as_slice());
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), pairs.len());
    rows.iter()
        .map(|row| {
            assert_eq!(&row[6], "", "force-decoding {:?}", &row[1]);
            let logprob: f64 = row[2].parse().unwrap();
            let tokens: f64 = row[3].parse().unwrap();
            logprob / tokens.powf(lenpen) / std::f64::consts::LN_2
        })
        .collect()
}

/// Keeps in `c.differing` only the hypotheses whose score, force-decoded, is not within 1e-4 of
/// the golden hypothesis's: a differing hypothesis must be a near-tie.
pub fn settle_near_ties(c: &mut Compare, model: &[String], lenpen: f64) {
    if c.differing.is_empty() {
        return;
    }
    let pairs: Vec<(String, String)> =
        c.differing.iter().flat_map(|d| [(d.src.clone(), d.want.clone()), (d.src.clone(), d.got.clone())]).collect();
    let scores = force_decoded_scores(model, &pairs, lenpen);
    let before = c.differing.len();
    let mut kept = Vec::new();
    for (d, s) in c.differing.drain(..).zip(scores.chunks(2)) {
        let gap = (s[0] - s[1]).abs();
        if gap <= SCORE_TOL {
            eprintln!("near-tie: id {} hyp {}: {:?} (golden) and {:?} score {} and {} (base 2)", d.id, d.k, d.want, d.got, s[0], s[1]);
        } else {
            kept.push(Differing { got: format!("{} (not a near-tie: {} vs {} base 2)", d.got, s[1], s[0]), ..d });
        }
    }
    c.near_ties += before - kept.len();
    c.differing = kept;
}

/// `--lenpen` of a fairseq option list (default 1).
pub fn lenpen_of(opts: &[String]) -> f64 {
    opts.iter().position(|o| o == "--lenpen").map_or(1.0, |i| opts[i + 1].parse().unwrap())
}

/// The model part of a command line for a fixture directory with `src`/`tgt` dictionaries.
pub fn fixture_model_args(dir: &Path) -> Vec<String> {
    ["-m", &dir.display().to_string(), "-s", "src", "-t", "tgt"].iter().map(|s| s.to_string()).collect()
}
