#!/usr/bin/env python3
"""The prepared GPU check (docs/gpu.md): one command, one Markdown report.

    python gpu/check.py OUT [--device cuda|cpu] [--tchseq BIN] [--libtorch DIR] [--python PY]

Runs tchseq (the libtorch 2.11 build, gpu/bin/tchseq, on the machine's own torch) on the bundled
model, the committed fixtures and a transformer-base-size model made there with PyTorch
(gpu/make_base_model.py), and writes OUT/report.md, OUT/results.json and every raw output under
OUT/raw/:
  * parity: `exact` on the device against the committed fairseq goldens (the same hypotheses,
    or a near-tie proven by force-decoding, and scores within 1e-4), and `verify` on the fixtures;
  * fidelity: float16 and bfloat16 (and float32) against exact on Multi30k's test_2016_flickr
    (1,000 sentences): hypotheses equal, and BLEU (sacreBLEU where it imports, else the same
    13a-tokenized corpus BLEU computed here);
  * speed: batch-32 and batch-128 throughput (target tokens/s) and batch-1 latency for every
    compute type on both models, start-up time, and the peak memory (libtorch's CUDA allocator
    statistics, through TCHSEQ_MEMORY_REPORT);
  * cuda_graph: the decoder step replayed as a CUDA graph (TCHSEQ_CUDA_GRAPH=1) beside the eager
    fixed-shape step: the same hypotheses, and both timed (on the CPU: the setting refused, and
    the hypotheses unchanged);
  * a reference on the same device: fairseq 0.12.2 (from --pylib, which gpu/fairseq.sh prepares
    for the GPU machines, else where PY imports it), run beside tchseq: fp32 and --fp16 line for
    line against tchseq's exact in fp32 and fp16 (the same libtorch on both sides), and time.

Each step records what failed and the script goes on; the exit status is 1 when a parity or
fidelity check failed, 2 on a usage error. `--device cpu` is the dry run (`make gpu-dry-run`): the
same steps on fewer sentences.
"""
import argparse
import csv
import gzip
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter

from cuda_graph import cuda_graph
from speed import cpu_threads, speed, test_set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLED = os.path.join(ROOT, "weights/multi30k.en-de")
BUNDLED_INPUT = os.path.join(ROOT, "tests/fixtures/bundled/input.en")
FIXTURES = os.path.join(ROOT, "tests/fixtures/models")
COMPUTE_TYPES = ["exact", "float32", "float16", "bfloat16"]
# sampling draws from the device's generator: no golden holds on another device
PARITY_SETS = ["beam5", "beam4_lenpen0.6_nbest3", "beam1", "beam5_minlen3_maxlen_unkpen2", "beam5_ngram2"]
SCORE_TOL = 1e-4
POSITIONAL_TOL = 1e-4 + 1e-9  # P- lines print 4 decimals


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tchseq", default=os.path.join(ROOT, "gpu/bin/tchseq"))
    p.add_argument("--libtorch", help="the torch package directory (default: PY's torch)")
    p.add_argument("--python", default=sys.executable, help="a Python with torch (and fairseq, for the reference)")
    p.add_argument("--pylib", default=os.path.join(ROOT, "gpu/pylib"),
                   help="fairseq and the packages it needs, from gpu/fairseq.sh (used when it exists)")
    p.add_argument("--sentences", type=int, help="test_2016_flickr sentences (default: 1000 on cuda, 100 on cpu)")
    p.add_argument("--steps", help="a comma-separated subset, run in that order, of parity,fidelity,speed,cuda_graph,cpu_threads,fairseq (the environment always "
                   "runs)")
    p.add_argument("--compute-types", default=",".join(COMPUTE_TYPES),
                   help="a comma-separated subset of the compute types the speed step times")
    p.add_argument("--repeat", type=int, help="how many times the batch-32 and batch-128 runs read their input, so that each "
                   "rests on seconds, not on its start-up (default: 4 on cuda, 1 on cpu)")
    p.add_argument("--deadline", type=float, help="seconds the whole check may take: a run that would pass it is cut short or "
                   "skipped, and the report is written with what finished")
    a = p.parse_args()
    a.dry = a.device == "cpu"
    a.sentences = a.sentences or (100 if a.dry else 1000)
    a.repeat = a.repeat or (1 if a.dry else 4)
    a.compute_types = a.compute_types.split(",")
    unknown = set(a.compute_types) - set(COMPUTE_TYPES)
    if unknown:
        p.error(f"--compute-types: unknown {', '.join(sorted(unknown))}; choose from {', '.join(COMPUTE_TYPES)}")
    return a


