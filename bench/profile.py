"""Where `tchseq translate` spends its time, by kind of work: perf samples of the whole process,
grouped by symbol. Writes the markdown table of docs/performance.md.

    python3 bench/profile.py [--lines 300] [--threads 1]
Needs `perf` (linux-perf) and a release build.
"""

import argparse
import collections
import gzip
import os
import re
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "tchseq"
MODEL = ROOT / "weights" / "multi30k.en-de"

# first match wins
KINDS = [
    ("matrix products (MKL sgemm/sgemv, bmm)", r"sgemm|sgemv|gemm|bmm|addmm|mkl_blas"),
    ("beam top-k (topk over beam × vocabulary)", r"topk"),
    ("softmax / log-softmax / exp", r"softmax|expf|Sleef_exp|exp_kernel"),
    ("copies: cat (key/value cache), index_select (reorder), memmove", r"cat_serial|memmove|memcpy|index_select|index_kernel|copy_|direct_copy|gather"),
    ("other element-wise kernels (add, mul, masks, nan_to_num, layer norm)", r"VectorizedLoop|vectorized_loop|nan_to_num|Moments|layer_norm|LayerNorm|where|masked|fill|add_kernel|mul_kernel|compare|cpu_kernel|binary"),
    ("memory: malloc/free, page faults", r"malloc|free|_int_|unlink_chunk|page|clear_page|folio|mmap|munmap|brk|alloc"),
    ("libtorch start-up (operator registration, JIT schema parser, relocation)", r"jit::|registerKernel|updateDispatchTable|FunctionSchema|cloneWithType|_dl_|do_lookup|Argument::"),
    ("dispatch and tensor bookkeeping (c10, at::Tensor)", r"c10::|at::|Dispatch|TensorImpl|intrusive_ptr"),
]


def profile(lines_file, batch, threads, out):
    data = Path(out)
    cmd = [str(BIN), "--threads", str(threads), "translate", "-m", str(MODEL), "--input", str(lines_file)]
    cmd += ["--batch-size", str(batch), "--buffer-size", str(max(batch, 1024) if batch > 1 else 1)]
    subprocess.run(["perf", "record", "-q", "-F", "2000", "-o", str(data), "--", *cmd],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "symbol", "--stdio", "-g", "none"],
                            check=True, capture_output=True, text=True).stdout
    shares = collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[.k]\]\s+(.*)", line)
        if not m:
            continue
        pct, sym = float(m.group(1)), m.group(2)
        kind = next((k for k, rx in KINDS if re.search(rx, sym)), "other")
        if "[k]" in line and kind == "other":
            kind = "memory: malloc/free, page faults" if "page" in sym else "kernel (other)"
        shares[kind] += pct
    return shares


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    data = Path(os.environ.get("DATA", ROOT.parent / "shared" / "data" / "multi30k"))
    lines = gzip.open(data / "test_2016_flickr.en.gz", "rt", encoding="utf-8").read().splitlines()[: args.lines]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.txt"
        src.write_text("\n".join(lines) + "\n")
        b32 = profile(src, 32, args.threads, Path(tmp) / "b32.data")
        b1 = profile(src, 1, args.threads, Path(tmp) / "b1.data")
    kinds = [k for k, _ in KINDS] + ["kernel (other)", "other"]
    print(f"| share of CPU samples ({args.lines} raw sentences, beam 5, --threads {args.threads}) | batch 32 | batch 1 |")
    print("|---|---|---|")
    for k in kinds:
        if b32[k] or b1[k]:
            print(f"| {k} | {b32[k]:.1f}% | {b1[k]:.1f}% |")


if __name__ == "__main__":
    main()
