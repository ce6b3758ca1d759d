"""`make bench`'s evaluation rows: `tchseq generate` beside fairseq-generate 0.12.2 on the same
data-bin (Multi30k's test_2016_flickr, 1000 sentences, Moses + BPE, binarized by
fairseq-preprocess with the bundled model's dictionaries), and `tchseq sacrebleu` beside the
sacrebleu command on 100k lines. Whole processes, the same threads, medians of --reps runs; the
outputs must be the same bytes (log lines dropped). Writes bench/generate-results.md.

    python bench/generate.py [--threads 2] [--reps 3]
"""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from bench import prepare_input
from processes import ROOT, TCHSEQ, peer_env, thread_env, timed

LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| ")


def data_bin(work, data):
    model = ROOT / "weights" / "multi30k.en-de"
    dest = work / "data-bin"
    if (dest / "test.en-de.en.idx").exists():
        return dest
    text = prepare_input(work, data, model / "bpecodes")
    prefix = str(text["en"])[: -len(".en")]
    argv = ["fairseq-preprocess", "-s", "en", "-t", "de", "--srcdict", model / "dict.en.txt", "--tgtdict",
            model / "dict.de.txt", "--testpref", prefix, "--destdir", dest, "--workers", "1"]
    subprocess.run([str(a) for a in argv], check=True, env=peer_env(argv, dict(os.environ)),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return dest


def lines_of(text):
    return [l for l in text.splitlines() if not LOG.match(l)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sacrebleu-lines", type=int, default=100_000)
    p.add_argument("--out", default=str(ROOT / "bench" / "generate-results.md"))
    args = p.parse_args()
    data = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data" / "multi30k"))
    work = ROOT / "bench" / "work" / "generate"
    work.mkdir(parents=True, exist_ok=True)
    bin_dir = data_bin(work, data)
    model = ROOT / "weights" / "multi30k.en-de" / "model.pt"
    env = thread_env(args.threads)
    rows = []
    batch32 = ["--batch-size", "32", "--remove-bpe", "--scoring", "sacrebleu"]
    for tag, opts, ours in [("fairseq's defaults (--max-tokens 12000)", [], ["--threads", str(args.threads)]),
                            ("--batch-size 32 --remove-bpe --scoring sacrebleu", batch32, ["--threads", str(args.threads)]),
                            ("the same, tchseq `--threads 1 --inter-threads 2`", batch32,
                             ["--threads", "1", "--inter-threads", str(args.threads)])]:
        common = [str(bin_dir), "--path", str(model), "--cpu", "-s", "en", "-t", "de", "--beam", "5"] + opts
        fs = timed(["fairseq-generate"] + common, env=env, reps=args.reps)
        ts = timed([str(TCHSEQ)] + ours + ["generate"] + common, env=env, reps=args.reps)
        same = lines_of(fs[2]) == lines_of(ts[2])
        closing = next((l for l in lines_of(ts[2]) if l.startswith("Generate ")), "")
        rows.append((tag, fs[0], ts[0], same, closing))
    # sacrebleu on 100k lines: the references against themselves shuffled a little
    refs = work / "sacrebleu.ref"
    hyps = work / "sacrebleu.hyp"
    if not refs.exists():
        base = (work / "test.bpe.de").read_text(encoding="utf-8").replace("@@ ", "").splitlines()
        r = [base[i % len(base)] for i in range(args.sacrebleu_lines)]
        h = [base[(i * 7 + 3) % len(base)] if i % 5 == 0 else base[i % len(base)] for i in range(args.sacrebleu_lines)]
        refs.write_text("\n".join(r) + "\n", encoding="utf-8")
        hyps.write_text("\n".join(h) + "\n", encoding="utf-8")
    py = timed(["sacrebleu", str(refs), "-i", str(hyps), "-m", "bleu", "chrf", "-f", "text"], env=env, reps=args.reps)
    ours = timed([str(TCHSEQ), "sacrebleu", str(refs), "-i", str(hyps), "-m", "bleu", "chrf", "-f", "text"],
                 env=env, reps=args.reps)
    strip = lambda t: re.sub(r"version:\S+", "version", t)  # noqa: E731
    sb_same = strip(py[2]) == strip(ours[2])
    out = [f"# Evaluation: `tchseq generate` and `tchseq sacrebleu` ({args.threads} threads, median of {args.reps})", "",
           "| run | fairseq-generate | tchseq generate | ratio | same bytes | closing line |", "|---|---|---|---|---|---|"]
    for tag, f, t, same, closing in rows:
        out.append(f"| {tag} | {f:.2f} s | {t:.2f} s | {f / t:.2f}× | {'yes' if same else 'NO'} | `{closing}` |")
    out += ["", "| run | sacrebleu 2.5.1 | tchseq sacrebleu | ratio | same output |", "|---|---|---|---|---|",
            f"| {args.sacrebleu_lines:,} lines, BLEU and chrF | {py[0]:.2f} s | {ours[0]:.2f} s | {py[0] / ours[0]:.1f}× | "
            f"{'yes' if sb_same else 'NO'} |", ""]
    Path(args.out).write_text("\n".join(out), encoding="utf-8")
    print("\n".join(out))
    if not all(r[3] for r in rows) or not sb_same:
        sys.exit("bench: outputs differ")


if __name__ == "__main__":
    main()
