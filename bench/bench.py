"""`make bench`: tchseq against fairseq 0.12.2 and CTranslate2 on the same machine, input and
thread count. Writes bench/results.md (medians of --reps runs, ratios to fairseq).

    bash bench/run.sh [--threads 2] [--reps 3] [--sizes bundled,base]

Run through bench/run.sh, which sources reference/env.sh (fairseq's fixes) first. Every timing
is the wall time of one process, start to exit, as a user would see it; peak RSS comes from
wait4(). Outputs are compared too: tchseq's hypotheses must equal fairseq's.
"""
import argparse
import csv
import datetime
import gzip
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import cpu
import sizes
from processes import ROOT, TCHSEQ, hyps, run, thread_env, timed, w_lines

def bleu(hypotheses, references):
    """sacreBLEU on the Moses-tokenized, BPE-removed text (tokenize="none")."""
    import sacrebleu

    return sacrebleu.corpus_bleu(hypotheses, [references], tokenize="none").score


def prepare_input(work, data, bpecodes, n=None):
    """test_2016_flickr, Moses-tokenized and BPE'd as fairseq's encoders do (cached)."""
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    paths = {l: work / f"test.bpe.{l}" for l in ("en", "de")}
    if all(p.exists() for p in paths.values()):
        return paths
    bpe = BPE(open(bpecodes, encoding="utf-8"))
    for lang, path in paths.items():
        tok = MosesTokenizer(lang=lang)
        lines = gzip.open(data / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8").read().splitlines()
        text = "".join(
            bpe.process_line(tok.tokenize(l, aggressive_dash_splits=True, return_str=True, escape=True)) + "\n"
            for l in lines[:n]
        )
        path.write_text(text, encoding="utf-8")
    return paths


def ct2_model(model_dir, work):
    out = work / "ct2"
    converted = out / "model.bin"
    if not converted.exists() or converted.stat().st_mtime < (model_dir / "model.pt").stat().st_mtime:
        # CTranslate2 4.8's converter loads with weights_only unless told otherwise, which refuses
        # the argparse.Namespace in a fairseq checkpoint; this one is our own
        run(["ct2-fairseq-converter", "--model_path", model_dir / "model.pt", "--data_dir", model_dir,
             "--source_lang", "en", "--target_lang", "de", "--output_dir", out, "--force", "--unsafe_deserialization"])
    return out


def bench_model(name, model_dir, work, data, threads, reps, lines, max_len_b=200, min_len=1, latency_lines=100):
    work.mkdir(parents=True, exist_ok=True)
    env = thread_env(threads)
    inputs = prepare_input(work, data, model_dir / "bpecodes")
    src = work / "input.en"
    src.write_text("".join(inputs["en"].read_text(encoding="utf-8").splitlines(True)[:lines]), encoding="utf-8")
    n = sum(1 for _ in open(src, encoding="utf-8"))
    ct2 = ct2_model(model_dir, work)
    min_len_flag = ["--min-len", min_len] if min_len > 1 else []  # fairseq's and ct2_translate.py's
    search = ["--beam", "5", "--max-len-b", max_len_b] + min_len_flag
    fairseq = ["fairseq-interactive", model_dir, "--path", model_dir / "model.pt", "-s", "en", "-t", "de", "--cpu"] + search
    tch = [TCHSEQ, "--device", "cpu"]
    tch_tr = ["translate", "-m", model_dir, "--tokenizer", "none", "--bpe", "none", "--format", "fairseq"] + search
    ct2_cmd = [sys.executable, ROOT / "bench" / "ct2_translate.py", ct2, "--max-len", max_len_b] + min_len_flag
    r = {"name": name, "sentences": n, "threads": threads, "max_len_b": max_len_b, "min_len": min_len,
         "latency_lines": latency_lines, "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "translate": [], "latency": [], "score": [], "load": []}

    # 1. translate throughput
    systems = [
        ("fairseq-interactive", fairseq + ["--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"CTranslate2 fp32 (intra {threads})", ct2_cmd + [src, "--compute-type", "float32", "--intra-threads", threads]),
        (f"CTranslate2 int8 (intra {threads})", ct2_cmd + [src, "--compute-type", "int8", "--intra-threads", threads]),
        (f"CTranslate2 fp32 (inter {threads})", ct2_cmd + [src, "--compute-type", "float32", "--inter-threads", threads]),
        (f"CTranslate2 int8 (inter {threads})", ct2_cmd + [src, "--compute-type", "int8", "--inter-threads", threads]),
        (f"tchseq --threads {threads}", tch + ["--threads", threads] + tch_tr + ["--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --inter-threads {threads}", tch + ["--threads", "1", "--inter-threads", threads] + tch_tr
         + ["--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --reproducible --threads {threads}", tch + ["--reproducible", "--threads", threads] + tch_tr
         + ["--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --reproducible --inter-threads {threads}", tch + ["--reproducible", "--threads", "1", "--inter-threads", threads]
         + tch_tr + ["--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --compute-type float32 --threads {threads}", tch + ["--threads", threads] + tch_tr
         + ["--compute-type", "float32", "--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --compute-type float32 --inter-threads {threads}", tch + ["--threads", "1", "--inter-threads", threads] + tch_tr
         + ["--compute-type", "float32", "--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --compute-type int8 --threads {threads}", tch + ["--threads", threads] + tch_tr
         + ["--compute-type", "int8", "--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --compute-type int8 --inter-threads {threads}", tch + ["--threads", "1", "--inter-threads", threads] + tch_tr
         + ["--compute-type", "int8", "--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        (f"tchseq --inter-threads {threads}, no batching flag (the file default)", tch + ["--threads", "1", "--inter-threads", threads]
         + tch_tr + ["--input", src]),
    ]
    if cpu.bf16():
        systems += [
            (f"tchseq --compute-type bfloat16 --threads {threads}", tch + ["--threads", threads] + tch_tr
             + ["--compute-type", "bfloat16", "--buffer-size", "1024", "--batch-size", "32", "--input", src]),
            (f"tchseq --compute-type bfloat16 --inter-threads {threads}", tch + ["--threads", "1", "--inter-threads", threads] + tch_tr
             + ["--compute-type", "bfloat16", "--buffer-size", "1024", "--batch-size", "32", "--input", src]),
        ]
    refs = [l.replace("@@ ", "") for l in inputs["de"].read_text(encoding="utf-8").splitlines()[:n]]
    reference = None
    for label, argv in systems:
        wall, rss, text = timed(argv, env=env, reps=reps, stdout=work / "out.txt")
        h = hyps(text)
        if reference is None:
            reference = h
            tokens = sum(len(x.split()) + 1 for x in h.values())
        same = sum(reference.get(i) == x for i, x in h.items())
        score = bleu([h.get(i, "").replace("@@ ", "") for i in range(n)], refs)
        r["translate"].append({"system": label, "argv": shlex.join(map(str, argv)), "seconds": wall,
                               "tok_s": tokens / wall, "identical": same, "count": len(h), "rss_mb": rss, "bleu": score})
        print(f"[{name}] translate {label}: {wall:.2f}s {tokens / wall:.0f} tok/s, {same}/{len(h)} as fairseq, {rss:.0f} MB",
              flush=True)
    r["target_tokens"] = tokens

    # 2. latency: batch 1 over the first sentences, median of the per-sentence W- times
    first = work / "first.en"
    first.write_text("".join(src.read_text(encoding="utf-8").splitlines(True)[:latency_lines]), encoding="utf-8")
    lat = [
        ("fairseq-interactive", fairseq + ["--buffer-size", "1", "--batch-size", "1", "--input", first]),
        (f"CTranslate2 fp32 (intra {threads})", ct2_cmd + [first, "--compute-type", "float32", "--intra-threads", threads,
                                                          "--latency"]),
        (f"CTranslate2 int8 (intra {threads})", ct2_cmd + [first, "--compute-type", "int8", "--intra-threads", threads,
                                                          "--latency"]),
        (f"tchseq --threads {threads}", tch + ["--threads", threads] + tch_tr + ["--batch-size", "1", "--input", first]),
        (f"tchseq --reproducible --threads {threads}", tch + ["--reproducible", "--threads", threads] + tch_tr
         + ["--batch-size", "1", "--input", first]),
        (f"tchseq --compute-type float32 --threads {threads}", tch + ["--threads", threads] + tch_tr
         + ["--compute-type", "float32", "--batch-size", "1", "--input", first]),
        (f"tchseq --compute-type int8 --threads {threads}", tch + ["--threads", threads] + tch_tr
         + ["--compute-type", "int8", "--batch-size", "1", "--input", first]),
        ("tchseq --threads 1", tch + ["--threads", "1"] + tch_tr + ["--batch-size", "1", "--input", first]),
        ("tchseq --compute-type float32 --threads 1", tch + ["--threads", "1"] + tch_tr
         + ["--compute-type", "float32", "--batch-size", "1", "--input", first]),
    ]
    # the mean of the per-sentence W- lines after the first (which carries each system's warm-up):
    # fairseq and tchseq print them to the millisecond, and a mean of 99 keeps that rounding
    # from biasing the figure as a median of them would
    for label, argv in lat:
        means = []
        for _ in range(reps):
            _, _, text = run(argv, env=env)
            means.append(statistics.mean(w_lines(text)[1:]) * 1000)
        r["latency"].append({"system": label, "argv": shlex.join(map(str, argv)), "ms": statistics.median(means)})
        print(f"[{name}] latency {label}: {statistics.median(means):.2f} ms", flush=True)

    # 3. scoring throughput
    pairs = work / "pairs.csv"
    with open(pairs, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "target"])
        en = inputs["en"].read_text(encoding="utf-8").splitlines()[:lines]
        de = inputs["de"].read_text(encoding="utf-8").splitlines()[:lines]
        w.writerows(zip(en, de))
    binned = work / "score-bin"  # rebuilt every time: the number of lines may have changed
    shutil.rmtree(binned, ignore_errors=True)
    for lang, lines_ in (("en", en), ("de", de)):
        (work / f"score.{lang}").write_text("".join(l + "\n" for l in lines_), encoding="utf-8")
    run(["fairseq-preprocess", "-s", "en", "-t", "de", "--srcdict", model_dir / "dict.en.txt", "--tgtdict",
         model_dir / "dict.de.txt", "--testpref", work / "score", "--destdir", binned, "--workers", "1"])
    scoring = [
        ("fairseq-generate --score-reference", ["fairseq-generate", binned, "--path", model_dir / "model.pt", "-s", "en",
                                                "-t", "de", "--gen-subset", "test", "--cpu", "--score-reference",
                                                "--batch-size", "64"]),
        (f"tchseq score --threads {threads}", tch + ["--threads", threads, "score", "-m", model_dir, "--tokenized",
                                                     "--input", pairs, "--output", work / "scores.csv",
                                                     "--batch-size", "64", "-q"]),
        (f"tchseq score --inter-threads {threads}", tch + ["--threads", "1", "--inter-threads", threads, "score", "-m",
                                                           model_dir, "--tokenized", "--input", pairs, "--output",
                                                           work / "scores.csv", "--batch-size", "64", "-q"]),
    ]
    fair_scores = None
    for label, argv in scoring:
        wall, rss, text = timed(argv, env=env, reps=reps)
        if fair_scores is None:
            fair_scores = {int(l.split("\t")[0][2:]): float(l.split("\t")[1]) * math.log(2)
                           for l in text.splitlines() if l.startswith("H-")}
            diff = 0.0
        else:
            rows = list(csv.DictReader(open(work / "scores.csv", encoding="utf-8")))
            diff = max(abs(float(row["avg_logprob"]) - fair_scores[i]) for i, row in enumerate(rows))
        r["score"].append({"system": label, "argv": shlex.join(map(str, argv)), "seconds": wall,
                           "rows_s": len(en) / wall, "max_diff": diff, "rss_mb": rss})
        print(f"[{name}] score {label}: {len(en) / wall:.1f} rows/s, max diff {diff:.2e}", flush=True)

    # 4. load: one sentence, start to exit; and libtorch's own floor (no model; `doctor` would
    # load libtorch_cuda too)
    one = work / "one.en"
    one.write_text(src.read_text(encoding="utf-8").splitlines(True)[0], encoding="utf-8")
    loads = [
        ("fairseq-interactive", fairseq + ["--input", one]),
        ("CTranslate2 fp32", ct2_cmd + [one, "--compute-type", "float32", "--intra-threads", threads]),
        ("tchseq", tch + ["--threads", threads] + tch_tr + ["--input", one]),
        ("tchseq --compute-type float32", tch + ["--threads", threads] + tch_tr + ["--compute-type", "float32", "--input", one]),
        ("tchseq --version (libtorch, no model)", [TCHSEQ, "--version"]),
    ]
    for label, argv in loads:
        wall, rss, _ = timed(argv, env=env, reps=reps)
        r["load"].append({"system": label, "argv": shlex.join(map(str, argv)), "seconds": wall, "rss_mb": rss})
        print(f"[{name}] load {label}: {wall:.2f}s {rss:.0f} MB", flush=True)
    return r


def ratio(x, base, higher_is_better=True):
    return f"{(x / base if higher_is_better else base / x):.2f}×"


def length_note(r):
    lo, hi = r.get("min_len", 1), r["max_len_b"]
    if lo == hi:
        return f", exactly {hi} tokens + EOS per sentence (`--min-len {lo} --max-len-b {hi}`)"
    return f", at most {hi} tokens (`--max-len-b {hi}`)" if hi != 200 else ""


def markdown(results, args):
    versions = subprocess.run([TCHSEQ, "--version"], capture_output=True, text=True).stdout.strip()
    # package metadata: importing fairseq needs reference/'s fixes, which this process goes without
    from importlib.metadata import version
    out = [
        "# Benchmarks: tchseq vs fairseq 0.12.2 vs CTranslate2",
        "",
        f"Written by `{shlex.join(['bench/run.sh'] + sys.argv[1:])}` (`make bench` runs `bench/run.sh`) on "
        f"{datetime.date.today().isoformat()}: {os.cpu_count()} cores ({cpu.describe()}), Linux, CPU only. "
        f"{versions}, fairseq {version('fairseq')} on torch {version('torch')}, CTranslate2 {version('ctranslate2')}. "
        f"Every number is the median of {args.reps} runs; every run is one process, start to exit. "
        "Ratios are to fairseq (higher is better); absolute times on a shared machine are noisy.",
        "",
    ]
    out += sizes.goals(results)
    for r in results:
        if r["name"] in sizes.SIZES:
            out += sizes.markdown_size(r)
            continue
        t = r["threads"]
        out += [
            f"## {r['title']}",
            "",
            f"Measured {r['measured']}." if "measured" in r else "Measured by an earlier run (`--reuse`).",
            "",
            f"### Translate: {r['sentences']} sentences of Multi30k test_2016_flickr (tokenized + BPE'd), beam 5, "
            f"batch 32, {t} threads" + length_note(r),
            "",
            f"{r['target_tokens']} target tokens (EOS included) in fairseq's output.",
            "",
            "| system | seconds | target tok/s | vs fairseq | hypotheses equal to fairseq's | BLEU (Δ fairseq) | peak RSS (MB) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        base = r["translate"][0]
        for x in r["translate"]:
            b = f"{x['bleu']:.2f} ({x['bleu'] - base['bleu']:+.2f})" if "bleu" in x else "—"
            out.append(f"| {x['system']} | {x['seconds']:.2f} | {x['tok_s']:.0f} | {ratio(x['tok_s'], base['tok_s'])} | "
                       f"{x['identical']}/{x['count']} | {b} | {x['rss_mb']:.0f} |")
        out += ["", f"### Latency: batch 1, the first {r['latency_lines']} sentences: the mean time per sentence after "
                f"the first ({t} threads)", "",
                "| system | ms / sentence | vs fairseq |", "|---|---:|---:|"]
        base = r["latency"][0]
        for x in r["latency"]:
            out.append(f"| {x['system']} | {x['ms']:.1f} | {ratio(x['ms'], base['ms'], False)} |")
        out += ["", f"### Scoring: {r['sentences']} (source, target) pairs, batch 64, {t} threads", "",
                "| system | seconds | rows/s | vs fairseq | max \\|avg_logprob − fairseq's\\| | peak RSS (MB) |",
                "|---|---:|---:|---:|---:|---:|"]
        base = r["score"][0]
        for x in r["score"]:
            out.append(f"| {x['system']} | {x['seconds']:.2f} | {x['rows_s']:.1f} | {ratio(x['rows_s'], base['rows_s'])} | "
                       f"{x['max_diff']:.1e} | {x['rss_mb']:.0f} |")
        out += ["", "### Start-up: one sentence, start to exit (load time) and peak RSS", "",
                "| system | seconds | vs fairseq | peak RSS (MB) | RSS vs fairseq |", "|---|---:|---:|---:|---:|"]
        base = r["load"][0]
        for x in r["load"]:
            out.append(f"| {x['system']} | {x['seconds']:.2f} | {ratio(x['seconds'], base['seconds'], False)} | "
                       f"{x['rss_mb']:.0f} | {x['rss_mb'] / base['rss_mb']:.2f} |")
        out += ["", "<details><summary>Exact commands</summary>", "", "```sh"]
        for section in ("translate", "latency", "score", "load"):
            for x in r[section]:
                out.append(f"# {section}: {x['system']}")
                out.append(x["argv"].replace(str(ROOT) + "/", ""))
        out += ["```", "", "</details>", ""]
    out += [
        "## Notes",
        "",
        "- fairseq-interactive and fairseq-generate run with `OMP_NUM_THREADS`/`MKL_NUM_THREADS` set to the thread "
        "count and the fixes in `reference/sitecustomize.py`; their times include Python start-up and imports "
        "(see the start-up table).",
        "- `--inter-threads N` decodes N batches at once with one intra-op thread each (CTranslate2's "
        "`inter_threads`); its output is bit-identical to fairseq's single-threaded output.",
        "- CTranslate2 differs from fairseq by design: its length penalty divides by the length without EOS, "
        "its int8 mode quantizes weights, and its kernels differ; the `equal` column counts its mismatches.",
        "- The base, big and M2M-shaped models have random weights (built by fairseq's `build_model`, "
        "reference/make_size_model.py), so their output is random too: every system decodes exactly the same "
        "number of tokens per sentence there (`--min-len N --max-len-b N`; CTranslate2: "
        "`min_decoding_length`/`max_decoding_length`), which measures a fixed number of beam steps per sentence, "
        "i.e. kernels, memory and batching. CTranslate2 has no bfloat16 on the CPU: tchseq's bfloat16 rows are "
        "compared with its fp32.",
        "",
    ]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sizes", default="bundled,base,big,m2m")
    p.add_argument("--bundled-lines", type=int, default=1000)
    p.add_argument("--size-lines", type=int, default=128,
                   help="sentences for the base, big and M2M-100-418M sizes (four batches of 32)")
    p.add_argument("--size-len", type=int, default=25,
                   help="base, big and M2M sizes: every sentence is decoded to exactly this many tokens")
    p.add_argument("--reuse", default="", help="sizes whose saved results (bench/work/<size>.json) are reused")
    p.add_argument("--out", default=str(ROOT / "bench" / "results.md"))
    p.add_argument("--isa", choices=["native", "avx2"], default="native",
                   help="avx2: every system held to AVX2 and FMA (bench/cpu.py's AVX2_ENV), as on most servers")
    args = p.parse_args()
    cpu.pin(args.isa)
    data = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data" / "multi30k"))
    work = ROOT / "bench" / "work"
    results = []
    peaks = None
    for size in args.sizes.split(","):
        saved = work / (f"{size}.json" if args.isa == "native" else f"{size}-{args.isa}.json")
        if size in args.reuse.split(",") and saved.exists():
            results.append(json.loads(saved.read_text()))
            continue
        if size == "bundled":
            r = bench_model(size, ROOT / "weights" / "multi30k.en-de", work / "bundled", data, args.threads,
                            args.reps, args.bundled_lines)
            r["title"] = "Bundled model (weights/multi30k.en-de: d128, 3+3 layers, 7.9k joint dictionary)"
        elif size in sizes.SIZES:
            peaks = peaks or sizes.measured_peaks(args.threads, cpu.bf16())
            r = sizes.bench_size(size, work, args.threads, args.reps, args.size_lines, args.size_len, cpu.bf16(), peaks)
        else:
            sys.exit(f"bench: unknown size {size!r} (bundled, base, {', '.join(sizes.SIZES)})")
        results.append(r)
        saved.write_text(json.dumps(r, indent=1))
    Path(args.out).write_text(markdown(results, args), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