class OutOfTime(Exception):
    pass


class Check:
    def __init__(self, a):
        self.a = a
        self.ends = time.monotonic() + a.deadline if a.deadline else None
        self.out = os.path.abspath(a.out)
        self.raw = os.path.join(self.out, "raw")
        os.makedirs(self.raw, exist_ok=True)
        self.results = {"device": a.device, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "failures": []}
        self.env = dict(os.environ)
        self.env["LIBTORCH"] = a.libtorch or self.torch_dir()
        self.env.pop("TCHSEQ_MEMORY_REPORT", None)

    def torch_dir(self):
        code = "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('torch').origin))"
        return subprocess.run([self.a.python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()

    def fail(self, what):
        print(f"FAIL: {what}", file=sys.stderr)
        self.results["failures"].append(what)

    def run(self, name, cmd, stdin=None, env=None, timeout=900):
        """Runs cmd, keeps its stdout/stderr under raw/, returns (rc, stdout, seconds)."""
        if self.ends is not None:
            left = self.ends - time.monotonic()
            if left < 3:
                raise OutOfTime(f"{name} not run: the --deadline has passed")
            timeout = min(timeout, left)
        started = time.perf_counter()
        try:
            p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env or self.env, timeout=timeout)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = 124, e.stdout or "", f"timed out after {timeout} s"
            out = out.decode() if isinstance(out, bytes) else out
        seconds = time.perf_counter() - started
        with open(os.path.join(self.raw, f"{name}.out"), "w") as f:
            f.write(out)
        with open(os.path.join(self.raw, f"{name}.err"), "w") as f:
            f.write(f"$ {' '.join(map(str, cmd))}\n# rc {rc}, {seconds:.2f} s\n{err}")
        print(f"   {name}: rc {rc}, {seconds:.1f} s", file=sys.stderr, flush=True)
        if rc != 0:
            self.fail(f"{name}: exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}")
        return rc, out, seconds

    def tchseq(self, name, args, stdin=None, env=None):
        """tchseq on the device, with `env` added to the environment; returns (rc, stdout,
        seconds, memory report or None)."""
        env = {**self.env, **(env or {})}
        memory = os.path.join(self.raw, f"{name}.memory.json")
        env["TCHSEQ_MEMORY_REPORT"] = memory
        rc, out, seconds = self.run(name, [self.a.tchseq, "--device", self.a.device, *args], stdin, env)
        report = json.load(open(memory)) if os.path.exists(memory) else None
        return rc, out, seconds, report


# ---------------------------------------------------------------------------------------------
# fairseq's interactive output, compared as tests/it/util/fairseq_out.rs compares it


def parse_fairseq(text):
    """{id: {"S": src, "hyps": [(score, tokens, [positional])]}} from S-/H-/P- lines."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([SHP])-(\d+)\t(.*)$", line)
        if not m:
            continue
        kind, i, rest = m.group(1), int(m.group(2)), m.group(3)
        e = out.setdefault(i, {"S": None, "hyps": []})
        if kind == "S":
            e["S"] = rest
        elif kind == "H":
            score, _, tokens = rest.partition("\t")
            e["hyps"].append([float(score), tokens, None])
        else:
            e["hyps"][-1][2] = [float(x) for x in rest.split()]
    return out


def compare(golden, ours):
    """Counts and the hypotheses whose tokens differ: (id, k, src, fairseq's, ours, fairseq's score, ours)."""
    c = {"hyps": 0, "same_tokens": 0, "max_h": 0.0, "max_p": 0.0, "differing": [], "errors": []}
    if sorted(golden) != sorted(ours):
        c["errors"].append(f"ids differ: {len(golden)} golden, {len(ours)} ours")
    for i, g in golden.items():
        o = ours.get(i)
        if o is None:
            continue
        if g["S"] != o["S"]:
            c["errors"].append(f"S-{i} differs")
        if len(g["hyps"]) != len(o["hyps"]):
            c["errors"].append(f"id {i}: {len(g['hyps'])} hypotheses golden, {len(o['hyps'])} ours")
        for k, (gh, oh) in enumerate(zip(g["hyps"], o["hyps"])):
            c["hyps"] += 1
            if gh[1] != oh[1]:
                c["differing"].append((i, k, g["S"], gh[1], oh[1], gh[0], oh[0]))
                continue
            c["same_tokens"] += 1
            c["max_h"] = max(c["max_h"], abs(gh[0] - oh[0]))
            if gh[2] and oh[2]:
                c["max_p"] = max(c["max_p"], max(abs(x - y) for x, y in zip(gh[2], oh[2])))
    if c["max_h"] > SCORE_TOL:
        c["errors"].append(f"a score differs by {c['max_h']:.2e}")
    if c["max_p"] > POSITIONAL_TOL:
        c["errors"].append(f"a positional score differs by {c['max_p']:.2e}")
    return c


def settle_near_ties(check, name, model_args, c, lenpen=1.0, unkpen=0.0):
    """A differing hypothesis is a near-tie when ours, force-decoded on the device, scores within
    the tolerance of fairseq's golden score for its own hypothesis."""
    if not c["differing"]:
        return
    pairs = os.path.join(check.raw, f"{name}.force.csv")
    with open(pairs, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["src", "tgt"])
        for d in c["differing"]:
            w.writerow([d[2], d[4]])
    rc, out, _, _ = check.tchseq(f"{name}.force", ["score", "-q", "--tokenized", *model_args, "--input", pairs])
    rows = list(csv.DictReader(io.StringIO(out))) if rc == 0 else []
    kept, c["near_ties"] = [], []
    for d, row in zip(c["differing"], rows + [None] * (len(c["differing"]) - len(rows))):
        if row is None or row.get("error"):
            kept.append(d)
            continue
        unks = d[4].split().count("<unk>")
        forced = (float(row["logprob"]) - unkpen * unks) / float(row["tokens"]) ** lenpen / math.log(2)
        if abs(forced - d[5]) <= SCORE_TOL and abs(forced - d[6]) <= SCORE_TOL:
            c["near_ties"].append({"id": d[0], "fairseq": d[3], "ours": d[4], "fairseq_score": d[5], "forced": forced})
        else:
            kept.append(d)
    c["differing"] = kept


def option_value(opts, flag, default):
    return float(opts[opts.index(flag) + 1]) if flag in opts else default


def parity(check):
    a = check.a
    rows = check.results["parity"] = []
    bundled = ["-m", BUNDLED]
    for tag, opts in [("batch16", ["--buffer-size", "1024", "--batch-size", "16"]), ("batch1", ["--batch-size", "1"])]:
        name = f"parity.bundled.{tag}"
        _, out, seconds, _ = check.tchseq(name, ["translate", *bundled, "--format", "fairseq", "--beam", "5", "--input", BUNDLED_INPUT, *opts])
        golden = open(os.path.join(ROOT, f"tests/fixtures/bundled/interactive_{tag}.txt")).read()
        c = compare(parse_fairseq(golden), parse_fairseq(out))
        settle_near_ties(check, name, bundled, c)
        rows.append(parity_row(check, f"bundled {tag}", c, seconds))
    manifest = json.load(open(os.path.join(FIXTURES, "manifest.json")))
    src = os.path.join(ROOT, manifest["inputs"]["src"])
    for fx in manifest["fixtures"]:
        d = os.path.join(ROOT, fx["dir"])
        model = ["-m", d, "-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none"]
        for s in PARITY_SETS:
            opts = manifest["option_sets"][s]
            if "--no-repeat-ngram-size" in opts:
                # the goldens' fairseq blocks nothing there (its Python fallback; docs/gpu.md)
                opts = [*opts, "--fairseq-compat-ngram"]
            name = f"parity.{fx['name']}.{s}"
            _, out, seconds, _ = check.tchseq(name, ["translate", *model, "--format", "fairseq", "--batch-size", "16",
                                                     "--buffer-size", "1024", "--input", src, *opts])
            c = compare(parse_fairseq(open(os.path.join(d, f"interactive/{s}.txt")).read()), parse_fairseq(out))
            settle_near_ties(check, name, ["-m", d, "-s", "src", "-t", "tgt"], c,
                             lenpen=option_value(opts, "--lenpen", 1.0), unkpen=option_value(opts, "--unkpen", 0.0))
            rows.append(parity_row(check, f"{fx['name']} {s}", c, seconds))
    verify = check.results["verify"] = []
    for fx in manifest["fixtures"]:
        d = os.path.join(ROOT, fx["dir"])
        for ref in sorted(f for f in os.listdir(d) if f.startswith("verify_") and f.endswith(".pt")):
            name = f"verify.{fx['name']}.{ref[:-3]}"
            rc, out, _, _ = check.tchseq(name, ["verify", "-m", d, "--reference", os.path.join(d, ref), "--json"])
            try:
                r = json.loads(out)
                verify.append({"fixture": fx["name"], "reference": ref, "passed": r["passed"], "failed": r["failed"],
                               "tolerance": r["tolerance"], "tensors": [verify_tensor(t, r["tolerance"]) for t in r["tensors"]]})
            except (ValueError, KeyError):
                verify.append({"fixture": fx["name"], "reference": ref, "passed": 0, "failed": None})
                check.fail(f"{name}: no report (exit {rc})")


def verify_tensor(t, tolerance):
    """One row of a verify report, with its difference in units of the derived bound's
    eps * max|ref| * depth and its rescale in eps (docs/commands.md, "Tolerances")."""
    row = {k: t.get(k) for k in ("name", "status", "depth", "max_abs_diff", "scale", "rescale", "rescale_se")}
    eps = tolerance.get("eps")
    if eps and t.get("depth") and t.get("scale") and t.get("max_abs_diff") is not None:
        row["units"] = t["max_abs_diff"] / (eps * t["scale"] * t["depth"])
    if eps and t.get("rescale") is not None:
        row["rescale_eps"] = t["rescale"] / eps
        row["rescale_standard_errors"] = abs(t["rescale"]) / t["rescale_se"] if t["rescale_se"] else 0.0
    return row


def parity_row(check, what, c, seconds):
    row = {"run": what, "hypotheses": c["hyps"], "same_tokens": c["same_tokens"], "near_ties": len(c.get("near_ties", [])),
           "differing": len(c["differing"]), "max_score_diff": c["max_h"], "max_positional_diff": c["max_p"],
           "errors": c["errors"], "seconds": seconds}
    if c["differing"] or c["errors"]:
        check.fail(f"parity {what}: {len(c['differing'])} hypotheses differ; {'; '.join(c['errors'])}")
    return row


# ---------------------------------------------------------------------------------------------
# fidelity: BLEU as sacreBLEU computes it (13a tokenization, exp smoothing)


def tokenize_13a(line):
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
    line = f" {line} "
    line = re.sub(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 ", line)
    line = re.sub(r"([^0-9])([\.,])", r"\1 \2 ", line)
    line = re.sub(r"([\.,])([^0-9])", r" \1 \2", line)
    line = re.sub(r"([0-9])(-)", r"\1 \2 ", line)
    return line.split()


def corpus_bleu(hyps, refs):
    """(BLEU, which implementation)."""
    try:
        import sacrebleu
        return sacrebleu.corpus_bleu(hyps, [refs]).score, f"sacreBLEU {sacrebleu.__version__}"
    except ImportError:
        pass
    matches, totals, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for h, r in zip(hyps, refs):
        h, r = tokenize_13a(h), tokenize_13a(r)
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, rc[g]) for g, c in hc.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    smooth, precisions = 1.0, []
    for m, t in zip(matches, totals):
        if t == 0:
            precisions.append(0.0)
        elif m == 0:
            smooth *= 2
            precisions.append(100.0 / (smooth * t))
        else:
            precisions.append(100.0 * m / t)
    if min(precisions) <= 0:
        return 0.0, "13a BLEU (computed here)"
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / max(hyp_len, 1))
    return bp * math.exp(sum(math.log(p) for p in precisions) / 4), "13a BLEU (computed here; sacreBLEU does not import)"


