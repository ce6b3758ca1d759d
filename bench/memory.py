"""Peak RSS and throughput of `tchseq score` and `tchseq translate` as the input grows (rows of
Multi30k train, repeated): the bounded-memory check. Writes bench/memory-results.md.

    python bench/memory.py [--score-rows 10000,100000,1000000] [--translate-lines 10000,100000] [--threads 2]
                           [--beam 5] [--trace] [--out bench/memory-results.md]

Each size is one process, start to exit; peak RSS is the child's ru_maxrss (wait4). Default
batching: score as fairseq-generate (--max-tokens 12000), translate as a file (--max-tokens 512,
2,048-line buffers).
"""
import argparse
import csv
import datetime
import gzip
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import cpu

ROOT = Path(__file__).resolve().parent.parent
TCHSEQ = str(ROOT / "target" / "release" / "tchseq")
MODEL = str(ROOT / "weights" / "multi30k.en-de")


def lines(data, lang):
    with gzip.open(data / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def run(argv):
    """(seconds, peak RSS in MB) of one process."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench/memory: {' '.join(argv)} failed: {err}")
    return seconds, usage.ru_maxrss / 1024


def run_traced(argv, milestones):
    """(seconds, peak RSS in MB, {line: resident MB}) of one `translate` process: its resident
    size is read from /proc every half second and noted when its output first reaches each of
    `milestones` lines, so growth within one run shows apart from start-up."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    count = [0]

    def read_lines():
        for chunk in iter(lambda: proc.stdout.read(1 << 16), b""):
            count[0] += chunk.count(b"\n")

    reader = threading.Thread(target=read_lines, daemon=True)
    reader.start()
    at, pending = {}, sorted(milestones)
    while reader.is_alive():
        reader.join(0.5)
        try:
            rss = next(int(l.split()[1]) for l in open(f"/proc/{proc.pid}/status") if l.startswith("VmRSS:"))
        except (OSError, StopIteration):
            break
        while pending and count[0] >= pending[0]:
            at[pending.pop(0)] = rss / 1024
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench/memory: {' '.join(argv)} failed: {proc.stderr.read().decode(errors='replace')}")
    return seconds, usage.ru_maxrss / 1024, at


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--score-rows", default="10000,100000,1000000")
    p.add_argument("--translate-lines", default="10000,100000")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam", type=int, default=5, help="translate's beam (1: greedy, for a quicker 1M-line run)")
    p.add_argument("--trace", action="store_true",
                   help="also note translate's resident size at 10k, 100k and 1M lines within its largest run")
    p.add_argument("--out", default=str(ROOT / "bench" / "memory-results.md"))
    args = p.parse_args()
    data = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data" / "multi30k"))
    work = ROOT / "bench" / "work" / "memory"
    work.mkdir(parents=True, exist_ok=True)
    en, de = lines(data, "en"), lines(data, "de")
    rows, traced = [], []
    for kind, sizes in (("score", args.score_rows), ("translate", args.translate_lines)):
        for n in [int(x) for x in sizes.split(",") if x]:
            if kind == "score":
                path = work / f"pairs{n}.csv"
                if not path.exists():
                    with open(path, "w", newline="", encoding="utf-8") as f:
                        w = csv.writer(f)
                        w.writerow(["source", "target"])
                        for i in range(n):
                            w.writerow([en[i % len(en)], de[i % len(de)]])
                argv = [TCHSEQ, "--threads", str(args.threads), "score", "-q", "-m", MODEL, "--input", str(path)]
            else:
                path = work / f"lines{n}.en"
                if not path.exists():
                    path.write_text("".join(en[i % len(en)] + "\n" for i in range(n)), encoding="utf-8")
                argv = [TCHSEQ, "--threads", str(args.threads), "translate", "-m", MODEL, "--beam", str(args.beam),
                        "--input", str(path)]
            if kind == "translate" and args.trace and n == max(int(x) for x in sizes.split(",") if x):
                milestones = [m for m in (10_000, 100_000, 1_000_000) if m <= n]
                seconds, rss, resident = run_traced(argv, milestones)
                traced.append((n, resident))
            else:
                seconds, rss = run(argv)
            rows.append((kind, n, seconds, n / seconds, rss))
            print(f"{kind} {n}: {seconds:.1f} s, {n / seconds:.0f}/s, peak RSS {rss:.0f} MB", flush=True)
    out = [
        "# Memory at scale: peak RSS and throughput as the input grows",
        "",
        f"Written by `python bench/memory.py` on {datetime.date.today().isoformat()}: {os.cpu_count()} cores "
        f"({cpu.describe()}), `--threads {args.threads}`, the bundled model, Multi30k train rows repeated. "
        f"score: fairseq-generate's default batching (`--max-tokens 12000`); translate: beam {args.beam}, the file default "
        "(`--max-tokens 512` over 2,048-line buffers). One process per size, start to exit.",
        "",
        "| command | rows / lines | seconds | per second | peak RSS (MB) |",
        "|---|---:|---:|---:|---:|",
    ]
    out += [f"| {k} | {n:,} | {s:.1f} | {r:.0f} | {m:.0f} |" for k, n, s, r, m in rows]
    for n, resident in traced:
        out += ["", f"Resident size within the {n:,}-line translate, when its output first reached each line count:", "",
                "| lines | resident MB |", "|---:|---:|"]
        out += [f"| {line:,} | {mb:.1f} |" for line, mb in sorted(resident.items())]
    Path(args.out).write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
