#!/usr/bin/env python3
"""Hand-made mutants of src/: each must make `cargo test` fail (`make mutants`, `make mutants-sample`).

For each mutant: the one-line change is applied to its file (the text must occur exactly once),
`cargo test` runs the tests named beside it (those expected to catch it: the lib's unit tests,
the program's, and the integration binary with test-name filters), and the file is restored, also
on Ctrl-C, SIGTERM or an error. A mutant that no test fails is a hole in the suite. Results go to
stdout as a Markdown table (docs/testing.md keeps the last run's).

Usage: python3 tests/mutants.py [--sample N [--seed S]] [NAME ...]
  NAME ...      these mutants (all by default; ~2-4 min each on 2 cores, mostly the build)
  --sample N    N mutants picked by the seed S (`make mutants-sample`: the commit's hash), the
                same N for the same seed: the first N by sha256(S + name)
  TCHSEQ_CARGO_TEST_FLAGS  the flags before each mutant's arguments (default `--release`)
"""
import argparse
import hashlib
import os
import shlex
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARGO_TEST_FLAGS = shlex.split(os.environ.get("TCHSEQ_CARGO_TEST_FLAGS", "--release"))

# name, what it breaks, file, old text, new text, cargo test arguments (after the flags)
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
    ("beam-topk-nan", "the host top-k's bit mask leaves a NaN unmarked, so a NaN row goes unnoticed",
     "src/generate/beam_topk.rs",
     "let above = _mm256_cmp_ps::<_CMP_NLE_UQ>(x, threshold);",
     "let above = _mm256_cmp_ps::<_CMP_GT_OQ>(x, threshold);",
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
    ("layer-norm-eps-default", "the same LayerNorm eps of 1.1e-5, for the default mode's tests (reproducible:: left out)",
     "src/model/nn.rs",
     "pub const EPS: f64 = 1e-5;",
     "pub const EPS: f64 = 1.1e-5;",
     ["--lib", "--", "model::nn"]),
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
    ("int8-unsigned-range", "int8's seven-bit unsigned input range tops out at 126",
     "src/kernels/quantize_i8.rs",
     "            (Self::Unsigned, Levels::Seven) => (0, 127),",
     "            (Self::Unsigned, Levels::Seven) => (0, 126),",
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
    # the checkpoint readers
    ("pickle-binint-unsigned", "the pickle VM reads BININT as unsigned: -1 becomes 4294967295",
     "src/checkpoint/pickle/vm.rs",
     "                    let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);",
     "                    let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);",
     ["--lib", "--", "checkpoint::pickle"]),
    ("upgrade-in-proj-order", "the encoder fast path's derived in_proj_weight stacks k, q, v instead of q, k, v",
     "src/checkpoint/upgrade.rs",
     "let cat = Tensor::f_cat(&[q, k, v], 0)",
     "let cat = Tensor::f_cat(&[k, q, v], 0)",
     ["--test", "it", "--", "loader::tensor_values_equal_fairseqs_state_dict"]),
    ("hf-encoder-langtok", "an M2M-100 directory's encoder takes the target language's token",
     "src/checkpoint/hf.rs",
     '("encoder_langtok", json!("src")),',
     '("encoder_langtok", json!("tgt")),',
     ["--test", "it", "--", "hf::an_m2m100_directory"]),
    ("ct2-int8-bound", "CTranslate2's int8 storage bound is a quarter step instead of half a step",
     "src/checkpoint/ctranslate2/mod.rs",
     "let step = if self.rounded { 0.5 } else { 1.0 };",
     "let step = if self.rounded { 0.25 } else { 1.0 };",
     ["--lib", "--", "checkpoint::ctranslate2::tests::int8"]),
    # verify's verdict
    ("verify-depth-encoder-out", "verify's derived bound counts encoder_out one layer shallower",
     "src/cli/verify/tolerance.rs",
     '"encoder_out" => encoder,',
     '"encoder_out" => encoder_layers,',
     ["--bin", "tchseq-core", "--", "cli::verify"]),
    ("verify-rescale-either", "verify fails a rescale that is large or significant, not only one that is both",
     "src/cli/verify/tolerance.rs",
     "s.abs() > self.multiple * self.eps && standard_errors > self.standard_errors",
     "s.abs() > self.multiple * self.eps || standard_errors > self.standard_errors",
     ["--bin", "tchseq-core", "--", "cli::verify"]),
    # the model
    ("attention-scaling", "fairseq's attention scales q by head_dim^-0.499 instead of head_dim^-0.5",
     "src/model/attention.rs",
     "let scaling = (head_dim as f64).powf(-0.5);",
     "let scaling = (head_dim as f64).powf(-0.499);",
     ["--test", "it", "--", "verify::every_fixture_golden_passes_verify"]),
    ("sinusoid-denominator", "sinusoidal frequencies over half_dim instead of fairseq's half_dim - 1",
     "src/config/sinusoid.rs",
     "let scale = 10000f64.ln() / (half_dim - 1) as f64;",
     "let scale = 10000f64.ln() / half_dim as f64;",
     ["--test", "it", "--", "verify::every_fixture_golden_passes_verify"]),
    ("sixteen-bit-rounding", "a position table stored in bfloat16 is allowed float16's rounding",
     "src/config/sinusoid.rs",
     "SixteenBit { kind: Kind::BFloat16, u: 2f64.powi(-8),",
     "SixteenBit { kind: Kind::BFloat16, u: 2f64.powi(-11),",
     ["--lib", "--", "sixteen_bit", "stored_tables"]),
    ("sinusoid-step-position", "an incremental step's sinusoidal position one before its own",
     "src/model/embedding.rs",
     "return Ok(weights.f_select(0, self.padding_idx + seq_len)?",
     "return Ok(weights.f_select(0, self.padding_idx + seq_len - 1)?",
     ["--test", "it", "--", "model::incremental_decoding_matches_full_sequence_logits"]),
    ("prenorm-encoder-attn-norm", "a pre-norm decoder layer's encoder attention reads its input unnormalized",
     "src/model/layer.rs",
     "            x = encoder_attn_layer_norm.forward(&x)?;",
     "            x = x.shallow_clone();",
     ["--test", "it", "--", "verify::every_fixture_golden_passes_verify"]),
    ("padded-reorder-encoder", "a padded reorder leaves the encoder keys in place when the batch shrinks within its bucket",
     "src/model/incremental.rs",
     "if rows != before || layer.encoder_attn.rows() != Some(bucket) {",
     "if layer.encoder_attn.rows() != Some(bucket) {",
     ["--lib", "--", "model::incremental"]),
    ("first-step-beams", "the first step's rows repeated sentence after sentence instead of beam after beam",
     "src/model/host_step.rs",
     "let repeat = Tensor::f_arange(sentences, (Kind::Int64, device))?.f_repeat_interleave_self_int(beam, 0, None)?;",
     "let repeat = Tensor::f_arange(sentences, (Kind::Int64, device))?.f_repeat([beam])?;",
     ["--test", "it", "--", "compute_type::the_host_step_gives_the_tensor_path_s_bits"]),
    ("host-step-position", "float32's host step adds the position one past the token's",
     "src/model/host_step.rs",
     "Some(p) => match p.incremental_row(prefix_len) {",
     "Some(p) => match p.incremental_row(prefix_len + 1) {",
     ["--test", "it", "--", "compute_type::float32_gives_fairseq_s_hypotheses_on_every_fixture"]),
    ("fixed-cache-grown-bias", "a fixed cache grown to a new length bucket masks its first position",
     "src/model/fixed_cache.rs",
     "let _ = bias.f_narrow(3, 0, self.len)?.f_fill_(0.0)?;",
     "let _ = bias.f_narrow(3, 1, self.len - 1)?.f_fill_(0.0)?;",
     ["--lib", "--", "model::fixed_cache"]),
    # the host kernels
    ("gemm-thread-rows", "the threaded host gemm leaves the last row of the batch uncomputed",
     "src/kernels/gemm.rs",
     "let mine = (t * share).min(rows)..((t + 1) * share).min(rows);",
     "let mine = (t * share).min(rows)..((t + 1) * share).min(rows - 1);",
     ["--lib", "--", "kernels::gemm::"]),
    ("softmax-tail", "the host log-softmax leaves the row's last (width mod 8) terms out of its sum",
     "src/kernels/softmax.rs",
     "for (j, x) in (at..whole).step_by(8).map(load).chain([tail_vector]).enumerate() {",
     "for (j, x) in (at..whole).step_by(8).map(load).enumerate() {",
     ["--lib", "--", "kernels::softmax"]),
    ("exp-exponent", "the vector exponential scales by 2^(2·⌊n/16⌋) instead of 2^⌊n/8⌋",
     "src/kernels/exp_avx2.rs",
     "_mm256_set1_epi32(0xff80_0000u32 as i32)",
     "_mm256_set1_epi32(0xff00_0000u32 as i32)",
     ["--lib", "--", "kernels::exp_avx2"]),
    ("norm-unbiased-variance", "the host LayerNorm divides the variance by n - 1 (torch: biased, by n)",
     "src/kernels/norm.rs",
     "let var = sum16(o, |v| (v - mean) * (v - mean)) / n;",
     "let var = sum16(o, |v| (v - mean) * (v - mean)) / (n - 1.0);",
     ["--lib", "--", "kernels::norm"]),
    ("one-query-dot-tail", "the one-query attention's dot product drops the first column past its last 8",
     "src/kernels/one_query.rs",
     "let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();",
     "let tail: f32 = ac.remainder().iter().zip(bc.remainder()).skip(1).map(|(x, y)| x * y).sum();",
     ["--lib", "--", "kernels::one_query"]),
    ("one-query-padding", "the host attention scores the positions that pad its last group of eight",
     "src/kernels/one_query/avx2.rs",
     "let s = _mm256_add_ps(across_lanes(&acc), _mm256_loadu_ps(bias.as_ptr()));",
     "let s = across_lanes(&acc);",
     ["--lib", "--", "kernels::one_query"]),
    ("kv-cache-regrow", "a host cache block regrown for more rows loses the positions it held",
     "src/kernels/kv_cache.rs",
     "grown[..block.len()].copy_from_slice(block);",
     "grown[..block.len()].fill(0.0);",
     ["--lib", "--", "kernels::kv_cache"]),
    # the searches
    ("constraints-set-order", "the Python set order behind constrained search's candidates probes with perturb >> 4",
     "src/generate/constraints.rs",
     "const PERTURB_SHIFT: u32 = 5;",
     "const PERTURB_SHIFT: u32 = 4;",
     ["--lib", "--", "generate::constraints"]),
    ("diverse-group-penalty", "diverse beam search leaves the second group unpenalized",
     "src/generate/diverse.rs",
     "let lprobs_g = if g > 0 {",
     "let lprobs_g = if g > 1 {",
     ["--lib", "--", "generate::diverse"]),
    ("ensemble-average", "the ensemble's log-probabilities are summed, not averaged (the - ln n dropped)",
     "src/generate/ensemble.rs",
     ".f_logsumexp([0], false)?.f_sub_scalar((n as f64).ln())?;",
     ".f_logsumexp([0], false)?;",
     ["--test", "it", "--", "generate::every_fairseq_generate_command_line"]),
    ("ngram-cpu-tail", "fairseq's CPU n-gram blocking checks the hypothesis' last tokens instead of the buffer's tail",
     "src/generate/ngram.rs",
     "let tail = host_rows(tokens, width - tail_len, tail_len)?;",
     "let tail = host_rows(tokens, step + 1 - tail_len, tail_len)?;",
     ["--lib", "--", "generate::ngram"]),
    ("lm-complete-block", "eval-lm's complete mode closes a block that the next sentence fills exactly",
     "src/generate/lm_samples.rs",
     "self.pending.len() + sentence.len() > self.block",
     "self.pending.len() + sentence.len() >= self.block",
     ["--lib", "--", "generate::lm_samples"]),
    ("rng-replay-output-init", "the untied output projection's init replayed as uniform_ instead of normal_",
     "src/generate/rng_replay.rs",
     "        ops.push((Init::Normal, w));",
     "        ops.push((Init::Uniform, w));",
     ["--lib", "--", "generate::rng_replay"]),
    # the text pipeline
    ("spm-byte-piece-case", "sentencepiece's byte fallback pieces spelled <0x4b> instead of <0x4B>",
     "src/text/sentencepiece/mod.rs",
     'let byte_piece = format!("<0x{b:02X}>");',
     'let byte_piece = format!("<0x{b:02x}>");',
     ["--test", "it", "--", "text::sentencepiece_matches_python_sentencepiece"]),
    ("dictionary-string-bos", "Dictionary.string keeps <s> in the text",
     "src/text/dictionary.rs",
     ".filter(move |&(_, &t)| t != self.eos() && t != self.bos() && !extra_symbols_to_ignore.contains(&t))",
     ".filter(move |&(_, &t)| t != self.eos() && !extra_symbols_to_ignore.contains(&t))",
     ["--lib", "--", "text::dictionary"]),
    # the library, the server and the command line's output files
    ("hub-alignment-eos", "a hard alignment may point at the source's </s>",
     "src/hub/run/translate_batches.rs",
     "(0..src.len()).filter(|&j| src[j] != pad && src[j] != eos).collect();",
     "(0..src.len()).filter(|&j| src[j] != pad).collect();",
     ["--test", "it", "--", "look_inside::print_alignment_matches_fairseq_interactive"]),
    ("serve-deterministic-batches", "--deterministic requests share batches",
     "src/serve/engine.rs",
     "if self.policy.deterministic || sampling {",
     "if sampling {",
     ["--test", "it", "--", "serve::deterministic_mode_answers_each_request_alone"]),
    ("partial-relative-link", "a relative symlink given as --output is resolved against the working directory",
     "src/cli/partial.rs",
     "path = path.parent().map_or_else(|| target.clone(), |dir| dir.join(&target));",
     "path = target.clone();",
     ["--bin", "tchseq-core", "--", "cli::partial"]),
    ("interrupt-count", "Ctrl-C's note says one input line fewer than the partial file holds",
     "src/cli/interrupt.rs",
     "Piece::Done => say(decimal(done, &mut [0u8; 20])),",
     "Piece::Done => say(decimal(done.saturating_sub(1), &mut [0u8; 20])),",
     ["--test", "it", "--", "robustness::an_interrupted_translate_keeps_its_finished_batches"]),
]


class Stop(Exception):
    """SIGTERM or SIGHUP: end the run as Ctrl-C does, through the restoring `finally`."""


def stop(signum, _frame):
    raise Stop(f"signal {signum}")


def write(path, text):
    # the restore must not be cut short by a second Ctrl-C
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    finally:
        signal.signal(signal.SIGINT, previous)


def run(name, what, path, old, new, args):
    full = os.path.join(ROOT, path)
    original = open(full, encoding="utf-8").read()
    if original.count(old) != 1:
        return "stale", f"the text to change occurs {original.count(old)} times in {path}"
    try:
        write(full, original.replace(old, new))
        start = time.time()
        p = subprocess.run(["cargo", "test", *CARGO_TEST_FLAGS, *args], cwd=ROOT, capture_output=True, text=True)
        out = p.stdout + p.stderr
        if "error[E" in out or "could not compile" in out:
            return "no build", out[-2000:]
        failed = [l.split()[1] for l in out.splitlines() if l.startswith("test ") and l.endswith("FAILED")]
        verdict = "caught" if p.returncode != 0 and failed else ("survived" if p.returncode == 0 else "error")
        return verdict, f"{len(failed)} failed ({', '.join(failed[:4])}{', ...' if len(failed) > 4 else ''}) in {time.time() - start:.0f} s"
    finally:
        write(full, original)


def sample(mutants, n, seed):
    """The first `n` of `mutants` by sha256(seed + name): the same for the same seed."""
    key = lambda m: hashlib.sha256((seed + m[0]).encode("utf-8")).hexdigest()
    return sorted(mutants, key=key)[:n]


def main():
    parser = argparse.ArgumentParser(description="Apply each hand-made mutant of src/ and run the tests that must catch it.")
    parser.add_argument("names", nargs="*", metavar="NAME", help="mutants to run (default: all)")
    parser.add_argument("--sample", type=int, metavar="N", help="run N mutants picked by --seed")
    parser.add_argument("--seed", default="tchseq", help="what picks the sample (default: %(default)s)")
    a = parser.parse_args()
    unknown = set(a.names) - {m[0] for m in MUTANTS}
    if unknown:
        parser.error(f"no mutant named {', '.join(sorted(unknown))}")
    chosen = [m for m in MUTANTS if not a.names or m[0] in a.names]
    if a.sample is not None:
        if a.sample < 1:
            parser.error("--sample takes a count of at least 1")
        chosen = sample(chosen, a.sample, a.seed)
        print(f"mutants picked by seed {a.seed}: {', '.join(m[0] for m in chosen)}", file=sys.stderr, flush=True)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    rows = []
    try:
        for m in chosen:
            verdict, detail = run(*m)
            print(f"{m[0]}: {verdict}: {detail}", file=sys.stderr, flush=True)
            rows.append((m[0], m[1], m[2], verdict, detail))
    except (KeyboardInterrupt, Stop) as e:
        print(f"stopped ({str(e) or 'Ctrl-C'}): every mutated file is restored", file=sys.stderr, flush=True)
        sys.exit(130)
    print("| mutant | change | file | result | tests |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | `{r[2]}` | {r[3]} | {r[4]} |")
    # rebuild what the mutants left behind, so that target/ matches src/ again
    subprocess.run(["cargo", "build", "--release"], cwd=ROOT, capture_output=True)
    sys.exit(0 if rows and all(r[3] == "caught" for r in rows) else 1)


if __name__ == "__main__":
    main()