def fidelity(check):
    src, refs = test_set(check)
    runs = {}
    for ct in COMPUTE_TYPES:
        _, out, seconds, _ = check.tchseq(f"fidelity.{ct}", ["translate", "-m", BUNDLED, "--compute-type", ct, "--beam", "5",
                                                             "--batch-size", "32", "--buffer-size", "1024", "--input", src])
        runs[ct] = out.splitlines()
    exact = runs["exact"]
    rows = []
    for ct, hyps in runs.items():
        if len(hyps) != len(refs):
            check.fail(f"fidelity {ct}: {len(hyps)} lines for {len(refs)} sentences")
            continue
        bleu, how = corpus_bleu(hyps, refs)
        same = sum(h == e for h, e in zip(hyps, exact))
        rows.append({"compute_type": ct, "same_as_exact": same, "sentences": len(refs), "bleu": bleu})
        check.results["bleu_by"] = how
    by = {r["compute_type"]: r for r in rows}
    for ct in ("float16", "bfloat16"):
        r = by.get(ct)
        if r and "exact" in by and (r["same_as_exact"] < 0.99 * r["sentences"] or abs(r["bleu"] - by["exact"]["bleu"]) > 0.1):
            check.results.setdefault("goals_missed", []).append(
                f"{ct}: {r['same_as_exact']}/{r['sentences']} hypotheses equal to fp32, BLEU {r['bleu']:.2f} against {by['exact']['bleu']:.2f}")
    check.results["fidelity"] = rows


