"""The model sizes of `make bench` past the bundled one (transformer-base, transformer-big,
M2M-100-418M-shaped): models built by
fairseq 0.12.2 (reference/make_size_model.py, random weights), every system decoding exactly
`length` tokens per sentence, beam 5. Per size: translate throughput at batch 32 (intra- and
inter-op threads), batch-1 latency, scoring, load + one sentence, peak RSS, and the floor the
matrix products set at this CPU's measured peak. Used by bench.py (`--sizes big,m2m`).
"""
import csv
import json
import shlex
import statistics
import subprocess
import sys

import processes

SIZES = {
    # name: (make_size_model.py --size, d, ffn, encoder layers, decoder layers, vocabulary, title)
    "base": ("base", 512, 2048, 6, 6, 32000,
             "transformer-base (d512, 8 heads, FFN 2048, 6+6 post-norm, 32k joint vocabulary; 60.5M parameters)"),
    "big": ("big", 1024, 4096, 6, 6, 32000,
            "transformer-big (d1024, 16 heads, FFN 4096, 6+6 post-norm, 32k joint vocabulary; 209M parameters)"),
    "m2m": ("m2m", 1024, 4096, 12, 12, 128112,
            "M2M-100-418M shape (d1024, 16 heads, FFN 4096, 12+12 pre-norm, 128k vocabulary; 484M parameters)"),
}

PEAK_SCRIPT = r"""
import json, time, torch
torch.set_num_threads(%d)
def best(f, flops):
    # about two seconds of calls; a slow reference path (`_int_mm` without VNNI: seconds a call)
    # is measured by its one timed call, not called again
    f(); t = time.perf_counter(); f()
    once = time.perf_counter() - t
    n = min(20, int(2.0 / once))
    if n < 2:
        return flops / once / 1e9
    t = time.perf_counter()
    for _ in range(n): f()
    return flops * n / (time.perf_counter() - t) / 1e9
m, k, n = 1024, 1024, 4096
flops = 2 * m * k * n
x, w = torch.randn(m, k), torch.randn(n, k)
packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
fp32 = best(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), flops)
bf16 = best(lambda: torch.mm(x.bfloat16(), w.bfloat16().t()), flops) if %s else None
xi, wi = torch.randint(-127, 127, (m, k), dtype=torch.int8), torch.randint(-127, 127, (k, n), dtype=torch.int8)
int_mm = best(lambda: torch._int_mm(xi, wi), flops)
# fbgemm's dynamic int8 linear (rows quantized per call): its AVX2 kernel where `_int_mm` has none
qw = torch.quantize_per_channel(w, w.abs().amax(1).double() / 127, torch.zeros(n, dtype=torch.long), 0, torch.qint8)
qpacked = torch.ops.quantized.linear_prepack(qw, None)
fbgemm = best(lambda: torch.ops.quantized.linear_dynamic(x, qpacked, True), flops)
print(json.dumps({"float32": fp32, "bfloat16": bf16, "int8": max(int_mm, fbgemm)}))
"""


