//! The decoder step replayed as a CUDA graph (`model/step_graphs.rs`), where no GPU is: every
//! capture fails, and the step's results are the eager step's. (`gpu/check.sh` compares the
//! replayed step with the eager one on a GPU.)

use tchseq::generate::Hypothesis;
use tchseq::hub::{Batching, LoadOptions, ModelBundle, ModelSpec, TextMode, TranslateOptions, Translation, Translator};
use tchseq::model::{cuda_graph_factory, GraphStats, StepGraphs};

use crate::compute_type::bundled_input;
use crate::util::{repo, set_test_threads};

/// The bundled model in float32 on the tensor path with the fixed-capacity cache, at batch 8
/// with nbest 5; with `graphs`, its fixed-shape steps go through [`StepGraphs`] on the CPU.
fn translate(lines: &[String], graphs: bool) -> (Vec<Hypothesis>, usize, Option<GraphStats>) {
    set_test_threads();
    let spec = ModelSpec { model: Some(repo("weights/multi30k.en-de")), ..Default::default() };
    let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu)).unwrap();
    let mut translator = Translator::new(bundle, tch::Device::Cpu, TextMode::Raw).unwrap();
    translator.set_compute_type("float32".parse().unwrap()).unwrap();
    let decoder = &mut translator.models[0].decoder;
    decoder.host_step = false;
    decoder.fixed_kv_cache = true;
    decoder.cuda_graphs = graphs.then(|| StepGraphs::new(cuda_graph_factory));
    let options = TranslateOptions { nbest: 5, ..Default::default() };
    let batching = Batching::new(None, Some(8), 1).unwrap();
    let (generator, batching) = translator.search(&options, batching).unwrap();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let done = translator.translate(&generator, &lines, &batching, false).unwrap();
    let hypos = done
        .into_iter()
        .flat_map(|t| match t {
            Translation::Done { hypos, .. } => hypos,
            t => panic!("not translated: {:?}", t.error()),
        })
        .collect();
    let decoder = &translator.models[0].decoder;
    (hypos, decoder.fixed_steps(), decoder.cuda_graphs.as_ref().map(StepGraphs::stats))
}

/// Through the whole beam search (batches shrinking across row buckets, beams reordering), the
/// steps that reach the graphs and find no CUDA to capture with give the eager step's bits: the
/// same hypotheses, scores and positional scores, and the same number of steps.
#[test]
fn without_cuda_the_replayed_step_falls_back_to_the_eager_step_s_bits() {
    let lines = bundled_input(16);
    let (eager, eager_steps, none) = translate(&lines, false);
    assert!(none.is_none());
    let (graphed, steps, stats) = translate(&lines, true);
    let stats = stats.unwrap();
    assert_eq!(steps, eager_steps);
    assert!(stats.eager_steps > 0 && stats.failed_buckets > 0, "{stats:?}: no step reached the graphs");
    assert_eq!((stats.captures, stats.replays), (0, 0));
    // the first step of each batch fills the encoder attentions' keys: not a graph step
    assert!(stats.eager_steps < steps, "{stats:?} of {steps}");
    assert_eq!(graphed.len(), eager.len());
    assert!(!eager.is_empty());
    for (a, b) in graphed.iter().zip(&eager) {
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.score.to_bits(), b.score.to_bits());
        assert_eq!(a.positional_scores, b.positional_scores);
    }
}

/// `TCHSEQ_CUDA_GRAPH=1` reaches `translate`, which says in one line why the step runs eagerly
/// on the CPU, and prints what it prints without.
#[test]
fn the_setting_from_the_environment_is_refused_in_one_line_on_the_cpu() {
    let run = |graph: Option<&str>| {
        let mut cmd = crate::util::tchseq();
        cmd.args(["translate", "--compute-type", "float32", "--format", "fairseq", "--batch-size", "4", "-m"])
            .arg(repo("weights/multi30k.en-de"))
            .arg("--input")
            .arg(crate::util::fixture("bundled/input.en"))
            .env("TCHSEQ_KV_CACHE", "fixed")
            .env_remove("TCHSEQ_CUDA_GRAPH");
        if let Some(g) = graph {
            cmd.env("TCHSEQ_CUDA_GRAPH", g);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{graph:?}: {}", String::from_utf8_lossy(&out.stderr));
        // every line but the timings (W-)
        let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.starts_with("W-")).map(str::to_string).collect();
        (lines, String::from_utf8(out.stderr).unwrap())
    };
    let (eager, stderr) = run(None);
    assert!(eager.iter().filter(|l| l.starts_with("H-")).count() >= 40, "{eager:?}");
    assert!(!stderr.contains("TCHSEQ_CUDA_GRAPH"), "{stderr}");
    let (graphed, stderr) = run(Some("1"));
    assert_eq!(graphed, eager);
    let refusals: Vec<&str> = stderr.lines().filter(|l| l.contains("TCHSEQ_CUDA_GRAPH=1: no CUDA device")).collect();
    assert_eq!(refusals.len(), 1, "{stderr}");
}
