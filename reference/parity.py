#!/usr/bin/env python3
"""`make parity`: fairseq 0.12.2 and tchseq, run live on this machine, must print the same lines.

Jobs (built from the manifests, nothing from the committed goldens' outputs):
  * every fixture model (tests/fixtures/models/manifest.json) x every interactive option set x
    both batchings, with the recorded fairseq-interactive argv;
  * every fixture's --score-reference runs (fairseq-generate, batch sizes 1 and 16) on the test
    split inputs.{src,tgt}, binarized here with the fixture's own dictionaries (the manifest's
    reference/work/bin-* directories are build products, not committed);
  * the wild models' interactive runs (tests/fixtures/wild/manifest.json);
  * the bundled model (weights/multi30k.en-de) on raw text: the two fairseq-interactive runs of
    reference/bundled_goldens.sh plus one with --nbest 2, and --score-reference on
    tests/fixtures/bundled/score_reference (batch sizes 1 and 16);
  * fairseq-generate beside `tchseq generate` (reference/parity_generate.py): the command lines
    of tests/fixtures/generate/runs.json, every fixture on its binarized test split, and the
    bundled model on tests/fixtures/bundled/score_reference/data-bin.

fairseq runs in one Python process per worker (as reference/run_cli.py does: each job calls the
console script's cli_main with sys.argv, log lines dropped) with OMP/MKL_NUM_THREADS = --threads;
tchseq runs as `tchseq --threads N --device cpu ...` at the same time. Interactive outputs are
compared line for line (every S-/H-/D-/P-/E-/A- line; W- timing lines are left out on both
sides). Scoring is compared as fairseq-generate prints it: `H-{id}\t{score}` (the hypothesis
text dropped) and `P-{id}\t...`, rendered from tchseq's CSV with float32 arithmetic, by id.

Pinned kernels: MKL_CBWR / ATEN_CPU_CAPABILITY in the environment reach both sides;
--reproducible (or TCHSEQ_REPRODUCIBLE=1) runs tchseq with --reproducible and fairseq with
MKL_CBWR=AVX2,STRICT ATEN_CPU_CAPABILITY=avx2, which is what tchseq pins.

Usage (from anywhere; normally through reference/parity.sh, which sources env.sh):
  python reference/parity.py [--threads N] [--reproducible] [--only REGEX] [--workers K]
Exit status 0 when every compared line is identical (and some were compared), else 1.
"""
import argparse
import contextlib
import csv
import io
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import parity_generate  # noqa: E402  (reference/, this script's directory)
import parity_kinds  # noqa: E402
import parity_multilingual  # noqa: E402

from parity_paths import BUNDLED, BUNDLED_INPUT, BUNDLED_SR, ROOT, WORK  # noqa: E402

