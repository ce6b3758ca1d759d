"""The job kinds of `make parity` beyond fairseq-interactive and --score-reference: fairseq's
language modeling (interactive continuations, and fairseq-eval-lm beside `tchseq score --lm`)
and fairseq-generate's --prefix-size beside `translate` with reference targets; and the
--no-repeat-ngram-size 1..4 runs of reference/ngram_goldens.sh (fairseq-interactive). Used by
reference/parity.py."""
import contextlib
import io
import json
import os
import re
import subprocess
import sys

from parity_paths import BUNDLED, BUNDLED_SR, ROOT, WORK  # noqa: F401  (reference/, this script's directory)

KINDS = ("generate", "eval_lm")


def jobs(load):
    """The language-model and --prefix-size jobs (`load` reads a JSON file of the repository)."""
    jobs = []
    # transformer_lm continuations (fairseq-interactive --task language_modeling), from
    # reference/lm_goldens.sh's command lines
    for golden, g in load("tests/fixtures/lm/manifest.json")["goldens"].items():
        argv = g["argv"]
        if argv[0] != "fairseq-interactive" or g.get("exit_code", 0) != 0:
            continue
        model_dir, opts, i = argv[1], [], 2
        while i < len(argv):
            if argv[i] in ("--task", "--path", "--tokenizer", "--bpe", "--bpe-codes"):
                i += 2
            elif argv[i] in ("--cpu", "--add-bos-token"):
                i += 1
            else:
                opts.append(argv[i])
                i += 1
        if not {"--batch-size", "--buffer-size"} & set(opts):
            opts += ["--batch-size", "1"]
        name = golden.split("/")[-3] + "/" + os.path.basename(golden)[: -len(".txt")]
        jobs.append({
            "name": f"lm/{name}",
            "kind": "interactive",
            "fairseq": argv + ["--input", g["input"]],
            "tchseq": ["translate", "-m", model_dir, "--format", "fairseq", "--input", g["input"]] + opts,
        })
    jobs += ngram_jobs(load)
    # fairseq-generate's --prefix-size: the first tokens of each reference target forced; tchseq
    # takes the same pairs as JSONL lines with a `tgt`
    jobs.append({
        "name": "bundled/generate_prefix_size2_nbest2",
        "kind": "generate",
        "fairseq": ["fairseq-generate", f"{BUNDLED_SR}/data-bin", "--path", f"{BUNDLED}/model.pt", "--cpu", "-s", "en",
                    "-t", "de", "--gen-subset", "test", "--beam", "5", "--nbest", "2", "--prefix-size", "2",
                    "--batch-size", "1"],
        "pairs": (f"{BUNDLED_SR}/test.bpe.en", f"{BUNDLED_SR}/test.bpe.de"),
        "tchseq": ["translate", "-m", BUNDLED, "--tokenizer", "none", "--bpe", "none", "--input-format", "jsonl",
                   "--format", "fairseq", "--beam", "5", "--nbest", "2", "--prefix-size", "2", "--batch-size", "1"],
    })
    # transformer_lm scoring: fairseq-eval-lm's word probabilities beside tchseq score --lm, one
    # sample per batch on both sides (batches differ in order and padding otherwise)
    for model in ("lm-postnorm", "lm-gpt"):
        d = f"tests/fixtures/lm/{model}"
        bos = ["--add-bos-token"] if model == "lm-gpt" else []  # eval-lm reads it from its flags only
        for tag, opts in [
            ("eos", ["--sample-break-mode", "eos"]),
            ("eos_remove_bpe", ["--sample-break-mode", "eos", "--remove-bpe", "@@ "]),
            ("none_tps32", ["--sample-break-mode", "none", "--tokens-per-sample", "32"]),
            ("none_tps32_cw16", ["--sample-break-mode", "none", "--tokens-per-sample", "32", "--context-window", "16"]),
            ("complete_tps48", ["--sample-break-mode", "complete", "--tokens-per-sample", "48"]),
        ]:
            opts = opts + ["--batch-size", "1"]
            jobs.append({
                "name": f"lm/{model}/eval_lm_{tag}",
                "kind": "eval_lm",
                "fairseq": ["eval-lm-raw", d, "tests/fixtures/lm/input.en", f"{WORK}/bin/{model}.{tag}"] + opts + bos,
                "tchseq": ["score", "--lm", "-m", d, "--input", "tests/fixtures/lm/input.en", "--format", "jsonl",
                           "--per-token", "-q"] + opts,
            })
    return jobs