# ---------------------------------------------------------------------------------------------
# speed


# ---------------------------------------------------------------------------------------------
# fairseq on the same device


CYTHON_BUILD = """
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
names = ["data_utils_fast", "token_block_utils_fast"]
exts = [Extension(f"fairseq.data.{n}", [f"fairseq/data/{n}.pyx"], language="c++", extra_compile_args=["-std=c++11"],
                  include_dirs=[numpy.get_include()]) for n in names]
setup(name="fairseq-cython", ext_modules=cythonize(exts, language_level=3, quiet=True), script_args=["build_ext", "--inplace", "-q"])
"""


def install_pylib(check):
    """gpu/fairseq.sh's wheels and fairseq sources into OUT/site, with fairseq's Cython modules built."""
    site = os.path.join(check.out, "site")
    shutil.rmtree(site, ignore_errors=True)
    wheels = [os.path.join(check.a.pylib, "wheels", w) for w in sorted(os.listdir(os.path.join(check.a.pylib, "wheels")))]
    rc, _, _ = check.run("fairseq.install", [check.a.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                                             "--target", site, *wheels])
    if rc == 0:
        rc, _, _ = check.run("fairseq.unpack", ["tar", "-xzf", os.path.join(check.a.pylib, "fairseq.tgz"), "-C", site])
    if rc == 0:
        env = dict(check.env)
        env["PYTHONPATH"] = site
        started = time.perf_counter()
        p = subprocess.run([check.a.python, "-c", CYTHON_BUILD], cwd=site, capture_output=True, text=True, env=env)
        with open(os.path.join(check.raw, "fairseq.cython.err"), "w") as f:
            f.write(f"# rc {p.returncode}, {time.perf_counter() - started:.1f} s\n{p.stdout}{p.stderr}")
        rc = p.returncode
    return site if rc == 0 else None


