#!/usr/bin/env python3
"""Goldens for tchseq's port of sacreBLEU 2.5.1's resampling tests (`--confidence`, `--paired-bs`,
`--paired-ar`; src/metrics/significance.rs).

Runs the installed sacrebleu 2.5.1 CLI on cases under tests/fixtures/sacrebleu/cases/ (written by
reference/sacrebleu_goldens.py), on a larger case made here from /work/shared/data/multi30k (read
only) and on system variants; writes under tests/fixtures/sacrebleu/:
  resampling/multi30k_200_3refs/hyp.txt, ref0.txt, ref1.txt, ref2.txt   the larger case
  resampling/<case>/sys1.txt, sys2.txt   variants of the case's hyp.txt (words dropped or swapped
                                          with random.Random(0))
  resampling.json  [{name, case, nrefs, systems: [paths], seed, argv: [...], rc, error, stdout}]
                   (argv without the files: refs and -i are given by case/systems)
Run from the repository root:  source reference/env.sh && python reference/sacrebleu_resampling_goldens.py
(about two minutes). Fetches nothing.
"""
import gzip
import json
import os
import random
import subprocess
import sys

import sacrebleu

assert sacrebleu.__version__ == "2.5.1", sacrebleu.__version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join("tests", "fixtures", "sacrebleu")
MULTI30K = "/work/shared/data/multi30k"
# a larger case of its own, under resampling/: 200 lines of multi30k's test set with 3 references
LARGE = "multi30k_200_3refs"
CASES = {LARGE: 3, "fairseq_interactive_de": 1, "multi30k_perturbed": 1, "multi30k_perturbed_2refs": 2,
         "empty_lines": 1, "three_refs": 3, "random_small_vocab": 1, "sb_readme_multiref": 2}


def case_dir(case):
    return os.path.join(FIX, "resampling" if case == LARGE else "cases", case)