def ngram_jobs(load):
    """--no-repeat-ngram-size 1..4 (tests/fixtures/ngram/manifest.json, reference/ngram_goldens.sh):
    the bundled model, two fixture models and both language models, beam search and sampling.
    tchseq gets the same options and no other n-gram flag: its default is fairseq 0.12.2's CPU
    blocking."""
    jobs = []
    for golden, g in load("tests/fixtures/ngram/manifest.json")["goldens"].items():
        argv = g["argv"]
        if argv[0] != "fairseq-interactive" or "--no-repeat-ngram-size" not in argv:
            continue
        fairseq, tchseq, opts = list(argv), ["translate", "-m", argv[1], "--format", "fairseq"], []
        lm = pipeline = False
        i = 2
        while i < len(argv):
            a = argv[i]
            if a in ("--path", "--bpe-codes"):  # the model directory (and its checkpoint's cfg) give these
                i += 2
            elif a == "--task":
                lm = argv[i + 1] == "language_modeling"
                i += 2
            elif a in ("--tokenizer", "--bpe"):
                pipeline = True
                i += 2
            elif a in ("-s", "-t", "--input"):
                tchseq += [a, argv[i + 1]]
                i += 2
            elif a in ("--cpu", "--add-bos-token"):
                i += 1
            else:
                opts.append(a)
                i += 1
        if g["input"] != "-":
            fairseq += ["--input", g["input"]]
            tchseq += ["--input", g["input"]]
        if not pipeline and not lm:
            tchseq += ["--tokenizer", "none", "--bpe", "none"]
        # fairseq-interactive's default is one line at a time (said on both sides: parity.py
        # weighs a job by its --batch-size); tchseq batches a file unless told
        if not {"--batch-size", "--buffer-size", "--max-tokens"} & set(opts):
            opts += ["--batch-size", "1"]
            fairseq += ["--batch-size", "1"]
        jobs.append({
            "name": "ngram/" + golden[len("tests/fixtures/ngram/"): -len(".txt")],
            "kind": "interactive",
            "fairseq": fairseq,
            "tchseq": tchseq + opts,
        })
    return jobs


def eval_lm_raw():
    """sys.argv = [_, MODEL_DIR, RAW_INPUT, BIN_DIR, eval-lm flags...]: the raw text Moses-
    tokenized and BPE'd with the model's codes (fairseq's moses + subword_nmt), binarized with
    its dict.txt, then fairseq-eval-lm --output-word-probs; prints its word-prob and loss lines
    (eval-lm logs them; the log prefix dropped)."""
    import logging

    from fairseq_cli import eval_lm, preprocess

    model_dir, raw, bin_dir, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    os.makedirs(bin_dir, exist_ok=True)
    bpe = f"{bin_dir}/raw.bpe"
    subprocess.run(["bash", "-c", f"{sys.executable} reference/multi30k/moses_tok.py en < {raw} 2>/dev/null"
                    f" | subword-nmt apply-bpe -c {model_dir}/bpecodes > {bpe}"], check=True, cwd=ROOT)
    # (with --only-source and no language, the test split is the --testpref file itself)
    sys.argv = ["fairseq-preprocess", "--only-source", "--srcdict", f"{model_dir}/dict.txt", "--testpref", bpe,
                "--destdir", bin_dir, "--workers", "1"]
    with contextlib.redirect_stdout(io.StringIO()):
        preprocess.cli_main()

    class Lines(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if re.match(r"^\d+ ", msg) or msg.startswith("Loss (base 2)"):
                print(msg)

    handler = Lines()
    logging.getLogger("fairseq_cli.eval_lm").addHandler(handler)
    try:
        sys.argv = ["fairseq-eval-lm", bin_dir, "--path", f"{model_dir}/model.pt", "--gen-subset", "test", "--cpu",
                    "--output-word-probs"] + flags
        eval_lm.cli_main()
    finally:
        logging.getLogger("fairseq_cli.eval_lm").removeHandler(handler)


def read_lines(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read().splitlines()


def eval_lm_lines(path):
    """id -> fairseq-eval-lm's word-prob line."""
    return {int(l.split(" ", 1)[0]): l for l in read_lines(path) if re.match(r"^\d+ ", l)}


def tchseq_eval_lm_lines(path):
    """tchseq score --lm's JSONL rendered as eval-lm prints it: `{id} {word} [{lp:2f}]` joined by
    tabs, each log-probability the float32 value as a Python float."""
    import numpy as np

    out = {}
    for l in read_lines(path):
        r = json.loads(l)
        if r["error"] is None:
            words = "\t".join(f"{w} [{float(np.float32(p)):2f}]" for w, p in r["token_logprobs"])
            out[r["id"]] = f"{r['id']} {words}"
        else:
            out[r["id"]] = f"{r['id']} error: {r['error']}"
    return out


def hypothesis_lines(path):
    """id -> its H- and P- lines, in order (fairseq-generate prints sentences in batch order)."""
    out = {}
    for l in read_lines(path):
        tag = l.split("\t", 1)[0]
        if tag[:2] in ("H-", "P-") and tag[2:].isdigit():
            out.setdefault(int(tag[2:]), []).append(l)
    return out


def compare(job):
    """(lines compared, [(fairseq, tchseq)] differing) of a job of one of KINDS."""
    path = os.path.join(ROOT, job["tchseq_out"])
    if job["kind"] == "generate":
        want = hypothesis_lines(job["fairseq_out"])
        got = hypothesis_lines(job["tchseq_out"]) if os.path.exists(path) else {}
        diffs = []
        for i in sorted(set(want) | set(got)):
            w, g = want.get(i, []), got.get(i, [])
            n = max(len(w), len(g))
            diffs += [(a, b) for a, b in zip(w + ["<missing>"] * (n - len(w)), g + ["<missing>"] * (n - len(g)))
                      if a != b]
        return sum(len(v) for v in want.values()), diffs
    want = eval_lm_lines(job["fairseq_out"])
    got = tchseq_eval_lm_lines(job["tchseq_out"]) if os.path.exists(path) else {}
    diffs = [(want.get(i, "<missing>"), got.get(i, "<missing>")) for i in sorted(set(want) | set(got))
             if want.get(i) != got.get(i)]
    return len(want), diffs