def fairseq(check):
    site = install_pylib(check) if os.path.isdir(check.a.pylib) else None
    probe = subprocess.run([check.a.python, "-c", "import fairseq; print(fairseq.__version__, fairseq.__file__)"], capture_output=True,
                           text=True, env=fairseq_env(check, site))
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ""
        check.results["fairseq"] = {"ran": False, "why": f"{check.a.python} does not import fairseq ({why}); gpu/fairseq.sh prepares it"}
        return
    src, _ = test_set(check)
    base = [check.a.python, "-m", "fairseq_cli.interactive", BUNDLED, "--path", f"{BUNDLED}/model.pt", "-s", "en", "-t", "de",
            "--tokenizer", "moses", "--bpe", "subword_nmt", "--bpe-codes", f"{BUNDLED}/bpecodes", "--beam", "5"]
    if check.a.dry:
        base.append("--cpu")
    env = fairseq_env(check, site)
    version, _, where = probe.stdout.strip().partition(" ")
    # kept as it grows, so that a run cut short by --deadline still reports what finished
    result = check.results["fairseq"] = {"ran": True, "version": version, "from": where}
    keep = lambda text: [l for l in text.splitlines() if re.match(r"^[SHDPA]-\d", l)]
    # line for line beside tchseq's exact arithmetic (the same libtorch on both sides): fp32, and
    # --fp16 against --dtype fp16 (fairseq's model.half())
    for tag, theirs_opts, ours_opts in [("fp32", [], []), ("fp16", ["--fp16"], ["--dtype", "fp16"])]:
        for batching in (["--buffer-size", "1024", "--batch-size", "16"], ["--batch-size", "1"]):
            name = f"{tag}.b{batching[-1]}"
            opts = ["--input", BUNDLED_INPUT, *batching]
            _, theirs, _ = check.run(f"fairseq.bundled.{name}", [*base, *opts, *theirs_opts], env=env)
            _, ours, _, _ = check.tchseq(f"fairseq.tchseq.bundled.{name}",
                                         ["translate", "-m", BUNDLED, "--format", "fairseq", "--beam", "5", *opts, *ours_opts])
            t, o = keep(theirs), keep(ours)
            identical = sum(x == y for x, y in zip(t, o)) if len(t) == len(o) else 0
            result.setdefault("line_for_line", []).append({"run": name, "lines": len(t), "identical": identical})
            if not t or identical != len(t):
                check.results.setdefault("goals_missed", []).append(f"fairseq {name}: {identical} of {len(t)} lines identical")
    # speed: --fp16 at batch 128 on the test set, beside tchseq float16 (both with start-up)
    opts = ["--input", src, "--buffer-size", "1024", "--batch-size", "128"]
    rc, theirs, seconds = check.run("fairseq.test.fp16.b128", [*base, *opts, "--fp16"], env=env)
    _, ours, ours_seconds, _ = check.tchseq("fairseq.tchseq.test.float16.b128",
                                            ["translate", "-m", BUNDLED, "--format", "fairseq", "--beam", "5", "--compute-type", "float16", *opts])
    c = compare(parse_fairseq(theirs), parse_fairseq(ours))
    result.update({"fp16_hypotheses": c["hyps"], "fp16_same_hypotheses": c["same_tokens"],
                   "fp16_b128_seconds": seconds if rc == 0 else None, "tchseq_float16_b128_seconds": ours_seconds})
    # fairseq's own --fp16 beside fp32 (fidelity's exact run, which the parity step ties to
    # fairseq's fp32): what float16 can be held to
    detok = {}
    for line in theirs.splitlines():
        m = re.match(r"^D-(\d+)\t[^\t]*\t(.*)$", line)
        if m:
            detok[int(m.group(1))] = m.group(2)
    exact_path = os.path.join(check.raw, "fidelity.exact.out")
    if rc == 0 and os.path.exists(exact_path):
        exact = open(exact_path).read().splitlines()
        hyps = [detok.get(i, "") for i in range(len(exact))]
        _, refs = test_set(check)
        result.update({"fp16_same_as_fp32": sum(h == e for h, e in zip(hyps, exact)), "fp16_sentences": len(exact),
                       "fp16_bleu": corpus_bleu(hyps, refs)[0]})
    check.results["fairseq"] = result