def measured_peaks(threads, cpu_bf16):
    """GFLOP/s of large matrix products at `threads` threads: fp32 (oneDNN, weights reordered),
    bf16 (oneDNN; None on a CPU without bf16 instructions, where tchseq has no bfloat16) and int8
    (the faster of `torch._int_mm` and fbgemm's dynamic linear), over about two seconds each."""
    python = str(processes.ROOT / ".venv" / "bin" / "python")
    out = subprocess.run([python, "-c", PEAK_SCRIPT % (threads, cpu_bf16)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def matmul_flops(d, ffn, enc, dec, vocab, src_tokens, sentences, length, beam=5):
    """The matrix products of one translate run: the encoder over every source token, the
    encoder attention's keys and values once per sentence, and `length + 1` steps of `sentences ×
    beam` decoder rows through every layer and the output projection."""
    encoder = src_tokens * enc * (4 * d * d + 2 * d * ffn)
    cross_kv = src_tokens * dec * 2 * d * d
    steps = (length + 1) * sentences * beam
    decoder = steps * (dec * (3 * d * d + d * d + d * d + d * d + 2 * d * ffn) + d * vocab)
    return 2 * (encoder + cross_kv + decoder)


def bench_size(name, work, threads, reps, lines, length, cpu_bf16, peaks):
    make, d, ffn, enc, dec, vocab, title = SIZES[name]
    model_dir = work / f"{name}-model"
    if not (model_dir / "model.pt").exists():
        # fairseq builds it, with reference/'s fixes on its path
        subprocess.run([sys.executable, processes.ROOT / "reference" / "make_size_model.py", model_dir, "--size", make],
                       check=True, env=processes.peer_env(["fairseq"], None))
    env = processes.thread_env(threads)
    src = model_dir / f"input.{lines}.src"
    src.write_text("".join((model_dir / "input.src").read_text().splitlines(True)[:lines]))
    src_tokens = sum(len(l.split()) + 1 for l in src.read_text().splitlines())
    ct2 = ct2_model(model_dir)
    fixed = ["--min-len", length, "--max-len-b", length]
    fairseq = ["fairseq-interactive", model_dir, "--path", model_dir / "model.pt", "-s", "src", "-t", "tgt", "--cpu",
               "--beam", "5"] + fixed
    tch = [processes.TCHSEQ, "--device", "cpu"]
    tch_tr = ["translate", "-m", model_dir, "-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none",
              "--format", "fairseq", "--beam", "5"] + fixed
    batch = ["--buffer-size", "1024", "--batch-size", "32"]
    ct2_cmd = [sys.executable, processes.ROOT / "bench" / "ct2_translate.py", ct2, "--max-len", length, "--min-len", length]
    types = ["float32", "int8"] + (["bfloat16"] if cpu_bf16 else [])
    r = {"name": name, "title": title, "sentences": lines, "threads": threads, "length": length,
         "flops": matmul_flops(d, ffn, enc, dec, vocab, src_tokens, lines, length), "peaks": peaks,
         "translate": [], "latency": [], "score": [], "load": []}

    systems = [("fairseq-interactive", "fairseq", fairseq + batch + ["--input", src], 1)]
    for ct in ("float32", "int8"):
        for how in ("intra", "inter"):
            systems.append((f"CTranslate2 {ct} ({how} {threads})", ct, ct2_cmd + [src, "--compute-type", ct, f"--{how}-threads", threads], reps))
    systems.append((f"tchseq exact --threads {threads}", "exact", tch + ["--threads", threads] + tch_tr + batch + ["--input", src], reps))
    for ct in types:
        systems.append((f"tchseq {ct} --threads {threads}", ct, tch + ["--threads", threads] + tch_tr + ["--compute-type", ct] + batch + ["--input", src], reps))
        systems.append((f"tchseq {ct} --inter-threads {threads}", ct, tch + ["--threads", "1", "--inter-threads", threads] + tch_tr
                        + ["--compute-type", ct] + batch + ["--input", src], reps))
    reference = None
    for label, ct, argv, n in systems:
        wall, rss, text = processes.timed(argv, env=env, reps=n, stdout=work / "out.txt")
        h = processes.hyps(text)
        reference = h if reference is None else reference
        same = sum(reference.get(i) == x for i, x in h.items())
        r["translate"].append({"system": label, "compute_type": ct, "argv": shlex.join(map(str, argv)), "seconds": wall,
                               "rss_mb": rss, "identical": same, "count": len(h)})
        print(f"[{name}] translate {label}: {wall:.2f}s, {rss:.0f} MB, {same}/{len(h)} as fairseq", flush=True)

    # batch 1: a run over `n` sentences minus a run over one, per sentence
    n_lat = 8
    first = model_dir / "first.src"
    first.write_text("".join(src.read_text().splitlines(True)[:n_lat]))
    one = model_dir / "one.src"
    one.write_text(src.read_text().splitlines(True)[0])
    lat = [(f"CTranslate2 {ct} (intra {threads})", lambda f, ct=ct: ct2_cmd + [f, "--compute-type", ct, "--intra-threads", threads, "--latency"])
           for ct in ("float32", "int8")]
    lat += [(f"tchseq {ct} --threads {threads}", lambda f, ct=ct: tch + ["--threads", threads] + tch_tr + ["--compute-type", ct, "--batch-size", "1", "--input", f])
            for ct in ["exact"] + types]
    for label, argv in lat:
        many = [processes.run(argv(first), env=env)[0] for _ in range(reps)]
        single = [processes.run(argv(one), env=env)[0] for _ in range(reps)]
        ms = (statistics.median(many) - statistics.median(single)) / (n_lat - 1) * 1000
        r["latency"].append({"system": label, "argv": shlex.join(map(str, argv(first))), "ms": ms})
        print(f"[{name}] latency {label}: {ms:.0f} ms", flush=True)

    pairs = model_dir / "pairs.csv"
    with open(pairs, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "target"])
        w.writerows((l, l) for l in src.read_text().splitlines())
    argv = tch + ["--threads", threads, "score", "-m", model_dir, "-s", "src", "-t", "tgt", "--tokenized", "--input", pairs,
                  "--output", work / "scores.csv", "--batch-size", "64", "-q"]
    wall, rss, _ = processes.timed(argv, env=env, reps=reps)
    r["score"].append({"system": f"tchseq score --threads {threads}", "argv": shlex.join(map(str, argv)),
                       "seconds": wall, "rows_s": lines / wall, "rss_mb": rss})
    print(f"[{name}] score: {lines / wall:.1f} rows/s", flush=True)

    loads = [("fairseq-interactive", fairseq + ["--input", one])]
    loads += [(f"CTranslate2 {ct}", ct2_cmd + [one, "--compute-type", ct, "--intra-threads", threads]) for ct in ("float32", "int8")]
    loads += [(f"tchseq {ct}", tch + ["--threads", threads] + tch_tr + ["--compute-type", ct, "--input", one]) for ct in ["exact"] + types]
    for label, argv in loads:
        wall, rss, _ = processes.timed(argv, env=env, reps=1 if label.startswith("fairseq") else reps)
        r["load"].append({"system": label, "argv": shlex.join(map(str, argv)), "seconds": wall, "rss_mb": rss})
        print(f"[{name}] load {label}: {wall:.2f}s {rss:.0f} MB", flush=True)
    return r


def ct2_model(model_dir):
    out = model_dir / "ct2"
    if not (out / "model.bin").exists() or (out / "model.bin").stat().st_mtime < (model_dir / "model.pt").stat().st_mtime:
        # fairseq-train's cfg checkpoints need the converter's unsafe loading (tchseq reads them
        # with its own pickle reader, which runs no code)
        processes.run(["ct2-fairseq-converter", "--model_path", model_dir / "model.pt", "--data_dir", model_dir, "--source_lang",
                   "src", "--target_lang", "tgt", "--output_dir", out, "--force", "--unsafe_deserialization"])
    return out


def find(rows, label):
    return next((x for x in rows if x["system"] == label), None)


def markdown_size(r):
    t, peaks = r["threads"], r["peaks"]
    types = [ct for ct in ("float32", "bfloat16", "int8") if peaks.get(ct)]
    floor = {ct: r["flops"] / (peaks["float32" if ct == "exact" else ct] * 1e9) for ct in ["exact"] + types}
    names = {"float32": "fp32", "bfloat16": "bf16", "int8": "int8"}
    parts = [f"{peaks[ct]:.0f} {names[ct]}" for ct in types]
    peak_text = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    out = [f"## {r['title']}", "",
           f"{r['sentences']} random sentences of 12–30 tokens, each decoded to exactly {r['length']} tokens + EOS, "
           f"beam 5, batch 32, {t} threads. The matrix products are {r['flops'] / 1e9:.0f} GFLOP; this CPU's measured "
           f"peak at {t} threads is {peak_text} GFLOP/s (`bench/sizes.py`"
           + ("" if peaks.get("bfloat16") else "; no bf16 instructions, so no bfloat16 rows")
           + "), so the products alone need at least "
           + ", ".join(f"{floor[ct]:.2f} s in {ct}" for ct in types) + ".", "",
           "| system | seconds | × floor | vs CTranslate2 (same precision and threading) | peak RSS (MB) | RSS vs CTranslate2 | equal to fairseq |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for x in r["translate"]:
        how = "inter" if "inter" in x["system"] else "intra"
        ct = x["compute_type"]
        peer = None
        if x["system"].startswith("tchseq"):
            peer = find(r["translate"], f"CTranslate2 {'int8' if ct == 'int8' else 'float32'} ({how} {t})")
        vs = f"{peer['seconds'] / x['seconds']:.2f}×" if peer else ""
        rss = f"{x['rss_mb'] / peer['rss_mb']:.2f}" if peer else ""
        mult = f"{x['seconds'] / floor[ct]:.1f}" if ct in floor else ""
        out.append(f"| {x['system']} | {x['seconds']:.2f} | {mult} | {vs} | {x['rss_mb']:.0f} | {rss} | {x['identical']}/{x['count']} |")
    out += ["", f"Batch 1 ({t} threads; a run over 8 sentences minus a run over one, per sentence):", "",
            "| system | ms / sentence | vs CTranslate2 |", "|---|---:|---:|"]
    for x in r["latency"]:
        peer = None
        if x["system"].startswith("tchseq"):
            ct = "int8" if " int8 " in x["system"] else "float32"
            peer = find(r["latency"], f"CTranslate2 {ct} (intra {t})")
        vs = f"{peer['ms'] / x['ms']:.2f}×" if peer else ""
        out.append(f"| {x['system']} | {x['ms']:.0f} | {vs} |")
    out += ["", f"Scoring {r['sentences']} pairs, batch 64, {t} threads:", "", "| system | seconds | rows/s | peak RSS (MB) |", "|---|---:|---:|---:|"]
    for x in r["score"]:
        out.append(f"| {x['system']} | {x['seconds']:.2f} | {x['rows_s']:.1f} | {x['rss_mb']:.0f} |")
    out += ["", "Load and one sentence, start to exit:", "", "| system | seconds | peak RSS (MB) |", "|---|---:|---:|"]
    for x in r["load"]:
        out.append(f"| {x['system']} | {x['seconds']:.2f} | {x['rss_mb']:.0f} |")
    out += ["", "<details><summary>Exact commands</summary>", "", "```sh"]
    for section in ("translate", "latency", "score", "load"):
        for x in r[section]:
            out.append(f"# {section}: {x['system']}")
            out.append(x["argv"].replace(str(processes.ROOT) + "/", ""))
    out += ["```", "", "</details>", ""]
    return out


def pick(rows, who, ct, how=None):
    """The row of `who` (tchseq or CTranslate2) at compute type `ct` and threading `how` (intra,
    inter or None), in either table's labels."""
    for x in rows:
        s = x["system"]
        if who == "CTranslate2":
            names = {"float32": ("fp32", "float32"), "int8": ("int8",)}[ct]
            if s.startswith("CTranslate2") and any(f" {n}" in s for n in names) and (how is None or f"({how} " in s or how not in ("intra", "inter")):
                return x
        elif s.startswith("tchseq") and (f" {ct} " in s + " " or f"--compute-type {ct} " in s + " "):
            if how is None or (how == "inter") == ("--inter-threads" in s):
                return x
    return None


def goals(results):
    """The speed goals, one row per size: tchseq's time over CTranslate2's (above 1: faster)."""
    def ratio(rows, ct, peer_ct, how, key="seconds"):
        a, b = pick(rows, "tchseq", ct, how), pick(rows, "CTranslate2", peer_ct, how)
        return f"{b[key] / a[key]:.2f}×" if a and b else "—"

    def rss(rows):
        a, b = pick(rows, "tchseq", "float32", "intra"), pick(rows, "CTranslate2", "float32", "intra")
        return f"{a['rss_mb'] / b['rss_mb']:.2f}" if a and b else "—"

    def best_reduced(rows):
        ctf = [x for x in (pick(rows, "CTranslate2", "float32", h) for h in ("intra", "inter")) if x]
        ours = [x for ct in ("bfloat16", "int8") for h in ("intra", "inter") if (x := pick(rows, "tchseq", ct, h))]
        if not ctf or not ours:
            return "—"
        best = min(ours, key=lambda x: x["seconds"])
        return f"{min(x['seconds'] for x in ctf) / best['seconds']:.2f}× ({best['system'].split()[1 if 'compute' not in best['system'] else 2]})"

    def load(rows):
        a, b = pick(rows, "tchseq", "float32"), pick(rows, "CTranslate2", "float32")
        return f"{a['seconds']:.2f} s vs {b['seconds']:.2f} s" if a and b else "—"

    out = ["## Against the speed goals", "",
           "tchseq's time over CTranslate2's at the same precision and threading (above 1.00×: tchseq is faster); "
           "peak RSS as a multiple of CTranslate2's (float32 against fp32, intra-op threads).", "",
           "| size | float32, batch 32, intra | float32, batch 32, inter | float32, batch 1 | best of bfloat16/int8 vs CTranslate2 fp32, batch 32 | int8 vs CTranslate2 int8, batch 32 intra / inter | int8, batch 1 | peak RSS, float32 | load + one sentence, float32 |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        t, lat = r["translate"], r["latency"]
        out.append(f"| {r['name']} | {ratio(t, 'float32', 'float32', 'intra')} | {ratio(t, 'float32', 'float32', 'inter')} | "
                   f"{ratio(lat, 'float32', 'float32', 'intra', 'ms')} | {best_reduced(t)} | "
                   f"{ratio(t, 'int8', 'int8', 'intra')} / {ratio(t, 'int8', 'int8', 'inter')} | {ratio(lat, 'int8', 'int8', 'intra', 'ms')} | "
                   f"{rss(t)} | {load(r['load'])} |")
    return out + [""]