REF = os.path.join(ROOT, "reference")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ")
PINNED = {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2"}
SHOW = 3  # differing line pairs shown per job


# ---------------------------------------------------------------------------------------------
# fairseq side: one process runs many jobs (run_cli.py's approach)


def cache_hydra_compose():
    """Memoizes two pure functions in fairseq's config building (hydra), nothing else.

    fairseq turns every argparse Namespace (the command line's, and a legacy checkpoint's
    `args`) into its config with hydra's compose(): ~240 `key=value` override strings, each
    parsed by an ANTLR grammar in pure Python, then merged into the structured config. That is
    1-3 s per call, 1-3 calls per run: most of fairseq's time in this script. Both steps
    depend only on their arguments (the config files and the ConfigStore do not change within
    this process), so
      * compose(name, overrides=...) keeps its first result per argument list (a legacy
        checkpoint's `args` are composed again by every run that loads it), and
      * OverridesParser.parse_rule(s, rule) keeps its first result per string (most override
        strings are the same in every run);
    every call, the first included, gets a deep copy (callers mutate what they get). Nothing
    numerical is touched. --no-config-cache runs fairseq untouched; every output of every job
    was identical both ways when this was written.
    """
    import copy

    from fairseq.dataclass import utils as dc_utils
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def memoize(fn, key):
        memo = {}

        def cached(*args, **kwargs):
            k = key(*args, **kwargs)
            if k not in memo:
                memo[k] = fn(*args, **kwargs)
            return copy.deepcopy(memo[k])

        return cached

    dc_utils.compose = memoize(dc_utils.compose, lambda *a, **kw: repr(
        (a, {k: tuple(v) if isinstance(v, list) else v for k, v in sorted(kw.items())})))
    # (self carries the Functions registry, the same in every parser fairseq creates)
    OverridesParser.parse_rule = memoize(OverridesParser.parse_rule, lambda self, s, rule_name: (s, rule_name))


def fairseq_worker(jobs_file, config_cache):
    """Runs [{"argv": [...], "out": path}, ...] in this process; writes stdout minus log lines."""
    from fairseq_cli import generate, interactive, preprocess

    if config_cache:
        cache_hydra_compose()

    entry = {
        "fairseq-interactive": interactive.cli_main,
        "fairseq-generate": generate.cli_main,
        "fairseq-preprocess": preprocess.cli_main,
        "eval-lm-raw": parity_kinds.eval_lm_raw,
    }
    for job in json.load(open(jobs_file)):
        argv = job["argv"]
        buf = io.StringIO()
        sys.argv = argv[:]
        t0 = time.time()
        with contextlib.redirect_stdout(buf):
            entry[argv[0]]()
        lines = [l for l in buf.getvalue().splitlines() if not LOG_LINE.match(l)]
        tmp = job["out"] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(l + "\n" for l in lines))
        os.replace(tmp, job["out"])
        print(f"fairseq {time.time() - t0:6.1f}s {job['out']}", file=sys.stderr, flush=True)
    with open(jobs_file + ".cpu", "w") as f:
        f.write(str(cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN)))


