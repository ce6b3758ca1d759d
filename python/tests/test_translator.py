"""tchseq's Python API against the CLI on the bundled model."""

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

import tchseq

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "weights" / "multi30k.en-de"
BIN = ROOT / "target" / "release" / "tchseq"
SENTENCES = [
    "A man in a blue shirt is riding a bike.",
    "Two dogs are playing in the snow.",
    "A little girl is eating an ice cream.",
]


def cli_jsonl(*args):
    out = subprocess.run([str(BIN), "--threads", "1", "translate", "-m", str(MODEL), "--format", "jsonl", *args, *SENTENCES],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines()]


@pytest.fixture(scope="module")
def translator():
    return tchseq.Translator(MODEL, threads=1)


def test_translate_equals_the_cli(translator):
    cli = subprocess.run([str(BIN), "--threads", "1", "translate", "-m", str(MODEL), *SENTENCES],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert translator.translate(SENTENCES) == cli


def test_translate_batch_has_the_cli_hypotheses_and_bits(translator):
    cli = cli_jsonl("--nbest", "3", "--print-alignment")
    results = translator.translate_batch(SENTENCES, beam_size=5, num_hypotheses=3, return_alignment=True)
    assert len(results) == len(cli) == 3
    for r, c in zip(results, cli):
        assert r.texts == [h["text"] for h in c["hypotheses"]]
        assert r.hypotheses == [h["tokens"] for h in c["hypotheses"]]
        # f32 scores, the same bits as the CLI's (the same default batching: 512-token batches)
        assert r.scores == pytest.approx([h["score"] for h in c["hypotheses"]], abs=0, rel=1e-7)
        assert [len(t) for t in r.token_scores] == [len(h["tokens"]) + 1 for h in c["hypotheses"]]
        assert r.alignments == [[tuple(p) for p in h["alignment"]] for h in c["hypotheses"]]


def test_batch_size_1_batches_as_fairseq_interactive_does(translator):
    cli = cli_jsonl("--batch-size", "1", "--nbest", "2")
    results = translator.translate_batch(SENTENCES, batch_size=1, num_hypotheses=2)
    assert len(results) == len(cli) == len(SENTENCES)
    for r, c in zip(results, cli):
        assert r.hypotheses == [h["tokens"] for h in c["hypotheses"]]
        assert r.scores == pytest.approx([h["score"] for h in c["hypotheses"]], abs=0, rel=1e-7)


def test_token_lists_are_taken_as_they_are(translator):
    tokens = translator.translate_batch(SENTENCES[1:2])[0].hypotheses[0]
    src = ["Two", "dogs", "are", "playing", "in", "the", "snow", "."]
    assert translator.translate_batch([src])[0].hypotheses[0] == tokens


def test_score_batch_matches_forced_decoding(translator):
    best = translator.translate_batch(SENTENCES)
    scored = translator.score_batch(SENTENCES, [r.texts[0] for r in best])
    assert len(scored) == len(best) == len(SENTENCES)
    for s, r in zip(scored, best):
        assert s.tokens[-1] == "</s>"
        assert len(s.log_probs) == len(s.tokens)
        assert s.logprob == pytest.approx(sum(s.log_probs), abs=1e-4)
        # the beam's best hypothesis, forced, scores what the beam said
        assert s.avg_logprob == pytest.approx(r.scores[0], abs=1e-4)
    assert tchseq.Scorer is tchseq.Translator


def test_errors_are_value_errors_with_the_library_message(translator):
    with pytest.raises(ValueError, match=r"nbest must be between 1 and beam \(2\)"):
        translator.translate(SENTENCES, beam_size=2, num_hypotheses=3)
    with pytest.raises(ValueError, match="unknown field `colour`"):
        translator.translate(SENTENCES, colour="red")
    with pytest.raises(ValueError, match="sentence 1: input is .* tokens long"):
        translator.translate(["a", "dog " * 1100])
    with pytest.raises(ValueError, match="1 sources but 2 targets"):
        translator.score_batch(["a"], ["b", "c"])
    with pytest.raises(ValueError, match='unknown compute type "int4"'):
        tchseq.Translator(MODEL, compute_type="int4")
    with pytest.raises(ValueError, match='compute_type "int8": this model runs in "exact"'):
        translator.translate(SENTENCES, compute_type="int8")
    with pytest.raises(ValueError, match="nowhere"):
        tchseq.Translator("/nowhere/model")


def test_a_str_where_a_list_goes_is_a_type_error_in_python_terms(translator, lm):
    with pytest.raises(TypeError, match=r"sentences must be a list of str, not a str: put one sentence in a list"):
        translator.translate("A dog.")
    with pytest.raises(TypeError, match=r"sentences must be a list of str, not int"):
        translator.translate(5)
    with pytest.raises(TypeError, match=r"target must be a list of str, not a str"):
        translator.score_batch(["A dog."], "Ein Hund.")
    with pytest.raises(TypeError, match=r"texts must be a list of str, not a str"):
        lm.score_batch("A dog.")
    with pytest.raises(TypeError, match=r"prompts must be a list of str, not a str"):
        lm.generate("A dog")


def test_threads_share_one_translator(translator):
    expected = translator.translate(SENTENCES)
    results = [None] * 4

    def work(i):
        results[i] = translator.translate(SENTENCES)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4


def test_load_report_is_json(translator):
    report = json.loads(translator.report)
    assert report["source_lang"] == "en" and report["target_lang"] == "de"


def test_target_prefix_matches_fairseqs_prefix_tokens(translator):
    # fairseq's hub generate(..., inference_step_args={"prefix_tokens": ...}), one sentence per
    # call (reference/prefix_goldens.py)
    cases = json.loads((ROOT / "tests" / "fixtures" / "decoding" / "prefix.json").read_text())
    assert cases
    for c in cases:
        prefix = c["prefix"] or None
        r = translator.translate_batch([c["source"]], target_prefix=[prefix], beam_size=5, num_hypotheses=2)[0]
        want = c["hypotheses"]
        assert [" ".join(h) for h in r.hypotheses] == [h["tokens"] for h in want], c["source"]
        assert r.texts == [h["text"] for h in want]
        assert r.scores == pytest.approx([h["score"] for h in want], abs=1e-4)
        assert len(r.token_scores) == len(want)
        for ours, theirs in zip(r.token_scores, want):
            assert ours == pytest.approx(theirs["positional_scores"], abs=1e-4)
        if prefix:
            assert all(t.startswith(prefix) for t in r.texts)


def test_target_prefix_as_tokens_and_its_errors(translator):
    as_text = translator.translate_batch(["Two dogs are playing in the snow."], target_prefix=["Im Schnee"])[0]
    as_tokens = translator.translate_batch(["Two dogs are playing in the snow."], target_prefix=[["Im", "Schnee"]])[0]
    assert as_text.hypotheses == as_tokens.hypotheses
    with pytest.raises(ValueError, match="2 target prefixes for 1 sentences"):
        translator.translate_batch(["A dog."], target_prefix=["Ein", "Hund"])
    with pytest.raises(ValueError, match="end-of-sentence"):
        translator.translate_batch(["A dog."], target_prefix=[["</s>"]])


@pytest.mark.parametrize("order", ["ordered", "unordered"])
def test_constraints_give_the_clis_constrained_bits(translator, order):
    # fairseq-interactive's lines: the constraints after tabs
    lines = (ROOT / "tests" / "fixtures" / "decoding" / "constraints.en").read_text().splitlines()[:5]
    out = subprocess.run([str(BIN), "--threads", "1", "translate", "-m", str(MODEL), "--format", "jsonl", "--batch-size", "1",
                          "--nbest", "2", "--constraints", order],
                         input="".join(l + "\n" for l in lines), check=True, capture_output=True, text=True).stdout
    cli = [json.loads(l) for l in out.splitlines()]
    sources = [l.split("\t")[0] for l in lines]
    constraints = [l.split("\t")[1:] for l in lines]
    results = translator.translate_batch(sources, constraints=constraints, constraint_order=order, batch_size=1, num_hypotheses=2)
    assert len(results) == len(cli) == 5
    for r, c, cs in zip(results, cli, constraints):
        assert r.texts == [h["text"] for h in c["hypotheses"]]
        assert r.scores == pytest.approx([h["score"] for h in c["hypotheses"]], abs=0, rel=1e-7)
        assert all(x in t for t in r.texts for x in cs)


def test_constraint_errors(translator):
    with pytest.raises(ValueError, match="1 constraint lists for 2 sentences"):
        translator.translate_batch(["A dog.", "A cat."], constraints=[["Hund"]])
    with pytest.raises(ValueError, match="sentence 0: constraint 1 is empty"):
        translator.translate_batch(["A dog."], constraints=[[""]])
    with pytest.raises(ValueError, match="cannot be combined with sampling"):
        translator.translate_batch(["A dog."], constraints=[["Hund"]], sampling=True, beam_size=1)


def bfloat16_runs_here():
    """`compute_type="bfloat16"` needs AVX512_BF16 on the CPU (else a ValueError naming it)."""
    flags = next((l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags")), "")
    return "avx512_bf16" in flags.split()


# float16 and bfloat16 halve the fp32 model the Translator loaded; the CLI loads it halved
@pytest.mark.parametrize("compute_type", ["float32", "int8", "float16", "bfloat16"])
def test_a_compute_type_is_the_cli_s(compute_type):
    if compute_type == "bfloat16" and not bfloat16_runs_here():
        with pytest.raises(ValueError, match="needs AVX512_BF16"):
            tchseq.Translator(MODEL, compute_type=compute_type, threads=1)
        return
    fast = tchseq.Translator(MODEL, compute_type=compute_type, threads=1)
    # the same default batching: int8 quantizes each batch's activations as one tensor
    cli = subprocess.run([str(BIN), "--threads", "1", "translate", "--compute-type", compute_type,
                          "--format", "jsonl", "-m", str(MODEL), *SENTENCES],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    results = fast.translate_batch(SENTENCES)
    assert len(results) == len(cli) == len(SENTENCES)
    for r, c in zip(results, map(json.loads, cli)):
        assert r.texts[0] == c["hypotheses"][0]["text"]
        assert r.scores[0] == pytest.approx(c["hypotheses"][0]["score"], abs=0, rel=1e-7)


def test_a_multilingual_model_translates_the_pair_it_is_loaded_with():
    m2m = ROOT / "tests" / "fixtures" / "multilingual" / "m2m"
    t = tchseq.Translator(m2m, threads=1, source_lang="en", target_lang="fr")
    cli = subprocess.run([str(BIN), "--threads", "1", "translate", "-m", str(m2m), "-s", "en", "-t", "fr", *SENTENCES],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert t.translate(SENTENCES) == cli


def test_a_hugging_face_directory_translates_as_its_fairseq_checkpoint():
    """An M2M100ForConditionalGeneration directory converted from the fixture: the checkpoint's output."""
    hf = ROOT / "tests" / "fixtures" / "hf" / "m2m"
    m2m = ROOT / "tests" / "fixtures" / "multilingual" / "m2m"
    ours = tchseq.Translator(hf, threads=1, source_lang="en", target_lang="de").translate(SENTENCES)
    assert ours == tchseq.Translator(m2m, threads=1, source_lang="en", target_lang="de").translate(SENTENCES)


def test_a_multilingual_model_loaded_once_translates_every_pair():
    m2m = ROOT / "tests" / "fixtures" / "multilingual" / "m2m"
    line = lambda lang, n: (ROOT / "tests" / "fixtures" / "multilingual" / f"input.{lang}").read_text().splitlines()[n]
    items = [("en", "de", line("en", 0)), ("fr", "en", line("fr", 1)), ("de", "fr", line("de", 2))]
    cli = []
    for src, tgt, text in items:
        out = subprocess.run([str(BIN), "--threads", "1", "translate", "-m", str(m2m), "-s", src, "-t", tgt, "--format", "jsonl",
                              "--batch-size", "1", text], check=True, capture_output=True, text=True).stdout
        cli.append(json.loads(out)["hypotheses"][0])
    t = tchseq.Translator(m2m, threads=1)
    # one call, a pair per sentence; one sentence a batch gives each the CLI's bits
    results = t.translate_batch([x[2] for x in items], source_lang=[x[0] for x in items], target_lang=[x[1] for x in items], batch_size=1)
    for r, c in zip(results, cli):
        assert r.texts[0] == c["text"]
        assert r.scores[0] == pytest.approx(c["score"], abs=0, rel=1e-7)
    # sentences of three pairs in one batch: the same translations
    together = t.translate_batch([x[2] for x in items], source_lang=[x[0] for x in items], target_lang=[x[1] for x in items])
    assert [r.texts[0] for r in together] == [c["text"] for c in cli]
    assert t.translate([items[1][2]], source_lang="fr", target_lang="en") == [cli[1]["text"]]
    # scoring in a pair is what a Translator loaded for that pair scores
    fr_en = tchseq.Translator(m2m, threads=1, source_lang="fr", target_lang="en")
    want = fr_en.score_batch([items[1][2]], [cli[1]["text"]])[0]
    got = t.score_batch([items[1][2]], [cli[1]["text"]], source_lang="fr", target_lang="en")[0]
    assert (got.tokens, got.log_probs) == (want.tokens, want.log_probs)
    with pytest.raises(ValueError, match="loaded without a pair: give source_lang and target_lang"):
        t.translate(["A dog."])
    with pytest.raises(ValueError, match="2 target_lang values for 1 sentences"):
        t.translate_batch(["A dog."], source_lang="en", target_lang=["de", "fr"])
    with pytest.raises(ValueError, match="xx"):
        t.translate(["A dog."], source_lang="en", target_lang="xx")


LM = ROOT / "tests" / "fixtures" / "lm" / "lm-gpt"
LM_INPUT = ROOT / "tests" / "fixtures" / "lm" / "input.en"


@pytest.fixture(scope="module")
def lm():
    return tchseq.LanguageModel(LM, threads=1)


def test_language_model_scores_as_score_lm_does(lm, tmp_path):
    texts = LM_INPUT.read_text().splitlines()[:24]
    (tmp_path / "texts").write_text("".join(t + "\n" for t in texts))
    out = subprocess.run([str(BIN), "--threads", "1", "score", "--lm", "-m", str(LM), "--sample-break-mode", "eos",
                          "--format", "jsonl", "--per-token", "--input", str(tmp_path / "texts")],
                         check=True, capture_output=True, text=True).stdout
    cli = [json.loads(l) for l in out.splitlines()]
    results = lm.score_batch(texts)
    assert len(results) == len(cli) == len(texts)
    for r, c in zip(results, cli):
        assert r.tokens == [t for t, _ in c["token_logprobs"]]
        assert r.log_probs == pytest.approx([s for _, s in c["token_logprobs"]], abs=0, rel=1e-7)
        assert r.logprob == pytest.approx(c["logprob"], rel=1e-6)
        assert len(r.tokens) == c["tokens"]


def test_language_model_continues_prompts_as_the_cli_does(lm):
    prompts = (ROOT / "tests" / "fixtures" / "lm" / "prompts.en").read_text().splitlines()
    out = subprocess.run([str(BIN), "--threads", "1", "translate", "-m", str(LM), "--format", "jsonl", "--beam", "4",
                          "--nbest", "2", "--max-len-b", "12"],
                         input="".join(p + "\n" for p in prompts), check=True, capture_output=True, text=True).stdout
    cli = [json.loads(l) for l in out.splitlines()]
    results = lm.generate(prompts, beam_size=4, num_hypotheses=2, max_len_b=12)
    assert len(results) == len(cli) == len(prompts) > 0
    for p, r, c in zip(prompts, results, cli):
        assert r.texts == [h["text"] for h in c["hypotheses"]]
        assert r.scores == pytest.approx([h["score"] for h in c["hypotheses"]], abs=0, rel=1e-7)
        assert all(t.startswith(p.split()[0]) for t in r.texts)


def test_language_model_errors(lm):
    with pytest.raises(ValueError, match="need a translation model"):
        lm.generate(["A dog"], return_alignment=True)
    with pytest.raises(ValueError, match="batch_size must be at least 1"):
        lm.score_batch(["A dog."], batch_size=0)
    with pytest.raises(ValueError, match="longer than the model's"):
        lm.score_batch([" ".join(["dog"] * 5000)])
    with pytest.raises(ValueError):
        tchseq.LanguageModel(MODEL)


def test_bfloat16_needs_avx512_bf16(monkeypatch):
    # how a CPU without the instructions answers (the variable hides them from tchseq)
    monkeypatch.setenv("TCHSEQ_CPU_FEATURES_OFF", "avx512bf16")
    with pytest.raises(ValueError, match="compute type bfloat16 on the CPU needs AVX512_BF16, which this CPU lacks"):
        tchseq.Translator(MODEL, compute_type="bfloat16", threads=1)
