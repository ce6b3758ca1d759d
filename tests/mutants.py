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
     "if best.values.windows(2).any(|w| w[0] <= w[1]) {",
     "if best.values.windows(2).any(|w| w[0] < w[1]) {",
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
