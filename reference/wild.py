#!/usr/bin/env python3
"""Copies the real-world checkpoints of /work/shared/wild into tests/fixtures/wild (same layout,
SOURCE.md kept) and makes fairseq 0.12.2 goldens for each under <name>/golden/:
weights.pt, verify_left.pt, verify_right.pt (goldens.py, random token sentences drawn from the
model's own dictionaries with a fixed seed), inputs.src (16 such sentences) and
fairseq-interactive --beam 5 outputs (batched and batch size 1) on them.
Writes tests/fixtures/wild/manifest.json. Run from the repository root inside reference/env.sh.
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

REF = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(REF)
SHARED = os.environ.get("WILD_SOURCE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "wild"))
DEST = "tests/fixtures/wild"
PY = sys.executable
sys.path.insert(0, REF)
from fixtures import BATCHING, LOG_LINE  # noqa: E402

WILD = [
    {"name": "smellcps-sym-math", "checkpoint": "checkpoint_best.pt", "data": "data-bin",
     "source_lang": "sym", "target_lang": "math", "seed": 11},
    {"name": "knnseq-toy-en-ja", "checkpoint": "checkpoints/checkpoint_best.pt", "data": "data-bin",
     "source_lang": "en", "target_lang": "ja", "seed": 12},
    {"name": "knnseq-toy-en-ja-v0", "checkpoint": "checkpoints/checkpoint_best.pt", "data": "data-bin",
     "source_lang": "en", "target_lang": "ja", "seed": 13},
]


def sha256(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


def run(argv):
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(argv)}")
    return p.stdout


def copy_tree(src, dst):
    """Copy files (not modes: the shared tree is read-only). Returns skipped files."""
    skipped = []
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for f in sorted(files):
            s = os.path.join(dirpath, f)
            if f == "checkpoint_last.pt":
                best = os.path.join(dirpath, "checkpoint_best.pt")
                if os.path.exists(best) and sha256(best) == sha256(s):
                    skipped.append(os.path.join(rel, f))
                    continue
            shutil.copyfile(s, os.path.join(dst, rel, f))
    return skipped


def dict_symbols(path):
    out = []
    for line in open(path, encoding="utf-8"):
        w = line.rstrip().rsplit(" ", 1)[0]
        if not w.startswith("madeupword"):
            out.append(w)
    return out


def main():
    dest = os.path.join(ROOT, DEST)
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    shutil.copyfile(os.path.join(SHARED, "README.md"), os.path.join(dest, "README.md"))
    entries = []
    for w in WILD:
        d = f"{DEST}/{w['name']}"
        skipped = copy_tree(os.path.join(SHARED, w["name"]), os.path.join(ROOT, d))
        g = f"{d}/golden"
        os.makedirs(os.path.join(ROOT, g, "interactive"))
        data, ckpt = f"{d}/{w['data']}", f"{d}/{w['checkpoint']}"
        s, t = w["source_lang"], w["target_lang"]
        out = run([PY, f"{REF}/goldens.py", "--data", data, "--path", ckpt, "--out", g, "-s", s, "-t", t,
                   "--random", "6", str(w["seed"])])
        summary = json.loads(out.strip().splitlines()[-1])

        rng = random.Random(w["seed"] + 100)
        syms = dict_symbols(os.path.join(ROOT, data, f"dict.{s}.txt"))
        with open(os.path.join(ROOT, g, "inputs.src"), "w", encoding="utf-8") as f:
            for i in range(16):
                f.write(" ".join(rng.choices(syms, k=1 + (i * 5) % 19)) + "\n")
        interactive = {}
        for bname, b in BATCHING.items():
            argv = ["fairseq-interactive", data, "--path", ckpt, "-s", s, "-t", t, "--cpu",
                    "--input", f"{g}/inputs.src", "--beam", "5"] + b["argv"]
            lines = [l for l in run(argv).splitlines() if not LOG_LINE.match(l)]
            rel = f"interactive/beam5{b['suffix']}"
            with open(os.path.join(ROOT, g, rel), "w", encoding="utf-8") as f:
                f.write("".join(l + "\n" for l in lines))
            interactive[bname] = {"file": rel, "argv": argv}
        entries.append({
            "name": w["name"], "dir": d, "checkpoint": w["checkpoint"], "data": w["data"],
            "source_lang": s, "target_lang": t,
            "src_dict": f"{w['data']}/dict.{s}.txt", "tgt_dict": f"{w['data']}/dict.{t}.txt",
            "skipped_copies": skipped,
            "encoder_attention_path": {k: v["encoder_path"] for k, v in summary["sides"].items()},
            "goldens": {"dir": "golden", "weights": "weights.pt",
                        "weights_dtypes": summary["weights_dtypes"],
                        "verify": {k: f"verify_{k}.pt" for k in summary["sides"]},
                        "verify_sentences": summary["sentences"],
                        "verify_targets": summary["targets"],
                        "inputs": "inputs.src",
                        "interactive": {"beam5": interactive}},
            "sha256": {w["checkpoint"]: sha256(os.path.join(ROOT, ckpt))},
        })
        print(f"{w['name']}: encoder path {entries[-1]['encoder_attention_path']}; skipped {skipped}", flush=True)
    with open(os.path.join(dest, "manifest.json"), "w") as f:
        json.dump({"paths_relative_to": "repository root", "models": entries}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
