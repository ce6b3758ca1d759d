#!/usr/bin/env python3
"""Hand-made mutants of src/: each must make `cargo test --release` fail (`make mutants`).

For each mutant: the one-line change is applied to its file (the text must occur exactly once),
`cargo test --release` runs the tests named beside it (those expected to catch it: the lib's unit
tests and the integration binary with test-name filters), and the file is restored. A mutant that
no test fails is a hole in the suite. Results go to stdout as a Markdown table
(docs/testing.md keeps the last run's).

Usage: python3 tests/mutants.py [NAME ...]    (all mutants by default; ~2 min each on 2 cores)
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, what it breaks, file, old text, new text, cargo test arguments (after --release)
MUTANTS = [
    ("detokenizer", "Moses detokenizer: `.` no longer attaches to the word before it",
     "src/text/moses/detokenizer.rs",
     '} else if all_chars(token, |c| ",.?!:;\\\\%}])".contains(c)) {',
     '} else if all_chars(token, |c| ",?!:;\\\\%}])".contains(c)) {',
     ["--test", "it", "--", "bundled::raw_text", "text::"]),
    ("beam-tie-break", "beam top-k: tied candidates ordered on the host (earlier index first), not by libtorch's topk as in fairseq",
     "src/generate/beam_topk.rs",
     "best.values.windows(2).any(|w| w[0] <= w[1])",
     "best.values.windows(2).any(|w| w[0] < w[1])",
     ["--lib", "--", "beam_topk"]),
    ("beam-candidate-order", "the beam's next hypotheses taken from the worst candidates first",
     "src/generate/sequence_generator.rs",
     "let cand_offsets = Tensor::f_arange(cand_size, i64opts)?;",
     "let cand_offsets = Tensor::f_arange(cand_size, i64opts)?.f_flip([0])?;",
     ["--test", "it", "--", "translate::every_fixture_option_set", "bundled::raw_text"]),
    ("lenpen-off-by-one", "length penalty over step + 2 tokens instead of step + 1",
     "src/generate/sequence_generator.rs",
     "let denom = ((step + 1) as f64).powf(self.cfg.len_penalty);",
     "let denom = ((step + 2) as f64).powf(self.cfg.len_penalty);",
     ["--test", "it", "--", "translate::every_fixture_option_set", "bundled::raw_text"]),
    ("dropped-layer-norm", "the decoder's final layer norm skipped",
     "src/model/decoder.rs",
     "Some(ln) => ln.forward(features)?,",
     "Some(_) => features.shallow_clone(),",
     ["--test", "it", "--", "translate::every_fixture_option_set", "verify::"]),
    ("wrong-eos", "the decoder starts from <pad> instead of </s>",
     "src/generate/sequence_generator.rs",
     "let _ = tokens.f_select(1, 0)?.f_fill_(bos_token.unwrap_or(eos))?;",
     "let _ = tokens.f_select(1, 0)?.f_fill_(bos_token.unwrap_or(pad))?;",
     ["--test", "it", "--", "translate::every_fixture_option_set", "bundled::raw_text"]),
    ("attention-mask-off-by-one", "the encoder's padding mask shifted one position",
     "src/model/encoder.rs",
     "let encoder_padding_mask = src_tokens.f_eq(self.padding_idx)?;",
     "let encoder_padding_mask = src_tokens.f_eq(self.padding_idx)?.f_roll([1], [1])?;",
     ["--test", "it", "--", "translate::every_fixture_option_set", "verify::"]),
    ("layer-norm-eps", "LayerNorm eps 1.1e-5 instead of 1e-5 (moves scores by about 1e-7..1e-6)",
     "src/model/nn.rs",
     "pub const EPS: f64 = 1e-5;",
     "pub const EPS: f64 = 1.1e-5;",
     ["--test", "it", "--", "reproducible::"]),
    # batching limits
    ("batching-drops-long", "a sentence over --max-tokens is dropped instead of getting its own batch",
     "src/generate/batching.rs",
     "            batches.push(vec![indices[pos]]);",
     "            let _ = indices[pos];",
     ["--lib", "--", "batching"]),
    ("batching-limit-off-by-one", "a batch closes one sentence before --batch-size",
     "src/generate/batching.rs",
     "let overflow = over_sentences(new_batch_sentences) || over_tokens(new_batch_num_tokens);",
     "let overflow = over_sentences(new_batch_sentences + 1) || over_tokens(new_batch_num_tokens);",
     ["--lib", "--", "batching"]),
    # sampling
    ("topp-cut", "top-p keeps the words whose cumulative mass is under 0.9 p",
     "src/generate/search.rs",
     "    let mask = cumsum_probs.f_lt(topp)?;",
     "    let mask = cumsum_probs.f_lt(topp * 0.9)?;",
     ["--test", "it", "--", "decoding::top_p"]),
    ("topp-yields-to-topk", "with both given, top-k cuts instead of top-p (fairseq: top-p)",
     "src/generate/search.rs",
     "    let (probs, top_indices) = if topp > 0.0 {",
     "    let (probs, top_indices) = if topp > 0.0 && topk <= 0 {",
     ["--test", "it", "--", "decoding::top_p"]),
    ("topk-off-by-one", "top-k sampling draws from k + 1 words",
     "src/generate/search.rs",
     "lprobs.f_topk(topk, -1, true, true)?",
     "lprobs.f_topk(topk + 1, -1, true, true)?",
     ["--test", "it", "--", "translate::every_fixture_option_set"]),
    # language tokens
    ("lang-token-style", "multilingual language tokens spelled `__en_` instead of `__en__`",
     "src/config/task.rs",
     'LangTokStyle::Multilingual => format!("__{lang}__"),',
     'LangTokStyle::Multilingual => format!("__{lang}_"),',
     ["--test", "it", "--", "multilingual::"]),
    # the text pipeline's edge cases
    ("bpe-trailing-marker", "a `@@` that ends a hypothesis is left in place",
     "src/text/bpe.rs",
     'format!("{x} ").replace("@@ ", "")',
     'format!("{x}").replace("@@ ", "")',
     ["--lib", "--", "bpe"]),
    ("moses-escape", "Moses no longer escapes `&` as `&amp;`",
     "src/text/moses/tokenizer.rs",
     "            '&' => out.push_str(\"&amp;\"),",
     "            '&' => out.push_str(\"&\"),",
     ["--test", "it", "--", "text::"]),
    # the fast kernels
    ("fused-padding-mask", "float32's cached encoder attention lets padded source positions in",
     "src/model/fused.rs",
     "(encoder_out.kind(), m.device()))?.f_masked_fill(m, f64::NEG_INFINITY)?;",
     "(encoder_out.kind(), m.device()))?.f_masked_fill(m, 0.0)?;",
     ["--test", "it", "--", "compute_type::float32_gives_fairseq_s_hypotheses_on_every_fixture"]),
    ("int8-unsigned-range", "int8's unsigned input range tops out at 254",
     "src/kernels/quantize_i8.rs",
     "            Self::Unsigned => (0, 255),",
     "            Self::Unsigned => (0, 254),",
     ["--lib", "--", "kernels::gemm_i8", "kernels::quantize_i8"]),
    ("packing-panel-rows", "a packed panel holds one output column too few",
     "src/kernels/pack.rs",
     "    let end = (first + PANEL).min(out_features);",
     "    let end = (first + PANEL - 1).min(out_features);",
     ["--lib", "--", "kernels::"]),
    # server limits and error codes
    ("server-beam-limit", "the server takes beam 65",
     "src/serve/routes.rs",
     "    if options.beam > MAX_BEAM || options.max_len_b > MAX_LEN_B",
     "    if options.beam > MAX_BEAM + 1 || options.max_len_b > MAX_LEN_B",
     ["--test", "it", "--", "robustness::the_beam_and_length_limits"]),
    ("server-internal-error-code", "a request that met an internal error gets 503 instead of 500",
     "src/serve/routes.rs",
     "        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, DROPPED)",
     "        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, DROPPED)",
     ["--test", "it", "--", "robustness::a_panic_in_the_server"]),
    ("server-health-lies", "/health answers 200 with a model worker gone",
     "src/serve/routes.rs",
     "    if stopped.is_empty() {",
     "    if stopped.is_empty() || !stopped.is_empty() {",
     ["--test", "it", "--", "robustness::a_server_whose_worker"]),
    ("panic-uncaught", "a batch's panic is no longer caught",
     "src/generate/workers.rs",
     "    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {",
     "    match Ok::<_, Box<dyn std::any::Any + Send>>(f()) {",
     ["--test", "it", "--", "robustness::a_panic_in_one_batch"]),
    # resume fingerprints
    ("resume-fingerprint", "the compute type is left out of what --resume compares",
     "src/cli/score/resume.rs",
     '    put("--compute-type", a.compute_type.name().to_string());',
     "    let _ = a.compute_type;",
     ["--test", "it", "--", "robustness::score_resume"]),
    ("resume-format", "the progress file's format name is checked the wrong way round",
     "src/cli/score/sink.rs",
     ".filter(|p: &Progress| p.format == PROGRESS_FORMAT)",
     ".filter(|p: &Progress| p.format != PROGRESS_FORMAT)",
     ["--bin", "tchseq-core", "--", "score"]),
    # the scorer's summary
    ("summary-perplexity", "the summary's corpus perplexity taken from the mean of sentence averages",
     "src/cli/score/sink.rs",
     "            let ppl = (-self.sum_logprob / self.sum_tokens as f64).exp();",
     "            let ppl = (-self.sum_avg_logprob / self.scored as f64).exp();",
     ["--test", "it", "--", "score::the_summary_line"]),
]


def run(name, what, path, old, new, args):
    full = os.path.join(ROOT, path)
    original = open(full, encoding="utf-8").read()
    if original.count(old) != 1:
        return "stale", f"the text to change occurs {original.count(old)} times in {path}"
    try:
        with open(full, "w", encoding="utf-8") as f:
            f.write(original.replace(old, new))
        start = time.time()
        p = subprocess.run(["cargo", "test", "--release", *args], cwd=ROOT, capture_output=True, text=True)
        out = p.stdout + p.stderr
        if "error[E" in out or "could not compile" in out:
            return "no build", out[-2000:]
        failed = [l.split()[1] for l in out.splitlines() if l.startswith("test ") and l.endswith("FAILED")]
        verdict = "caught" if p.returncode != 0 and failed else ("survived" if p.returncode == 0 else "error")
        return verdict, f"{len(failed)} failed ({', '.join(failed[:4])}{', ...' if len(failed) > 4 else ''}) in {time.time() - start:.0f} s"
    finally:
        with open(full, "w", encoding="utf-8") as f:
            f.write(original)


def main():
    wanted = set(sys.argv[1:])
    rows = []
    for m in MUTANTS:
        if wanted and m[0] not in wanted:
            continue
        verdict, detail = run(*m)
        print(f"{m[0]}: {verdict}: {detail}", file=sys.stderr, flush=True)
        rows.append((m[0], m[1], m[2], verdict, detail))
    print("| mutant | change | file | result | tests |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | `{r[2]}` | {r[3]} | {r[4]} |")
    # rebuild what the mutants left behind, so that target/ matches src/ again
    subprocess.run(["cargo", "build", "--release"], cwd=ROOT, capture_output=True)
    sys.exit(0 if rows and all(r[3] == "caught" for r in rows) else 1)


if __name__ == "__main__":
    main()
