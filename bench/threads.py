#!/usr/bin/env python3
"""OpenMP's waiting on a busy machine: `tchseq translate` timed as whole processes, quiet and
beside a competing load (one process spinning on one core), under each thread setting.

Each setting runs in turn with the others (A B C ... A B C ...), so that drift in the machine's
speed touches all alike; the table gives the median wall seconds and its ratio to `--threads 1`
under the same condition. Writes Markdown to stdout (docs/performance.md keeps the last run).

Usage: python3 bench/threads.py [--runs 5] [--lines 40,300] [--compute-type exact] [--batch-size 32]
"""
import argparse
import gzip
import os
import statistics
import subprocess
import sys
import tempfile
import time

import cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCHSEQ = os.path.join(ROOT, "target", "release", "tchseq")
MODEL = os.path.join(ROOT, "weights", "multi30k.en-de")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data", "multi30k", "test_2016_flickr.en.gz")

# name, --threads, environment added (tchseq's own default is what it sets when nothing is set)
SETTINGS = [
    ("--threads 1", "1", {}),
    ("--threads 2, tchseq's default (3,000 spins; PASSIVE beside a runnable task)", "2", {}),
    ("--threads 2, GOMP_SPINCOUNT=3000", "2", {"GOMP_SPINCOUNT": "3000"}),
    ("--threads 2, GOMP_SPINCOUNT=10000", "2", {"GOMP_SPINCOUNT": "10000"}),
    ("--threads 2, GOMP_SPINCOUNT=1000", "2", {"GOMP_SPINCOUNT": "1000"}),
    ("--threads 2, libgomp's default (GOMP_SPINCOUNT=300000)", "2", {"GOMP_SPINCOUNT": "300000"}),
    ("--threads 2, OMP_WAIT_POLICY=PASSIVE", "2", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("--threads 2, GOMP_SPINCOUNT=300", "2", {"GOMP_SPINCOUNT": "300"}),
]


def run(threads, env, path, extra):
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    e.update(env)
    start = time.monotonic()
    subprocess.run([TCHSEQ, "--threads", threads, "translate", "-m", MODEL, "--input", path] + extra,
                   env=e, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--lines", default="40,300")
    ap.add_argument("--compute-type", default="exact")
    ap.add_argument("--batch-size", default="32")
    a = ap.parse_args()
    extra = ["--compute-type", a.compute_type, "--batch-size", a.batch_size]
    with gzip.open(SHARED, "rt", encoding="utf-8") as f:
        corpus = f.read().splitlines()
    print(f"CPU: {cpu.describe()}, {os.cpu_count()} cores; `translate --compute-type {a.compute_type} --batch-size {a.batch_size}` "
          f"of the bundled model (beam 5), whole processes, "
          f"median of {a.runs} runs in turn; load: one process spinning on one core.\n")
    print("| lines | condition | setting | wall s (median) | × `--threads 1` |")
    print("|---:|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, a.lines.split(",")):
            path = os.path.join(tmp, f"in{n}.en")
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(corpus[:n]) + "\n")
            for condition in ("quiet", "loaded"):
                spinner = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if condition == "loaded" else None
                try:
                    run("1", {}, path, extra)  # warm-up: page cache
                    times = {name: [] for name, _, _ in SETTINGS}
                    for _ in range(a.runs):
                        for name, threads, env in SETTINGS:
                            times[name].append(run(threads, env, path, extra))
                finally:
                    if spinner:
                        spinner.kill()
                        spinner.wait()
                base = statistics.median(times[SETTINGS[0][0]])
                for name, _, _ in SETTINGS:
                    m = statistics.median(times[name])
                    print(f"| {n} | {condition} | {name} | {m:.2f} | {m / base:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