def cpu_seconds(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


# ---------------------------------------------------------------------------------------------
# jobs


def load(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return json.load(f)


def interactive_to_tchseq(argv):
    """fairseq-interactive DATA --path P -s S -t T --cpu --input F [options] -> tchseq translate."""
    assert argv[0] == "fairseq-interactive", argv
    args, opts = ["--data", argv[1]], []
    rest, i = argv[2:], 0
    while i < len(rest):
        a = rest[i]
        if a in ("--path", "-s", "-t", "--input"):
            args += [a, rest[i + 1]]
            i += 2
        elif a == "--cpu":
            i += 1
        elif a == "--fp16":
            opts.append("--dtype=fp16")
            i += 1
        else:
            opts.append(a)
            i += 1
    # (--no-repeat-ngram-size as it is: tchseq's default is fairseq 0.12.2's CPU blocking)
    compat = []
    # fairseq-interactive's default is one line at a time; tchseq batches a file unless told
    if not {"--batch-size", "--max-sentences", "--max-tokens", "--buffer-size"} & set(opts):
        compat += ["--batch-size", "1"]
    return ["translate"] + args + ["--tokenizer", "none", "--bpe", "none", "--format", "fairseq"] + opts + compat


# Option sets for fairseq's DiverseBeamSearch, DiverseSiblingsSearch and
# LengthConstrainedBeamSearch (and --prefix-size, which fairseq-interactive accepts and ignores),
# run on every fixture at batch 16.
DIVERSE_SETS = [
    ("diverse_beam_g2", ["--beam", "4", "--diverse-beam-groups", "2", "--nbest", "4"]),
    ("diverse_beam_g4_s0.3", ["--beam", "4", "--diverse-beam-groups", "4", "--diverse-beam-strength", "0.3"]),
    ("diversity_rate0.5", ["--diversity-rate", "0.5", "--nbest", "3"]),
    ("diversity_rate0", ["--diversity-rate", "0"]),
    ("prefix_size2", ["--prefix-size", "2"]),
    ("match_source_len", ["--match-source-len", "--nbest", "2"]),
]


def with_options(argv, opts):
    """argv with each --flag of opts set to the value that follows it there (replaced, or
    appended); a flag followed by another flag (or by nothing) is a switch."""
    argv = list(argv)
    i = 0
    while i < len(opts):
        flag = opts[i]
        value = opts[i + 1] if i + 1 < len(opts) and not opts[i + 1].startswith("--") else None
        if value is None:
            if flag not in argv:
                argv.append(flag)
        elif flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
        i += 1 if value is None else 2
    return argv


def interactive_jobs(prefix, runs_by_set):
    """One job per fairseq-interactive run a manifest records ({set: {batching: {"argv": ...}}}),
    named PREFIX + set (+ ".batching" but for the batched run)."""
    return [
        {
            "name": f"{prefix}{set_name}{'' if batching == 'batched' else '.' + batching}",
            "kind": "interactive",
            "fairseq": g["argv"],
            "tchseq": interactive_to_tchseq(g["argv"]),
        }
        for set_name, runs in runs_by_set.items()
        for batching, g in runs.items()
    ]


def build_jobs():
    """Returns (preprocess jobs for fairseq, parity jobs)."""
    prep, jobs = [], []
    m = load("tests/fixtures/models/manifest.json")
    src_in, tgt_in = m["inputs"]["src"], m["inputs"]["tgt"]
    assert src_in.endswith(".src") and tgt_in.endswith(".tgt")
    testpref = src_in[: -len(".src")]
    for fx in m["fixtures"]:
        name, d = fx["name"], fx["dir"]
        jobs += interactive_jobs(f"{name}/", fx["goldens"]["interactive"])
        # fairseq's other searches, on the batched beam-5 run's command line
        base = fx["goldens"]["interactive"]["beam5"]["batched"]["argv"]
        for set_name, opts in DIVERSE_SETS:
            argv = with_options(base, opts)
            jobs.append({"name": f"{name}/{set_name}", "kind": "interactive", "fairseq": argv,
                         "tchseq": interactive_to_tchseq(argv)})
        # fairseq's --fp16: the model halved (model.half()), softmax and log-softmax in fp32
        argv = with_options(base, ["--fp16"])
        jobs.append({"name": f"{name}/beam5_fp16", "kind": "interactive", "fairseq": argv,
                     "tchseq": interactive_to_tchseq(argv)})
        # the test split binarized with this fixture's dictionaries (= fixtures.sh's bin-*/test)
        bin_dir = f"{WORK}/bin/{name}"
        prep.append({"argv": ["fairseq-preprocess", "-s", fx["source_lang"], "-t", fx["target_lang"],
                              "--srcdict", f"{d}/{fx['src_dict']}", "--tgtdict", f"{d}/{fx['tgt_dict']}",
                              "--testpref", testpref, "--destdir", bin_dir, "--workers", "1"],
                     "out": f"{WORK}/bin/{name}.log"})
        for run, g in fx["goldens"]["score_reference"].items():
            argv = list(g["argv"])
            assert argv[0] == "fairseq-generate" and "--score-reference" in argv, argv
            argv[1] = bin_dir
            bs = argv[argv.index("--batch-size") + 1]
            jobs.append({
                "name": f"{name}/score_reference.{run}",
                "kind": "score",
                "fairseq": argv,
                "pairs": (src_in, tgt_in),
                "tchseq": ["score", "-m", d, "-s", fx["source_lang"], "-t", fx["target_lang"],
                           "--tokenized", "--per-token", "--batch-size", bs, "-q"],
            })
    for w in load("tests/fixtures/wild/manifest.json")["models"]:
        jobs += interactive_jobs(f"wild/{w['name']}/", w["goldens"]["interactive"])
    # the bundled model on raw text: reference/bundled_goldens.sh's two runs, and --nbest 2
    base = ["fairseq-interactive", BUNDLED, "--path", f"{BUNDLED}/model.pt", "--cpu", "-s", "en", "-t", "de",
            "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", f"{BUNDLED}/bpecodes", "--beam", "5",
            "--input", BUNDLED_INPUT]
    for tag, opts in [
        ("batch16", ["--buffer-size", "1024", "--batch-size", "16"]),
        ("batch1", ["--batch-size", "1"]),
        # fairseq's --fp16 halves the model (interactive has no --bf16: it computes in fp32)
        ("fp16_batch16", ["--fp16", "--buffer-size", "1024", "--batch-size", "16"]),
        ("fp16_batch1", ["--fp16", "--batch-size", "1"]),
        ("nbest2_batch16", ["--nbest", "2", "--buffer-size", "1024", "--batch-size", "16"]),
        ("diverse_beam_g3_nbest3", ["--beam", "6", "--diverse-beam-groups", "3", "--nbest", "3",
                                    "--buffer-size", "1024", "--batch-size", "16"]),
        ("diversity_rate0.3_nbest2", ["--diversity-rate", "0.3", "--nbest", "2", "--buffer-size", "1024",
                                      "--batch-size", "16"]),
        ("remove_bpe_batch16", ["--remove-bpe", "--buffer-size", "1024", "--batch-size", "16"]),
    ]:
        jobs.append({
            "name": f"bundled/{tag}",
            "kind": "interactive",
            "fairseq": base + opts,
            # tchseq's own Moses + subword-nmt pipeline from the model directory
            "tchseq": ["translate", "-m", BUNDLED, "--format", "fairseq", "--beam", "5", "--input", BUNDLED_INPUT]
                      + [o if o != "--fp16" else "--dtype=fp16" for o in opts],
        })
    # a fairseq-interactive command line given to tchseq translate as it is (reference/bundled_goldens.sh)
    fairseq_argv = ["--lenpen", "0.6", "--unkpen", "-0.5", "--log-format", "simple", "--no-progress-bar",
                    "--skip-invalid-size-inputs-valid-test", "--dataset-impl", "raw", "--num-workers", "0",
                    "--bf16", "--max-sentences", "16", "--buffer-size", "1024",
                    "--print-alignment", "hard", "--nbest", "2"]
    jobs.append({
        "name": "bundled/fairseq_argv",
        "kind": "interactive",
        "fairseq": base + fairseq_argv,
        "tchseq": ["translate", "-m"] + base[1:] + fairseq_argv + ["--format", "fairseq"],
    })
    # LexicallyConstrainedBeamSearch: constraints after tabs on the input lines
    constrained_input = "tests/fixtures/decoding/constraints.en"
    for tag, opts in [
        ("constraints_ordered_nbest2", ["--constraints", "--nbest", "2", "--buffer-size", "1024", "--batch-size", "16"]),
        ("constraints_unordered_nbest2", ["--constraints", "unordered", "--nbest", "2", "--buffer-size", "1024",
                                          "--batch-size", "16"]),
        ("constraints_unordered_batch1", ["--constraints", "unordered", "--batch-size", "1"]),
    ]:
        jobs.append({
            "name": f"bundled/{tag}",
            "kind": "interactive",
            "fairseq": with_options(base, ["--input", constrained_input]) + opts,
            "tchseq": ["translate", "-m", BUNDLED, "--format", "fairseq", "--beam", "5", "--input",
                       constrained_input] + opts,
        })
    jobs += parity_kinds.jobs(load)
    jobs += parity_multilingual.jobs()
    jobs += parity_generate.jobs(m["fixtures"])
    for bs in ("1", "16"):
        jobs.append({
            "name": f"bundled/score_reference.b{bs}",
            "kind": "score",
            "fairseq": ["fairseq-generate", f"{BUNDLED_SR}/data-bin", "--path", f"{BUNDLED}/model.pt", "--cpu",
                        "-s", "en", "-t", "de", "--gen-subset", "test", "--score-reference", "--batch-size", bs],
            "pairs": (f"{BUNDLED_SR}/test.bpe.en", f"{BUNDLED_SR}/test.bpe.de"),
            "tchseq": ["score", "-m", BUNDLED, "--tokenized", "--per-token", "--batch-size", bs, "-q"],
        })
    for j in jobs:
        stem = j["name"].replace("/", "__")
        j["fairseq_out"] = f"{WORK}/fairseq/{stem}.txt"
        j["tchseq_out"] = f"{WORK}/tchseq/{stem}." + ("csv" if j["kind"] == "score" else "txt")
        if j["kind"] == "score":
            j["csv"] = f"{WORK}/pairs/{stem}.csv"
    return prep, jobs


# ---------------------------------------------------------------------------------------------
# tchseq side


def write_pairs(src, tgt, out):
    with open(os.path.join(ROOT, src), encoding="utf-8") as f:
        s = f.read().splitlines()
    with open(os.path.join(ROOT, tgt), encoding="utf-8") as f:
        t = f.read().splitlines()
    assert len(s) == len(t), (src, tgt)
    with open(os.path.join(ROOT, out), "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "target"])
        w.writerows(zip(s, t))


def run_tchseq(job, tchseq, threads, reproducible, env):
    pre = [tchseq, "--threads", str(threads), "--device", "cpu"] + (["--reproducible"] if reproducible else [])
    argv = pre + job["tchseq"]
    if job["kind"] == "score":
        write_pairs(*job["pairs"], job["csv"])
        argv += ["--input", job["csv"], "--output", job["tchseq_out"]]
        stdout = subprocess.DEVNULL
    elif job["kind"] == "generate":
        jsonl = job["tchseq_out"] + ".in.jsonl"
        with open(os.path.join(ROOT, job["pairs"][0]), encoding="utf-8") as f, \
                open(os.path.join(ROOT, job["pairs"][1]), encoding="utf-8") as g, \
                open(os.path.join(ROOT, jsonl), "w", encoding="utf-8") as out:
            for src, tgt in zip(f.read().splitlines(), g.read().splitlines()):
                out.write(json.dumps({"src": src, "tgt": tgt}, ensure_ascii=False) + "\n")
        argv += ["--input", jsonl]
        stdout = open(os.path.join(ROOT, job["tchseq_out"]), "w", encoding="utf-8")
    else:
        stdout = open(os.path.join(ROOT, job["tchseq_out"]), "w", encoding="utf-8")
    t0 = time.time()
    with contextlib.ExitStack() as stack:
        if stdout is not subprocess.DEVNULL:
            stack.enter_context(stdout)
        p = subprocess.run(argv, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE)
    job["tchseq_argv"] = argv
    job["tchseq_seconds"] = time.time() - t0
    job["tchseq_rc"] = p.returncode
    job["tchseq_stderr"] = p.stderr.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------
# comparison


def read_lines(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read().splitlines()


def interactive_lines(path):
    return [l for l in read_lines(path) if not l.startswith("W-") and not LOG_LINE.match(l)]


def fairseq_score_lines(path):
    """id -> [`H-{id}\t{score}`, `P-{id}\t...`] from fairseq-generate --score-reference output."""
    out = {}
    for l in read_lines(path):
        tag = l.split("\t", 1)[0]
        if tag.startswith("H-"):
            out.setdefault(int(tag[2:]), [None, None])[0] = "\t".join(l.split("\t")[:2])
        elif tag.startswith("P-"):
            out.setdefault(int(tag[2:]), [None, None])[1] = l
    return out


def tchseq_score_lines(path):
    """tchseq score's CSV rendered as fairseq-generate prints it: the base-2 float32 scores."""
    import numpy as np

    ln2 = np.float32(math.log(2))
    out = {}
    with open(os.path.join(ROOT, path), encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            if row["error"]:
                out[i] = [f"H-{i}\terror: {row['error']}", f"P-{i}\terror: {row['error']}"]
                continue
            # fairseq: score = hypo["score"] / math.log(2) on a float32 tensor, printed as
            # "{}".format(tensor) = the Python float of that float32
            h = float(np.float32(row["avg_logprob"]) / ln2)
            # positional_scores.div_(math.log(2)).tolist(), each "{:.4f}"
            p = [float(np.float32(lp) / ln2) for _, lp in json.loads(row["token_logprobs"])]
            out[i] = [f"H-{i}\t{h!r}", "P-{i}\t".format(i=i) + " ".join(f"{x:.4f}" for x in p)]
    return out


def compare(job):
    """Sets job['lines'] (fairseq's lines compared) and job['diffs'] ([(fairseq, tchseq)])."""
    if job["kind"] in parity_kinds.KINDS:
        job["lines"], diffs = parity_kinds.compare(job)
    elif job["kind"] == "interactive":
        want = interactive_lines(job["fairseq_out"])
        got = interactive_lines(job["tchseq_out"]) if os.path.exists(os.path.join(ROOT, job["tchseq_out"])) else []
        n = max(len(want), len(got))
        pad = lambda xs: xs + ["<missing>"] * (n - len(xs))  # noqa: E731
        diffs = [(w, g) for w, g in zip(pad(want), pad(got)) if w != g]
        job["lines"] = len(want)
    else:
        want = fairseq_score_lines(job["fairseq_out"])
        path = os.path.join(ROOT, job["tchseq_out"])
        got = tchseq_score_lines(job["tchseq_out"]) if os.path.exists(path) and job["tchseq_rc"] == 0 else {}
        diffs = []
        for i in sorted(set(want) | set(got)):
            w = want.get(i, ["<missing>", "<missing>"])
            g = got.get(i, ["<missing>", "<missing>"])
            diffs += [(a, b) for a, b in zip(w, g) if a != b]
        job["lines"] = 2 * len(want)
    if job["tchseq_rc"] != 0:
        diffs.insert(0, ("(tchseq exit status 0)", f"(tchseq exit status {job['tchseq_rc']}: "
                                                    f"{job['tchseq_stderr'].strip()[-300:]})"))
    job["diffs"] = diffs


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("PARITY_THREADS", "1")),
                    help="intra-op threads on both sides (fairseq: OMP/MKL_NUM_THREADS; tchseq: --threads)")
    ap.add_argument("--reproducible", action="store_true",
                    help="tchseq --reproducible, fairseq under MKL_CBWR=AVX2,STRICT ATEN_CPU_CAPABILITY=avx2 "
                         "(also when TCHSEQ_REPRODUCIBLE=1)")
    ap.add_argument("--only", help="run only the jobs whose name matches this regular expression")
    ap.add_argument("--workers", type=int, default=0,
                    help="fairseq processes run side by side (default: one per core; the tchseq "
                         "jobs run beside them, one at a time)")
    ap.add_argument("--tchseq", default=os.environ.get("TCHSEQ", os.path.join(ROOT, "target/release/tchseq")))
    ap.add_argument("--no-config-cache", action="store_true",
                    help="run fairseq's config building untouched (slower; see cache_hydra_compose)")
    ap.add_argument("--fairseq-worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fairseq_worker:
        return fairseq_worker(a.fairseq_worker, not a.no_config_cache)

    t_start = time.time()
    os.chdir(ROOT)
    reproducible = a.reproducible or os.environ.get("TCHSEQ_REPRODUCIBLE", "") not in ("", "0")
    if not os.access(a.tchseq, os.X_OK):
        sys.exit(f"error: {a.tchseq} not found: run `make build` first")

    prep, jobs = build_jobs()
    if a.only:
        jobs = [j for j in jobs if re.search(a.only, j["name"])]
        needed = {j["fairseq"][1] for j in jobs}
        prep = [p for p in prep if p["argv"][p["argv"].index("--destdir") + 1] in needed]
    if not jobs:
        sys.exit("error: no job selected")
    shutil.rmtree(WORK, ignore_errors=True)
    for sub in ("fairseq", "tchseq", "pairs", "bin"):
        os.makedirs(f"{WORK}/{sub}", exist_ok=True)

    # the same threads and kernel pins on both sides
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(a.threads)
    fs_env = dict(env)
    fs_env["PYTHONPATH"] = REF + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    fs_env.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    fs_env.setdefault("PYTHONHASHSEED", "0")
    if reproducible:
        fs_env.update(PINNED)

    # fairseq: the preprocessing first, then the jobs, longest first, spread over the workers
    cores = os.cpu_count() or 1
    workers = max(1, min(a.workers or cores, len(jobs)))
    # Units of work, spread longest first over the workers. Measured seconds per run: a
    # --score-reference run ~5 (fairseq-generate composes its config more than once), a
    # --batch-size 1 run ~3 (a DataLoader with a worker process per line), a batched run ~1.
    # A fixture's score jobs go with the preprocessing of their test split, in one unit.
    def cost(j):
        argv = j["fairseq"]
        flag = next((f for f in ("--batch-size", "--max-sentences") if f in argv), None)
        bs = argv[argv.index(flag) + 1] if flag else "1"
        return 5.0 if j["kind"] == "score" else 3.0 if bs == "1" else 1.0

    prep_by_dir = {p["argv"][p["argv"].index("--destdir") + 1]: p for p in prep}
    units = {}
    for j in jobs:
        key = j["fairseq"][1] if j["fairseq"][1] in prep_by_dir else j["name"]
        units.setdefault(key, [prep_by_dir[key]] if key in prep_by_dir else []).append(
            {"argv": j["fairseq"], "out": j["fairseq_out"], "cost": cost(j)})
    shares, load_ = [[] for _ in range(workers)], [0.0] * workers
    for unit in sorted(units.values(), key=lambda u: -sum(x.get("cost", 0.5) for x in u)):
        k = min(range(workers), key=load_.__getitem__)
        shares[k] += unit
        load_[k] += sum(x.get("cost", 0.5) for x in unit)
    procs = []
    for k, share in enumerate(shares):
        if not share:
            continue
        jf = f"{WORK}/fairseq/jobs.{k}.json"
        with open(jf, "w") as f:
            json.dump(share, f, indent=1)
        log = open(f"{WORK}/fairseq/worker.{k}.log", "w")
        procs.append((subprocess.Popen([sys.executable, os.path.abspath(__file__), "--fairseq-worker", jf]
                                       + (["--no-config-cache"] if a.no_config_cache else []),
                                       cwd=ROOT, env=fs_env, stdout=log, stderr=subprocess.STDOUT), log, jf))

    # tchseq: every job, one at a time, while fairseq runs
    t0, cpu0 = time.time(), cpu_seconds(resource.RUSAGE_CHILDREN)
    for j in jobs:
        run_tchseq(j, a.tchseq, a.threads, reproducible, env)
    # (the fairseq workers are not reaped yet, so this is tchseq's alone)
    t_tchseq, cpu_tchseq = time.time() - t0, cpu_seconds(resource.RUSAGE_CHILDREN) - cpu0
    failed = []
    for p, log, jf in procs:
        if p.wait() != 0:
            failed.append(jf)
        log.close()
    t_fairseq = time.time() - t_start
    if failed:
        for p, log, jf in procs:
            sys.stderr.write(open(log.name).read()[-3000:])
        sys.exit(f"error: fairseq worker failed ({', '.join(failed)}); see {WORK}/fairseq/worker.*.log")

    for j in jobs:
        compare(j)

    import torch  # noqa: E402  (the venv's; only for the report header)

    out = []
    pins = ", ".join(f"{k}={env.get(k) if not reproducible else fs_env[k]}" for k in PINNED if (fs_env.get(k) or env.get(k)))
    out.append(f"fairseq 0.12.2 (torch {torch.__version__}) vs {os.path.relpath(a.tchseq, ROOT)}: "
               f"--threads {a.threads}{', reproducible' if reproducible else ''}{', ' + pins if pins else ''}")
    width = max(len(j["name"]) for j in jobs)
    for j in jobs:
        out.append(f"{j['name']:<{width}}  {j['lines']:6d}  {len(j['diffs']):6d}")
    for j in jobs:
        if j["diffs"]:
            out.append(f"--- {j['name']}: {len(j['diffs'])} differing lines; first {min(SHOW, len(j['diffs']))}:")
            out.append("    fairseq: " + " ".join(j["fairseq"]))
            out.append("    tchseq:  " + " ".join(os.path.relpath(x, ROOT) if x == a.tchseq else x for x in j["tchseq_argv"]))
            for w, g in j["diffs"][:SHOW]:
                out.append(f"  fairseq {w}")
                out.append(f"  tchseq  {g}")
    n_lines = sum(j["lines"] for j in jobs)
    n_diff = sum(len(j["diffs"]) for j in jobs)
    out.append(f"parity: {len(jobs)} jobs, {n_lines} lines compared, {n_diff} differing lines")
    elapsed = time.time() - t_start
    cpu_fairseq = sum(float(open(jf + ".cpu").read()) for _, _, jf in procs)
    out.append(f"({elapsed:.0f} s on {cores} cores (load average now {os.getloadavg()[0]:.1f}): "
               f"fairseq {t_fairseq:.0f} s in {len(procs)} processes, {cpu_fairseq:.0f} CPU s; "
               f"tchseq {t_tchseq:.0f} s beside it, {cpu_tchseq:.0f} CPU s; outputs in {WORK}/)")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(f"{WORK}/report.txt", "w", encoding="utf-8") as f:
        f.write(text)
    return 0 if n_diff == 0 and n_lines > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
