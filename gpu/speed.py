"""The check's timed steps (docs/gpu.md): `speed`, every compute type on the bundled and a
transformer-base-size model on the device, with the fixed-capacity cache and without; and
`cpu_threads`, the CPU tier on the machine's own cores at 1 to 16 threads."""
import gzip
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLED = os.path.join(ROOT, "weights/multi30k.en-de")
TESTSET = os.path.join(ROOT, "gpu/data/test_2016_flickr")
# the compute types timed again with TCHSEQ_KV_CACHE=fixed (model/fixed_cache.rs)
FIXED_CACHE_TYPES = ["float32", "float16", "bfloat16"]
CPU_THREADS = [1, 2, 4, 8, 16]
# sentences of the base model's input the CPU tier translates (about a minute at one thread)
CPU_LINES = 128


def test_set(check):
    n = check.a.sentences
    lines = {}
    for side in ("en", "de"):
        with gzip.open(f"{TESTSET}.{side}.gz", "rt", encoding="utf-8") as f:
            lines[side] = f.read().splitlines()[:n]
    path = os.path.join(check.out, "test_2016_flickr.en")
    with open(path, "w") as f:
        f.write("\n".join(lines["en"]) + "\n")
    return path, lines["de"]


def base_model(check):
    d = os.path.join(check.out, "base")
    if not os.path.exists(os.path.join(d, "model.pt")):
        lines = "64" if check.a.dry else "512"
        check.run("base_model", [check.a.python, os.path.join(ROOT, "gpu/make_base_model.py"), d, "--lines", lines])
    return d


def target_tokens(out):
    tokens = 0
    for line in out.splitlines():
        try:
            tokens += len(json.loads(line)["hypotheses"][0]["tokens"])
        except (ValueError, KeyError, IndexError):
            pass
    return tokens


def models(check):
    """The timed models: {name: (tchseq's model arguments, its input file)}."""
    src, _ = test_set(check)
    base = base_model(check)
    return {
        "bundled": (["-m", BUNDLED], src),
        "base": (["-m", base, "-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none",
                  "--max-len-a", "0", "--max-len-b", "25"], os.path.join(base, "input.src")),
    }


def speed(check):
    latency_lines = 10 if check.a.dry else 100
    rows = check.results["speed"] = []
    check.results["speed_repeat"] = check.a.repeat
    # the cuda_graph step times the fixed cache's eager step itself, beside the replayed one
    fixed = "cuda_graph" not in getattr(check, "steps", [])
    for model, (margs, input_path) in models(check).items():
        first = open(input_path).readline().strip()
        latency_input = "".join(open(input_path).readlines()[:latency_lines])
        input_path = repeated(check, model, input_path)
        runs = [(ct, None) for ct in check.a.compute_types]
        runs += [(ct, "fixed") for ct in check.a.compute_types if ct in FIXED_CACHE_TYPES and fixed]
        for ct, cache in runs:
            common = ["translate", *margs, "--compute-type", ct, "--beam", "5"]
            env = {"TCHSEQ_KV_CACHE": cache} if cache else None
            label = f"{ct}.{cache}" if cache else ct
            _, _, startup, mem = check.tchseq(f"speed.{model}.{label}.startup", [*common, first], env=env)
            row = {"model": model, "compute_type": ct, "kv_cache": cache or "growing", "startup_s": startup}
            for bs in (32, 128):
                rc, out, seconds, mem = check.tchseq(f"speed.{model}.{label}.b{bs}", [*common, "--format", "jsonl", "--batch-size", str(bs),
                                                                                     "--buffer-size", "4096", "--input", input_path], env=env)
                tokens = target_tokens(out)
                work = max(seconds - startup, 1e-9)
                row[f"b{bs}_tokens_per_s"] = tokens / work if rc == 0 else None
                row[f"b{bs}_peak_mb"] = peak_mb(mem)
            rc, out, seconds, _ = check.tchseq(f"speed.{model}.{label}.b1", [*common, "--batch-size", "1"], stdin=latency_input, env=env)
            row["b1_ms_per_sentence"] = 1000 * max(seconds - startup, 0) / latency_lines if rc == 0 else None
            row["peak_rss_mb"] = (mem or {}).get("peak_rss_bytes", 0) / 2**20 if mem else None
            rows.append(row)


def repeated(check, model, path):
    """`path` read --repeat times over, in a file of its own under OUT."""
    if check.a.repeat == 1:
        return path
    out = os.path.join(check.out, f"{model}.throughput.src")
    text = open(path).read()
    with open(out, "w") as f:
        f.write((text if text.endswith("\n") else text + "\n") * check.a.repeat)
    return out


def peak_mb(mem):
    if not mem:
        return None
    cuda = mem.get("cuda") or []
    return cuda[0]["peak_allocated_bytes"] / 2**20 if cuda else None


def cpu_threads(check):
    """The CPU tier (float32 and int8) on the base model's first CPU_LINES inputs at 1, 2, 4, 8 and
    16 intra-op threads (1 and 2 in the dry run), and at 16 threads as 16 inter-op threads of one
    each: target tokens/s after start-up at batch 32, on the machine's own CPU cores. It runs last:
    the device's own rows come first."""
    base = base_model(check)
    input_path = os.path.join(check.out, "cpu_threads.src")
    with open(os.path.join(base, "input.src")) as f:
        lines = f.readlines()[:CPU_LINES]
    with open(input_path, "w") as f:
        f.writelines(lines)
    margs = ["-m", base, "-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--max-len-a", "0", "--max-len-b", "25"]
    cores = os.cpu_count() or 1
    counts = [n for n in CPU_THREADS if n <= cores][: 2 if check.a.dry else None]
    rows = check.results["cpu_threads"] = []
    first = open(input_path).readline().strip()
    for ct in ("float32", "int8"):
        for threads, inter in [(n, 1) for n in counts] + ([(1, counts[-1])] if counts[-1] > 1 else []):
            name = f"cpu.{ct}.t{threads}.i{inter}"
            flags = ["--device", "cpu", "--threads", str(threads), "--inter-threads", str(inter)]
            common = [*flags, "translate", *margs, "--compute-type", ct, "--beam", "5"]
            _, _, startup = check.run(f"{name}.startup", [check.a.tchseq, *common, first])
            rc, out, seconds = check.run(name, [check.a.tchseq, *common, "--format", "jsonl", "--batch-size", "32",
                                                "--buffer-size", "4096", "--input", input_path])
            work = max(seconds - startup, 1e-9)
            rows.append({"compute_type": ct, "threads": threads, "inter_threads": inter,
                         "tokens_per_s": target_tokens(out) / work if rc == 0 else None})
