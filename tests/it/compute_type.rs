//! `--compute-type float32`, `int8`, `float16` and `bfloat16`: not fairseq's arithmetic. float32
//! is held to fairseq's hypotheses and to scores within 1e-4 of its goldens; int8, float16 and
//! bfloat16 to a BLEU floor against the references (`exact`, the default, is what every parity
//! test checks bit for bit). The Python package's compute types are tested in python/tests.

use std::collections::HashMap;

use tchseq::generate::Hypothesis;
use tchseq::hub::{Batching, LoadOptions, ModelBundle, ModelSpec, TextMode, TranslateOptions, Translation, Translator, Weights};

use crate::util::fairseq_out::{bundled_model_args, compare_settled, parse_fairseq, Rule};
use crate::util::tolerance::FLOAT32_AGAINST_EXACT;
use crate::util::{fixture, repo, set_test_threads, tchseq};

/// The hypotheses (H- lines: tokenized; BPE removed here) and scores of the bundled input, in order.
fn hypotheses(compute_type: &str) -> Vec<(String, f64)> {
    hypotheses_hiding(compute_type, &Hidden::None)
}

/// CPU features hidden from the kernels of a run (`TCHSEQ_CPU_FEATURES_OFF`).
enum Hidden {
    /// As the test process leaves them.
    None,
    Features(&'static str),
}

impl Hidden {
    fn apply(&self, cmd: &mut assert_cmd::Command) {
        if let Hidden::Features(list) = self {
            cmd.env("TCHSEQ_CPU_FEATURES_OFF", list);
        }
    }
}

fn hypotheses_hiding(compute_type: &str, hidden: &Hidden) -> Vec<(String, f64)> {
    let mut cmd = tchseq();
    hidden.apply(&mut cmd);
    let out = cmd
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
    hyps.into_iter().map(|(_, text, score)| (text.replace("@@ ", ""), score)).collect()
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

/// The first `n` lines of the bundled input.
pub(crate) fn bundled_input(n: usize) -> Vec<String> {
    std::fs::read_to_string(fixture("bundled/input.en")).unwrap().lines().take(n).map(str::to_string).collect()
}

/// The references of the bundled input's 40 lines, BPE removed.
fn references() -> Vec<String> {
    let text = std::fs::read_to_string(fixture("bundled/score_reference/test.bpe.de")).unwrap();
    text.lines().take(40).map(|l| l.replace("@@ ", "")).collect()
}

/// fairseq's own hypotheses for the bundled input (its golden, batch 16): tokenized text, BPE
/// removed, in input order.
fn fairseq_hypotheses() -> Vec<String> {
    let golden = parse_fairseq(&std::fs::read_to_string(fixture("bundled/interactive_batch16.txt")).unwrap());
    golden.values().map(|e| e.hyps[0].h_str.replace("@@ ", "")).collect()
}

/// What each fast compute type keeps of fairseq's hypotheses, as measured on an AMD EPYC Zen 4
/// (2026-11-29) with libtorch's native kernels and again under `MKL_CBWR=AVX2
/// ATEN_CPU_CAPABILITY=avx2` (an AVX2-only CPU's kernels): (model, compute type, hypotheses
/// kept, lowest BLEU measured). The count is the lower of the two runs: the kernels around the
/// products move one near-tie on the bundled int8 run (39 native, 38 AVX2) and on untied
/// bfloat16 (70, 69), prenorm float16 (71, 70) and prenorm-fp16 float16 (72, 71); every other
/// count was the same in both. int8's rows are VNNI's (a byte's levels); the AVX2 kernel's are
/// below. The bundled model is beam 5 on its 40 raw-text lines against fairseq's
/// batch-16 golden; a fixture is beam 5 on its 72 inputs against `interactive/beam5.txt`. BLEU
/// is against the references (bundled) and the true targets (fixtures); fairseq's own is 29.17
/// on the bundled lines and 69.58, 68.41, 69.04, 69.58, 68.45, 48.35 on the fixtures. On an
/// Intel Xeon (family 6, model 167; 2026-12-05) the bundled int8 run kept 38 native and 37 under
/// the two variables (BLEU 28.73): there line 39's hypothesis, a run of eleven `F@@` pieces,
/// leaves the beam. The fixtures' counts held.
const MEASURED: [(&str, &str, usize, f64); 21] = [
    ("bundled", "int8", 37, 28.72),
    ("bundled", "bfloat16", 39, 29.03),
    ("bundled", "float16", 39, 28.72),
    ("postnorm", "int8", 69, 68.91),
    ("postnorm", "bfloat16", 67, 69.64),
    ("postnorm", "float16", 71, 69.18),
    ("prenorm", "int8", 68, 68.26),
    ("prenorm", "bfloat16", 71, 68.45),
    ("prenorm", "float16", 70, 68.45),
    ("untied", "int8", 67, 69.50),
    ("untied", "bfloat16", 69, 68.98),
    ("untied", "float16", 72, 69.04),
    ("postnorm-legacy", "int8", 69, 68.91),
    ("postnorm-legacy", "bfloat16", 67, 69.64),
    ("postnorm-legacy", "float16", 71, 69.18),
    ("prenorm-fp16", "int8", 69, 68.21),
    ("prenorm-fp16", "bfloat16", 72, 68.45),
    ("prenorm-fp16", "float16", 71, 68.45),
    ("postnorm-untied-2018", "int8", 69, 47.92),
    ("postnorm-untied-2018", "bfloat16", 68, 48.06),
    ("postnorm-untied-2018", "float16", 72, 48.35),
];

/// [`MEASURED`]'s int8 rows for the AVX2 kernel, whose input rows take seven bits
/// (`kernels/gemm_i8.rs`), measured the same way with AVX-512 hidden (2026-12-05; both runs gave
/// the same counts). The bit costs postnorm and postnorm-legacy 11 of their 69 and
/// postnorm-untied-2018 4, not their BLEU's floor; the others keep one more or one fewer.
const MEASURED_INT8_SEVEN_BITS: [(&str, &str, usize, f64); 7] = [
    ("bundled", "int8", 37, 28.67),
    ("postnorm", "int8", 58, 69.71),
    ("prenorm", "int8", 69, 68.41),
    ("untied", "int8", 68, 68.58),
    ("postnorm-legacy", "int8", 58, 69.71),
    ("prenorm-fp16", "int8", 69, 68.33),
    ("postnorm-untied-2018", "int8", 65, 47.57),
];

/// How far BLEU may fall below its lowest measurement: one more changed sentence than measured,
/// which moves the bundled set's BLEU by up to a point (40 sentences) and a fixture's by up to
/// half a point (72 short ones); the two kernel settings above moved it by 0.08 at most.
fn bleu_margin(model: &str) -> f64 {
    if model == "bundled" { 1.0 } else { 0.5 }
}

/// The best hypothesis of each fixture input and its score under `compute_type` (beam 5,
/// batched).
fn fixture_best(dir: &std::path::Path, input: &std::path::Path, compute_type: &str, hidden: &Hidden) -> Vec<(String, f64)> {
    let args = ["--compute-type", compute_type, "--batch-size", "16", "--buffer-size", "1024", "--beam", "5"];
    let mut cmd = crate::util::translate_fixture_cmd(dir, input, "fairseq", &args);
    hidden.apply(&mut cmd);
    let out = crate::util::stdout_ok(&cmd.output().unwrap());
    parse_fairseq(&out).values().map(|e| (e.hyps[0].h_str.clone(), e.hyps[0].h_score)).collect()
}

/// That `compute_type`'s own arithmetic ran, not exact's: most of the scores moved from exact's.
fn ran_its_own_arithmetic(what: &str, compute_type: &str, ours: &[(String, f64)], exact: &[(String, f64)]) {
    assert_eq!(ours.len(), exact.len(), "{what} {compute_type}");
    let moved = exact.iter().zip(ours).filter(|(e, o)| e.1.to_bits() != o.1.to_bits()).count();
    assert!(moved * 2 > ours.len(), "{what} {compute_type}: only {moved} of {} scores differ from exact's", ours.len());
}

/// `compute_type` keeps at least its measured count of fairseq's hypotheses on the bundled
/// model and every fixture, and its BLEU stays within [`bleu_margin`] of its lowest measurement
/// (`measured`'s rows of that type); and its own arithmetic ran on each (most scores moved from
/// exact's).
fn holds_to_its_measurement(compute_type: &str, measured: &[(&str, &str, usize, f64)], hidden: &Hidden) {
    let m = crate::util::json("tests/fixtures/models/manifest.json");
    let input = repo(m["inputs"]["src"].as_str().unwrap());
    let targets: Vec<String> = std::fs::read_to_string(repo(m["inputs"]["tgt"].as_str().unwrap())).unwrap().lines().map(str::to_string).collect();
    let mut checked = 0;
    for (model, ct, kept, measured_bleu) in measured.iter().filter(|r| r.1 == compute_type) {
        let (fairseq, ours, refs): (Vec<String>, Vec<String>, Vec<String>) = if *model == "bundled" {
            let ours = hypotheses_hiding(ct, hidden);
            ran_its_own_arithmetic(model, ct, &ours, &hypotheses("exact"));
            (fairseq_hypotheses(), ours.into_iter().map(|(t, _)| t).collect(), references())
        } else {
            let dir = repo(m["fixtures"].as_array().unwrap().iter().find(|f| f["name"] == *model).unwrap()["dir"].as_str().unwrap());
            let golden = parse_fairseq(&std::fs::read_to_string(dir.join("interactive/beam5.txt")).unwrap());
            let ours = fixture_best(&dir, &input, ct, hidden);
            ran_its_own_arithmetic(model, ct, &ours, &fixture_best(&dir, &input, "exact", &Hidden::None));
            (golden.values().map(|e| e.hyps[0].h_str.clone()).collect(), ours.into_iter().map(|(t, _)| t).collect(), targets.clone())
        };
        assert_eq!(fairseq.len(), ours.len(), "{model} {ct}");
        let same = fairseq.iter().zip(&ours).filter(|(f, o)| f == o).count();
        let score = bleu(&ours, &refs);
        eprintln!("{model} {ct}: {same} of {} hypotheses fairseq's (measured {kept}), BLEU {score:.2} (measured {measured_bleu:.2})", ours.len());
        assert!(same >= *kept, "{model} {ct}: {same} of {} hypotheses fairseq's, measured {kept}", ours.len());
        let floor = measured_bleu - bleu_margin(model);
        assert!(score >= floor, "{model} {ct}: BLEU {score:.2} under {floor:.2} (measured {measured_bleu:.2})");
        checked += 1;
    }
    assert_eq!(checked, 7, "{compute_type}: the bundled model and six fixtures");
}

/// int8 through this CPU's kernel: VNNI's byte rows, or AVX2's seven-bit ones (a CPU with neither
/// runs libtorch's fbgemm path, held to [`MEASURED`]).
#[test]
fn int8_keeps_its_measured_share_of_fairseq_s_hypotheses() {
    let table: &[_] = if tchseq::kernels::seven_bit_rows_here() == Some(true) { &MEASURED_INT8_SEVEN_BITS } else { &MEASURED };
    holds_to_its_measurement("int8", table, &Hidden::None);
}

#[test]
#[cfg_attr(not(all(tchseq_cpu = "avx512f", tchseq_cpu = "avx512bf16")), ignore = "needs AVX512_BF16")]
fn bfloat16_keeps_its_measured_share_of_fairseq_s_hypotheses() {
    assert!(bfloat16_runs_here(), "built where AVX512_BF16 was found, run where it is not");
    holds_to_its_measurement("bfloat16", &MEASURED, &Hidden::None);
}

#[test]
fn float16_keeps_its_measured_share_of_fairseq_s_hypotheses() {
    holds_to_its_measurement("float16", &MEASURED, &Hidden::None);
}

/// The AVX2 int8 kernel runs on every CPU with AVX2: on one with AVX-512 VNNI, hiding VNNI gives
/// its seven-bit rows, held to their own measurement (elsewhere the test above runs it).
#[test]
#[cfg_attr(not(all(tchseq_cpu = "avx512f", tchseq_cpu = "avx512vnni")), ignore = "needs AVX-512 VNNI to hide")]
fn int8_through_the_avx2_kernel_keeps_its_measured_share() {
    holds_to_its_measurement("int8", &MEASURED_INT8_SEVEN_BITS, &Hidden::Features("avx512vnni avx512f"));
}

#[test]
fn an_unknown_compute_type_is_refused_by_name() {
    let out = tchseq()
        .args(["translate", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .args(["--compute-type", "int4", "A dog."])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for name in ["int4", "exact", "float32", "int8", "float16", "bfloat16"] {
        assert!(err.contains(name), "{name}: {err}");
    }
}

/// Whether `--compute-type bfloat16` runs on this CPU (it needs AVX512_BF16; elsewhere it is
/// refused, which `bfloat16_needs_avx512_bf16_on_the_cpu` checks on every CPU).
fn bfloat16_runs_here() -> bool {
    // the binary asks the same question, under the same `TCHSEQ_CPU_FEATURES_OFF`
    tchseq::kernels::compute_type::missing_cpu_instructions(tchseq::config::ComputeType::BFloat16).is_none()
}

/// Whether bfloat16 runs on the host's kernel here: AVX512_BF16 and AVX-512F, neither hidden.
fn host_bfloat16_kernel_here() -> bool {
    bfloat16_runs_here() && tchseq::kernels::isa::Isa::detect() == Some(tchseq::kernels::isa::Isa::Avx512)
}

/// The half compute types this CPU runs: float16 always, bfloat16 with AVX512_BF16.
fn half_types() -> Vec<&'static str> {
    if bfloat16_runs_here() { vec!["float16", "bfloat16"] } else { vec!["float16"] }
}

/// Without AVX512_BF16 (here: `TCHSEQ_CPU_FEATURES_OFF` hides it) `--compute-type bfloat16` is a
/// one-line error naming the instructions, in the CLI, the server and the library; `doctor`
/// lists the compute types this CPU runs fast, bfloat16 among them only where it has them.
#[test]
fn bfloat16_needs_avx512_bf16_on_the_cpu() {
    let model = repo("weights/multi30k.en-de");
    let hidden = |args: &[&str]| {
        let mut cmd = tchseq();
        cmd.env("TCHSEQ_CPU_FEATURES_OFF", "avx512bf16").args(args);
        cmd
    };
    let mut translate = hidden(&["translate", "--compute-type", "bfloat16", "-m"]);
    translate.arg(&model).arg("A dog.");
    let line = crate::util::one_line_error(&translate.output().unwrap(), "compute type bfloat16 on the CPU needs AVX512_BF16, which this CPU lacks");
    assert!(line.contains("use float32 or int8"), "{line}");
    let mut serve = hidden(&["serve", "--port", "0", "--compute-type", "bfloat16", "-m"]);
    serve.arg(&model);
    crate::util::one_line_error(&serve.output().unwrap(), "needs AVX512_BF16");
    let fast = |cmd: &mut assert_cmd::Command| -> Vec<String> {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doctor["fast_compute_types"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
    };
    let without = fast(&mut hidden(&["doctor", "--json"]));
    assert!(without.starts_with(&["exact".to_string(), "float32".to_string()]) && !without.contains(&"bfloat16".to_string()), "{without:?}");
    let here = fast(tchseq().args(["doctor", "--json"]));
    assert_eq!(here.contains(&"bfloat16".to_string()), bfloat16_runs_here(), "{here:?}");
    if !bfloat16_runs_here() {
        let mut cmd = tchseq();
        cmd.args(["translate", "--compute-type", "bfloat16", "-m"]).arg(&model).arg("A dog.");
        crate::util::one_line_error(&cmd.output().unwrap(), "needs AVX512_BF16");
    }
}

/// `--compute-type float16` loads the weights halved; a Translator that loaded them in fp32
/// halves them in `set_compute_type`. Both must compute the same
/// bits, on every fixture (tied and untied embeddings, a checkpoint stored in fp16, the 2018
/// layout) and the bundled model.
#[test]
fn a_model_halved_after_loading_computes_what_a_model_loaded_halved_does() {
    let manifest = crate::util::json("tests/fixtures/models/manifest.json");
    let input = repo(manifest["inputs"]["src"].as_str().unwrap());
    let lines: Vec<String> = std::fs::read_to_string(&input).unwrap().lines().take(8).map(str::to_string).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let mut models = vec![("weights/multi30k.en-de".to_string(), None, TextMode::Raw)];
    for f in manifest["fixtures"].as_array().unwrap() {
        models.push((f["dir"].as_str().unwrap().to_string(), Some(("src", "tgt")), TextMode::Tokenized));
    }
    for compute_type in half_types() {
        for (model, lang, text) in &models {
            let halved = hub_hypotheses(model, *lang, *text, &lines, compute_type);
            let spec = ModelSpec {
                model: Some(repo(model)),
                source_lang: lang.map(|l| l.0.to_string()),
                target_lang: lang.map(|l| l.1.to_string()),
                ..Default::default()
            };
            let kind = if compute_type == "float16" { tch::Kind::Half } else { tch::Kind::BFloat16 };
            let options = LoadOptions { weights: Weights::Load { device: tch::Device::Cpu, kind, replay_init: false }, ..LoadOptions::fp32(tch::Device::Cpu) };
            let mut translator = Translator::new(ModelBundle::load(&spec, &options).unwrap(), tch::Device::Cpu, *text).unwrap();
            assert_eq!(translator.models[0].kind, kind);
            translator.set_compute_type(compute_type.parse().unwrap()).unwrap();
            let options = TranslateOptions { nbest: 5, ..Default::default() };
            let (generator, batching) = translator.search(&options, Batching::new(None, Some(8), 1).unwrap()).unwrap();
            let loaded: Vec<Hypothesis> = translator
                .translate(&generator, &lines, &batching, false)
                .unwrap()
                .into_iter()
                .flat_map(|t| match t {
                    Translation::Done { hypos, .. } => hypos,
                    t => panic!("not translated: {:?}", t.error()),
                })
                .collect();
            assert_eq!(halved.len(), loaded.len(), "{compute_type} {model}");
            for (a, b) in halved.iter().zip(&loaded) {
                assert_eq!((&a.tokens, a.score.to_bits()), (&b.tokens, b.score.to_bits()), "{compute_type} {model}");
            }
        }
    }
}

/// `--dtype` and a compute type that decides the dtype itself must agree. The contradiction is a
/// usage error, so it is the answer on every CPU, before what the CPU lacks: with AVX512_BF16
/// and without it (hidden here by `TCHSEQ_CPU_FEATURES_OFF`), `--dtype fp16 --compute-type
/// bfloat16` names the two flags, not the instructions.
#[test]
fn a_dtype_that_contradicts_the_compute_type_is_one_error() {
    for hidden in ["", "avx512bf16"] {
        for (dtype, compute_type) in [("fp16", "bfloat16"), ("bf16", "float16"), ("fp16", "float32"), ("bf16", "int8")] {
            let mut cmd = tchseq();
            cmd.env("TCHSEQ_CPU_FEATURES_OFF", hidden);
            cmd.args(["translate", "-m"]).arg(repo("weights/multi30k.en-de")).args(["--dtype", dtype, "--compute-type", compute_type, "A dog."]);
            crate::util::one_line_error(&cmd.output().unwrap(), &format!("--dtype {dtype} and --compute-type {compute_type} disagree"));
        }
    }
    for (dtype, compute_type) in [("fp16", "float16"), ("bf16", "bfloat16"), ("fp16", "exact")] {
        if compute_type == "bfloat16" && !bfloat16_runs_here() {
            continue;
        }
        let mut cmd = tchseq();
        cmd.args(["translate", "-m"]).arg(repo("weights/multi30k.en-de")).args(["--dtype", dtype, "--compute-type", compute_type, "A dog."]);
        crate::util::run_ok(&mut cmd);
    }
}

/// The bundled model's raw-text golden (fairseq-interactive, batch 16) under float32: the same
/// sources and hypotheses, every score within the cross-CPU tolerance (a differing hypothesis must
/// be a proven near-tie, as on another CPU).
#[test]
fn float32_gives_fairseq_s_hypotheses_on_the_bundled_model() {
    let out = tchseq()
        .args(["translate", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .args(["--compute-type", "float32", "--format", "fairseq", "--batch-size", "16", "--buffer-size", "1024", "--input"])
        .arg(fixture("bundled/input.en"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let golden = std::fs::read_to_string(fixture("bundled/interactive_batch16.txt")).unwrap();
    let model = bundled_model_args();
    let c = compare_settled(&parse_fairseq(&golden), &parse_fairseq(&String::from_utf8_lossy(&out.stdout)), &model, &Rule::beam(1.0));
    eprintln!("float32: {} hypotheses, {} near-ties, max |dH| {:.1e}, max |dP| {:.1e}", c.hyps, c.near_ties, c.max_h_diff, c.max_p_diff);
    assert_eq!(c.hyps, 40);
    c.assert_ok("float32");
}

/// A model's directory, its (source, target) pair where it needs one, its text mode and its lines.
pub(crate) type Run<'a> = (String, Option<(&'a str, &'a str)>, TextMode, Vec<String>);

/// The bundled model on `bundled`, every fixture on the fixtures' first `fixture_lines` inputs, and
/// each multilingual fixture in `multilingual` on the first `multilingual_lines` of its input.
pub(crate) fn runs<'a>(bundled: Vec<String>, fixture_lines: usize, multilingual: &[(&str, (&'a str, &'a str))], multilingual_lines: usize) -> Vec<Run<'a>> {
    let mut runs: Vec<Run> = vec![("weights/multi30k.en-de".into(), None, TextMode::Raw, bundled)];
    let manifest = crate::util::json("tests/fixtures/models/manifest.json");
    let inputs = std::fs::read_to_string(repo(manifest["inputs"]["src"].as_str().unwrap())).unwrap();
    let lines: Vec<String> = inputs.lines().take(fixture_lines).map(str::to_string).collect();
    assert_eq!(lines.len(), fixture_lines);
    for f in manifest["fixtures"].as_array().unwrap() {
        runs.push((f["dir"].as_str().unwrap().to_string(), Some(("src", "tgt")), TextMode::Tokenized, lines.clone()));
    }
    let inputs = std::fs::read_to_string(fixture("multilingual/input.en")).unwrap();
    let lines: Vec<String> = inputs.lines().take(multilingual_lines).map(str::to_string).collect();
    assert_eq!(lines.len(), multilingual_lines);
    for &(dir, pair) in multilingual {
        runs.push((format!("tests/fixtures/multilingual/{dir}"), Some(pair), TextMode::Raw, lines.clone()));
    }
    runs
}

fn hub_hypotheses(model: &str, lang: Option<(&str, &str)>, text: TextMode, lines: &[&str], compute_type: &str) -> Vec<Hypothesis> {
    hub_run(model, lang, text, lines, compute_type, true).0
}

fn hub_run(model: &str, lang: Option<(&str, &str)>, text: TextMode, lines: &[&str], compute_type: &str, host_step: bool) -> (Vec<Hypothesis>, usize) {
    let (hypos, steps, _) = hub_run_cached(model, lang, text, lines, compute_type, host_step, false);
    (hypos, steps)
}

/// The hypotheses, how many decoder steps ran on host buffers (with `fixed_kv_cache`: with a
/// fixed-capacity cache) and how many at their row bucket's shape; `host_step` false keeps every
/// step on the tensor path, `fixed_kv_cache` its self-attentions' keys and values at a fixed
/// capacity.
pub(crate) fn hub_run_cached(
    model: &str,
    lang: Option<(&str, &str)>,
    text: TextMode,
    lines: &[&str],
    compute_type: &str,
    host_step: bool,
    fixed_kv_cache: bool,
) -> (Vec<Hypothesis>, usize, usize) {
    set_test_threads();
    let spec = ModelSpec {
        model: Some(repo(model)),
        source_lang: lang.map(|l| l.0.to_string()),
        target_lang: lang.map(|l| l.1.to_string()),
        ..Default::default()
    };
    let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu)).unwrap();
    let mut translator = Translator::new(bundle, tch::Device::Cpu, text).unwrap();
    translator.set_compute_type(compute_type.parse().unwrap()).unwrap();
    translator.models[0].decoder.host_step = host_step;
    translator.models[0].decoder.fixed_kv_cache = fixed_kv_cache;
    let options = TranslateOptions { nbest: 5, ..Default::default() };
    let batching = Batching::new(None, Some(8), 1).unwrap();
    let (generator, batching) = translator.search(&options, batching).unwrap();
    let done = translator.translate(&generator, lines, &batching, false).unwrap();
    let hypos = done
        .into_iter()
        .flat_map(|t| match t {
            Translation::Done { hypos, .. } => hypos,
            t => panic!("not translated: {:?}", t.error()),
        })
        .collect();
    let decoder = &translator.models[0].decoder;
    (hypos, if fixed_kv_cache { decoder.fixed_steps() } else { decoder.host_steps() }, decoder.fixed_shape_steps())
}

/// The fast compute types' decoder step on host buffers (`model/host_step.rs`) gives the tensor
/// path's bits: the same hypotheses, scores and positional scores, bit for bit, on the bundled
/// model, every fixture (pre- and post-norm, tied and untied) and the multilingual models (BART's
/// beamable encoder attention), at batch 8 with nbest 5 so that batches shrink and beams reorder.
#[test]
fn the_host_step_gives_the_tensor_path_s_bits() {
    let runs = runs(bundled_input(10), 10, &[("bart", ("en", "de")), ("m2m", ("en", "de"))], 6);
    // without the host kernels (`TCHSEQ_CPU_FEATURES_OFF` may hide them) every step is libtorch's
    let host_kernels = tchseq::kernels::isa::Isa::detect().is_some();
    let mut compute_types = vec!["float32", "int8"];
    if host_bfloat16_kernel_here() {
        compute_types.push("bfloat16");
    }
    for compute_type in compute_types {
        let mut on_host = Vec::new();
        for (model, lang, text, lines) in &runs {
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let (tensor_path, none) = hub_run(model, *lang, *text, &lines, compute_type, false);
            assert_eq!(none, 0, "{compute_type} {model}: a host step ran with host_step off");
            let (host, steps) = hub_run(model, *lang, *text, &lines, compute_type, true);
            let bits = |h: &Hypothesis| (h.tokens.clone(), h.score.to_bits(), h.positional_scores.iter().map(|p| p.to_bits()).collect::<Vec<_>>());
            assert_eq!(host.len(), tensor_path.len(), "{compute_type} {model}");
            for (a, b) in host.iter().zip(&tensor_path) {
                assert_eq!(bits(a), bits(b), "{compute_type} {model}: the host step against the tensor path");
            }
            on_host.push(format!("{model}: {steps}"));
            assert!(steps > 0 || !host_kernels, "{compute_type} {model}: no step ran on the host");
        }
        eprintln!("{compute_type}: host steps {on_host:?}");
    }
}

/// The fixtures' goldens under float32: fairseq-interactive's hypotheses for beam 5 and for
/// beam 4 + lenpen 0.6 + nbest 3, batched, scores within the cross-CPU tolerance.
#[test]
fn float32_gives_fairseq_s_hypotheses_on_every_fixture() {
    let m = crate::util::json("tests/fixtures/models/manifest.json");
    let input = repo(m["inputs"]["src"].as_str().unwrap());
    let mut tally = crate::util::fairseq_out::Tally::default();
    for fx in m["fixtures"].as_array().unwrap() {
        let dir = repo(fx["dir"].as_str().unwrap());
        for set in ["beam5", "beam4_lenpen0.6_nbest3"] {
            let opts = crate::util::strings(&m["option_sets"][set]);
            let golden = std::fs::read_to_string(dir.join(format!("interactive/{set}.txt"))).unwrap();
            let out = crate::util::run_ok(
                tchseq()
                    .args(["translate", "--compute-type", "float32", "--tokenizer", "none", "--bpe", "none", "--format", "fairseq"])
                    .args(["-s", "src", "-t", "tgt", "--batch-size", "16", "--buffer-size", "1024", "-m"])
                    .arg(&dir)
                    .arg("--input")
                    .arg(&input)
                    .args(&opts),
            );
            let model = crate::util::fairseq_out::fixture_model_args(&dir);
            let c = compare_settled(&parse_fairseq(&golden), &parse_fairseq(&out), &model, &Rule::of(&opts));
            c.assert_ok(&format!("float32 {}/{set}", fx["name"]));
            tally.add(&c);
        }
    }
    assert_eq!(tally.hyps, 6 * (72 + 216));
    tally.assert_within_cap("float32 on the fixtures");
}

/// Every model kind of the fixtures and the bundled model, float32 against exact (which the other
/// tests hold to fairseq) at full precision: the same 5 hypotheses of every sentence (two that
/// trade places must be tied within 1e-4), scores within 1e-4, and not the same bits (the fused
/// path really ran).
#[test]
fn float32_against_exact_moves_scores_by_less_than_1e_4_and_keeps_every_hypothesis() {
    let bundled = ["A man in a blue shirt is riding a bike.", "Two dogs are playing in the snow.", "A little girl is eating an ice cream."];
    // the BART family (beamable encoder attention) and the multilingual tasks, on raw text
    let multilingual = [("bart", ("en", "de")), ("mbart-ft", ("en_XX", "de_DE")), ("m2m", ("en", "de")), ("mbart50", ("en_XX", "de_DE"))];
    let runs = runs(bundled.iter().map(|s| s.to_string()).collect(), 12, &multilingual, 8);
    let (mut moved, mut near_ties) = (0, 0);
    for (model, lang, text, lines) in &runs {
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let exact = hub_hypotheses(model, *lang, *text, &lines, "exact");
        let float32 = hub_hypotheses(model, *lang, *text, &lines, "float32");
        assert_eq!(exact.len(), float32.len(), "{model}");
        for (e, f) in exact.iter().zip(&float32) {
            FLOAT32_AGAINST_EXACT.assert(f64::from(f.score), f64::from(e.score), &format!("{model}: hypothesis score"));
            if e.tokens != f.tokens {
                near_ties += 1;
                continue;
            }
            for (pe, pf) in e.positional_scores.iter().zip(&f.positional_scores) {
                FLOAT32_AGAINST_EXACT.assert(f64::from(*pf), f64::from(*pe), &format!("{model}: positional score"));
            }
            moved += usize::from(e.score.to_bits() != f.score.to_bits());
        }
    }
    eprintln!("float32: {moved} scores moved, {near_ties} near-ties, across {} models", runs.len());
    assert!(near_ties <= 2, "{near_ties} hypotheses changed places");
    assert!(moved > 0, "float32 gave exact's bits: the fused path did not run");
}

/// float32, int8 and bfloat16 (where the CPU runs it) hold each weight once: every linear
/// layer's libtorch weight is let go of once packed (or quantized), `named_tensors` no longer
/// holds them, and the model still translates as exact does (float32) or close to it (int8,
/// bfloat16, whose every linear layer computes from bfloat16 panels).
#[test]
fn float32_int8_and_bfloat16_hold_each_weight_once() {
    set_test_threads();
    let has_host_kernels = tchseq::kernels::isa::Isa::detect().is_some();
    assert!(has_host_kernels, "this CPU lacks AVX2 or FMA, which float32's host kernels need");
    let lines = ["A man in a blue shirt is riding a bike.", "Two dogs are playing in the snow.", "A little girl is eating an ice cream."];
    let translate = |compute_type: &str| {
        let spec = ModelSpec { model: Some(repo("weights/multi30k.en-de")), ..Default::default() };
        let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu)).unwrap();
        let mut translator = Translator::new(bundle, tch::Device::Cpu, TextMode::Raw).unwrap();
        translator.set_compute_type(compute_type.parse().unwrap()).unwrap();
        let (generator, batching) = translator.search(&TranslateOptions::default(), Batching::new(None, Some(8), 1).unwrap()).unwrap();
        let done = translator.translate(&generator, &lines, &batching, false).unwrap();
        let texts: Vec<String> = done
            .into_iter()
            .map(|t| match t {
                Translation::Done { hypos, .. } => translator.hypothesis_text(&hypos[0]).unwrap().text,
                t => panic!("not translated: {:?}", t.error()),
            })
            .collect();
        (translator, texts)
    };
    let (_, exact) = translate("exact");
    let mut compute_types = vec!["float32", "int8"];
    // without the host's bfloat16 kernel, bfloat16 runs libtorch's ops
    if host_bfloat16_kernel_here() {
        compute_types.push("bfloat16");
    }
    for compute_type in compute_types {
        let (translator, texts) = translate(compute_type);
        let model = &translator.models[0];
        assert!(model.named_tensors.is_empty(), "{compute_type}: named_tensors still holds the weights");
        let mut linears = vec![&model.decoder.output_projection];
        for l in &model.encoder.layers {
            let a = &l.self_attn;
            linears.extend([&a.q_proj, &a.k_proj, &a.v_proj, &a.out_proj, &l.fc1, &l.fc2]);
            assert!(!l.in_proj_weight.defined(), "{compute_type}: the encoder's fast-path copy");
        }
        for l in &model.decoder.layers {
            for a in std::iter::once(&l.self_attn).chain(l.encoder_attn.as_ref()) {
                linears.extend([&a.q_proj, &a.k_proj, &a.v_proj, &a.out_proj]);
            }
            linears.extend([&l.fc1, &l.fc2]);
        }
        // the bundled output projection is small enough to be packed: its embeddings then look
        // their rows up in the panels, and no linear layer keeps libtorch's copy; int8 on the
        // host's kernel (AVX2, or AVX-512 VNNI) quantizes the projection, and the embeddings look
        // their rows up in its int8 columns
        let in_bfloat16 = linears.iter().filter(|l| l.is_bfloat16()).count();
        assert_eq!(in_bfloat16, if compute_type == "bfloat16" { linears.len() } else { 0 }, "{compute_type}: layers on bfloat16 panels");
        let held = linears.iter().filter(|l| l.weight.defined()).count();
        assert_eq!(held, 0, "{compute_type}: {held} of {} linear layers still hold their libtorch weight", linears.len());
        assert_eq!(model.decoder.output_projection.is_int8(), compute_type == "int8", "{compute_type}: the output projection in int8");
        for embedding in [&model.encoder.embedding.embed_tokens, &model.decoder.embedding.embed_tokens] {
            assert!(!embedding.weight.defined(), "{compute_type}: the tied table is held twice");
            let mut row = vec![0f32; embedding.embedding_dim() as usize];
            assert!(embedding.row_into(5, &mut row) && row.iter().any(|v| *v != 0.0), "{compute_type}: no row 5 for the embeddings");
        }
        if compute_type == "float32" {
            assert_eq!(texts, exact, "float32 translates as exact does");
        } else {
            assert!(texts.iter().zip(&exact).filter(|(a, b)| a == b).count() >= 2, "{compute_type}: {texts:?} against {exact:?}");
        }
    }
}

/// int8 quantizes untied embedding tables too (the `untied` fixture: its own tables for source
/// and target, neither tied to the output projection): none is held in f32 any more, and each
/// row it looks up is the f32 row within half its quantization step, `max |row| / 254`.
#[test]
fn int8_looks_untied_embeddings_up_in_int8_within_half_a_step() {
    set_test_threads();
    assert!(tchseq::kernels::isa::Isa::detect().is_some(), "this CPU lacks AVX2 or FMA, which int8's host kernel needs");
    let load = |compute_type: &str| {
        let spec = ModelSpec { model: Some(fixture("models/untied")), source_lang: Some("src".into()), target_lang: Some("tgt".into()), ..Default::default() };
        let bundle = ModelBundle::load(&spec, &LoadOptions::computing(tch::Device::Cpu, compute_type.parse().unwrap())).unwrap();
        Translator::new(bundle, tch::Device::Cpu, TextMode::Raw).unwrap()
    };
    let (exact, int8) = (load("exact"), load("int8"));
    let (e, q) = (&exact.models[0], &int8.models[0]);
    assert_ne!(e.encoder.embedding.embed_tokens.weight.data_ptr(), e.decoder.embedding.embed_tokens.weight.data_ptr(), "the fixture's tables are tied");
    for (name, f32_table, int8_table) in [
        ("encoder", &e.encoder.embedding.embed_tokens, &q.encoder.embedding.embed_tokens),
        ("decoder", &e.decoder.embedding.embed_tokens, &q.decoder.embedding.embed_tokens),
    ] {
        assert!(!int8_table.weight.defined(), "{name}: int8 still holds the f32 table");
        let dim = f32_table.embedding_dim() as usize;
        let (mut want, mut got) = (vec![0f32; dim], vec![0f32; dim]);
        let mut moved = 0;
        for id in 0..f32_table.num_embeddings() {
            assert!(f32_table.row_into(id, &mut want) && int8_table.row_into(id, &mut got), "{name}: row {id}");
            let half_step = want.iter().fold(0f32, |a, v| a.max(v.abs())) / 254.0 * 1.0001;
            for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                assert!((w - g).abs() <= half_step, "{name} [{id}, {i}]: {g} for {w}");
                moved += usize::from(w != g);
            }
        }
        assert!(moved > 0, "{name}: every value the same: the table was not quantized");
    }
}