def write_large_case():
    """The reference, two variants of it as further references, a third as the hypotheses."""
    with gzip.open(os.path.join(MULTI30K, "test_2016_flickr.de.gz"), "rt", encoding="utf-8") as f:
        ref = [next(f).rstrip("\n") for _ in range(200)]
    rng = random.Random(1)

    def vary(lines, p):
        return [" ".join(w for w in l.split() if rng.random() > p) for l in lines]

    d = os.path.join(ROOT, case_dir(LARGE))
    os.makedirs(d, exist_ok=True)
    for name, lines in [("ref0", ref), ("ref1", vary(ref, 0.1)), ("ref2", vary(ref, 0.2)), ("hyp", vary(ref, 0.15))]:
        with open(os.path.join(d, f"{name}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def variants(case):
    """Two deterministic variants of the case's hypotheses: words dropped, then also swapped."""
    with open(os.path.join(ROOT, case_dir(case), "hyp.txt"), encoding="utf-8", newline="\n") as f:
        lines = [l.rstrip() for l in f]
    rng = random.Random(0)
    out = []
    for k in (1, 2):
        sys_lines = []
        for l in lines:
            w = [x for x in l.split() if rng.random() > 0.1 * k]
            if k == 2 and len(w) > 3 and rng.random() < 0.5:
                i = rng.randrange(len(w) - 1)
                w[i], w[i + 1] = w[i + 1], w[i]
            sys_lines.append(" ".join(w))
        d = os.path.join(FIX, "resampling", case)
        os.makedirs(os.path.join(ROOT, d), exist_ok=True)
        path = os.path.join(d, f"sys{k}.txt")
        with open(os.path.join(ROOT, path), "w", encoding="utf-8") as f:
            f.write("\n".join(sys_lines) + "\n")
        out.append(path)
    return out


ALL = ["-m", "bleu", "chrf", "ter"]
# (name, case, test: False for --confidence, True for --paired-bs or "ar" for --paired-ar, seed, args)
RUNS = []
for case in CASES:
    RUNS.append((f"{case}/ci_text", case, False, None, ALL + ["-f", "text"]))
    RUNS.append((f"{case}/ci_json_w2", case, False, None, ALL + ["-w", "2"]))
    RUNS.append((f"{case}/pbs_text", case, True, None, ALL + ["-f", "text", "--paired-bs-n", "200"]))
    RUNS.append((f"{case}/pbs_json_bleu", case, True, None, ["-m", "bleu", "--paired-bs-n", "200"]))
    # TER's averages of three references are summed by BLAS for --paired-ar: not reproduced
    ar_metrics = ALL if CASES[case] < 3 else ["-m", "bleu", "chrf"]
    RUNS.append((f"{case}/par_text", case, "ar", None, ar_metrics + ["-f", "text", "--paired-ar-n", "300"]))
    RUNS.append((f"{case}/par_json", case, "ar", "7", ar_metrics + ["--paired-ar-n", "200"]))
for name, case, systems, seed, args in [
    ("seed7_cin100_text", "fairseq_interactive_de", False, "7", ALL + ["-f", "text", "--confidence-n", "100"]),
    ("seed7_cin100_json", "multi30k_perturbed_2refs", False, "7", ALL + ["--confidence-n", "100", "-w", "3"]),
    ("seed_raw_text", "fairseq_interactive_de", False, " 0_07", ["-m", "bleu", "-f", "text", "--confidence-n", "50"]),
    ("seed_big", "multi30k_perturbed", False, "123456789012345678901234567890", ["-m", "bleu", "chrf", "-f", "text"]),
    ("ci_short_b", "multi30k_perturbed", False, None, ALL + ["-f", "text", "--short", "-b"]),
    ("ci_json_b", "multi30k_perturbed", False, None, ALL + ["-b"]),
    ("ci_smooth_floor", "multi30k_perturbed", False, None, ["-m", "bleu", "-f", "text", "-s", "floor", "--confidence-n", "300"]),
    ("ci_smooth_addk", "sb_readme_multiref", False, None, ["-m", "bleu", "-f", "text", "-s", "add-k", "--confidence-n", "300"]),
    ("ci_chrfpp_eps", "multi30k_perturbed", False, None, ["-m", "chrf", "-f", "text", "--chrf-word-order", "2", "--chrf-eps-smoothing"]),
    ("cin1", "multi30k_perturbed", False, None, ALL + ["-f", "text", "--confidence-n", "1"]),
    ("cin0", "multi30k_perturbed", False, None, ALL + ["-f", "text", "--confidence-n", "0"]),
    ("pbs_seed7_w2_short", "multi30k_perturbed", True, "7", ALL + ["-f", "text", "-w", "2", "--short"]),
    ("pbs_default_n", "fairseq_interactive_de", True, None, ["-m", "ter", "bleu", "-f", "text"]),
    ("pbs_n0", "fairseq_interactive_de", True, None, ["-m", "bleu", "-f", "text", "--paired-bs-n", "0"]),
    ("pbs_json_ter_fails", "fairseq_interactive_de", True, None, ["-m", "ter", "--paired-bs-n", "100"]),
    ("par_default_n", "multi30k_perturbed", "ar", None, ["-m", "bleu", "chrf", "-f", "text", "--short"]),
    ("par_addk_sv", "multi30k_perturbed", "ar", None, ["-m", "bleu", "-f", "text", "-s", "add-k", "-sv", "1.5", "--paired-ar-n", "500"]),
    ("par_n0", "fairseq_interactive_de", "ar", None, ["-m", "bleu", "-f", "text", "--paired-ar-n", "0"]),
]:
    RUNS.append((name, case, systems, seed, args))


def main():
    write_large_case()
    goldens = []
    for name, case, multi, seed, args in RUNS:
        nrefs = CASES[case]
        d = case_dir(case)
        refs = [os.path.join(d, f"ref{k}.txt") for k in range(nrefs)]
        systems = [os.path.join(d, "hyp.txt")] + (variants(case) if multi else [])
        test = ["--paired-ar"] if multi == "ar" else ["--paired-bs"] if multi else ["--confidence"]
        argv = [sys.executable, "-m", "sacrebleu", *refs, "-i", *systems, *test, *args, "--no-color", "-q"]
        env = dict(os.environ)
        env.pop("SACREBLEU_FORMAT", None)
        env.pop("PYTHONPATH", None)
        env.pop("SACREBLEU_SEED", None)
        if seed is not None:
            env["SACREBLEU_SEED"] = seed
        p = subprocess.run(argv, cwd=ROOT, capture_output=True, env=env)
        # sacreBLEU itself fails on some (float32 scores mixed with floats, or in JSON): the
        # error's last line is kept
        error = p.stderr.decode("utf-8").strip().splitlines()[-1] if p.returncode else None
        goldens.append({"name": name, "case": case, "nrefs": nrefs, "systems": systems, "seed": seed,
                        "argv": ["sacrebleu", *test, *args], "rc": p.returncode, "error": error,
                        "stdout": p.stdout.decode("utf-8")})
    with open(os.path.join(ROOT, FIX, "resampling.json"), "w", encoding="utf-8") as f:
        json.dump(goldens, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(goldens)} resampling goldens", file=sys.stderr)


if __name__ == "__main__":
    main()
