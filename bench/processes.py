"""How `make bench` runs a command: one whole process, its wall time and peak RSS (wait4), its
environment (which Python processes get fairseq's fixes, how many threads), and the
hypotheses it printed. Shared by bench.py and sizes.py.
"""
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TCHSEQ = ROOT / "target" / "release" / "tchseq"


def peer_env(argv, env):
    """reference/sitecustomize.py (fairseq's fixes, which import torch) goes on PYTHONPATH for
    fairseq and CTranslate2's fairseq converter only. Any other Python process must not get it:
    torch's OpenMP and MKL loaded beside CTranslate2's own runtime made CTranslate2 2-5x slower
    (measured 2026-11-25: fp32 with 2 inter-threads, 2.8 s without, 4.6-15.3 s with), which
    earlier runs of this benchmark did not know. bench/run.sh starts this script without it too:
    a child's peak RSS (wait4) counts the parent's at the fork, and torch made that 500 MB."""
    env = dict(os.environ if env is None else env)
    reference = str((ROOT / "reference").resolve())
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and str(Path(p).resolve()) != reference]
    name = Path(str(argv[0])).name
    if name.startswith("fairseq") or name == "ct2-fairseq-converter":
        paths.insert(0, reference)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    else:
        env.pop("PYTHONPATH", None)
    return env


def run(argv, stdout=None, env=None, cwd=ROOT):
    """Runs argv; returns (wall seconds, peak RSS in MB, stdout text). stdout goes to a file
    (default: a scratch one) and the child is reaped with wait4 for its own rusage."""
    env = peer_env(argv, env)
    out_path = Path(stdout) if stdout else ROOT / "bench" / "work" / ".stdout"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    err_path = out_path.with_suffix(".stderr")
    with open(out_path, "w", encoding="utf-8") as out, open(err_path, "w", encoding="utf-8") as err:
        t = time.perf_counter()
        p = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=err, env=env, cwd=cwd)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
    p.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = err_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        sys.exit(f"bench: {shlex.join(map(str, argv))} failed ({code}):\n{tail}")
    return wall, usage.ru_maxrss / 1024, out_path.read_text(encoding="utf-8")


def timed(argv, env=None, reps=3, stdout=None):
    """Median wall time and the peak RSS over `reps` runs, and the first run's stdout."""
    walls, rss, first = [], 0.0, None
    for _ in range(reps):
        w, r, text = run(argv, stdout=stdout, env=env)
        walls.append(w)
        rss = max(rss, r)
        first = text if first is None else first
    return statistics.median(walls), rss, first


def hyps(text):
    """id -> best hypothesis string from H- lines."""
    out = {}
    for line in text.splitlines():
        if line.startswith("H-"):
            head, _, rest = line.partition("\t")
            i = int(head[2:])
            if i not in out:
                out[i] = rest.split("\t", 1)[1] if "\t" in rest else ""
    return out


def w_lines(text):
    """Seconds per sentence from W- lines, in input order."""
    return [float(l.split("\t")[1]) for l in text.splitlines() if l.startswith("W-")]


def thread_env(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env