def fairseq_env(check, site):
    env = dict(check.env)
    # reference/sitecustomize.py: fairseq 0.12.2's three fixes for Python 3.11+ and torch 2.x
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.join(ROOT, "reference"), site, env.get("PYTHONPATH", "")] if p)
    return env


# ---------------------------------------------------------------------------------------------


def environment(check):
    e = {}
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], capture_output=True, text=True)
        e["gpu"] = q.stdout.strip()
    rc, out, _, _ = check.tchseq("doctor", ["doctor", "--json"])
    if rc == 0:
        d = json.loads(out)
        e.update({k: d.get(k) for k in ("libtorch_version", "libtorch_dir", "cuda_available", "cuda_device_count", "cudnn_version",
                                       "cpu_model", "cpu_vector_isa", "intra_op_threads")})
    check.results["environment"] = e


def main():
    a = parse_args()
    if not os.access(a.tchseq, os.X_OK):
        print(f"error: {a.tchseq} is not an executable tchseq (run `make gpu-bundle`, or pass --tchseq)", file=sys.stderr)
        return 2
    check = Check(a)
    steps = [("environment", environment), ("parity", parity), ("fidelity", fidelity), ("speed", speed), ("cuda_graph", cuda_graph),
             ("fairseq", fairseq), ("cpu_threads", cpu_threads)]
    timings = {}
    if a.steps:
        # the order given, so that a short lease measures what matters most first
        known = dict(steps)
        wanted = [n for n in a.steps.split(",") if n and n != "environment"]
        unknown = [n for n in wanted if n not in known]
        if unknown:
            print(f"error: --steps: unknown step {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
            return 2
        steps = [("environment", environment)] + [(n, known[n]) for n in wanted]
    check.steps = [n for n, _ in steps]
    for name, step in steps:
        started = time.perf_counter()
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            step(check)
        except OutOfTime as e:
            check.results.setdefault("out_of_time", []).append(f"{name}: {e}")
            check.fail(f"{name}: {e}")
        except Exception as e:  # a broken step must not lose the others' results
            check.fail(f"{name}: {type(e).__name__}: {e}")
        timings[name] = time.perf_counter() - started
        if name == "environment" and a.device == "cuda" and not check.results.get("environment", {}).get("cuda_available"):
            check.fail("tchseq sees no CUDA device (raw/doctor.err); the other steps are not run")
            break
        with open(os.path.join(check.out, "results.json"), "w") as f:
            json.dump({**check.results, "step_seconds": timings}, f, indent=1)
    check.results["step_seconds"] = timings
    with open(os.path.join(check.out, "results.json"), "w") as f:
        json.dump(check.results, f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report
    with open(os.path.join(check.out, "report.md"), "w") as f:
        f.write(report.render(check.results))
    print(f"wrote {check.out}/report.md ({len(check.results['failures'])} failures)", file=sys.stderr)
    return 1 if check.results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
