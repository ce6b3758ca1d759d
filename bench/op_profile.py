"""libtorch operators per decoder step of `tchseq translate`: calls and self time of each op, from
`TCHSEQ_OP_PROFILE` (csrc/op_profile.cpp), at batch 1 and batch 32, per compute type. Writes the
markdown tables of docs/performance.md.

    python3 bench/op_profile.py [--lines 1000] [--threads 1] [--compute-types exact,float32]

A decoder step is one `aten::log_softmax` call. Each figure is a run's minus that of a one-line
run, so start-up and loading cancel. In each row, the count in parentheses is op calls per step,
nested ones included (a `linear` calls `addmm`). "Outside libtorch ops" is the process's CPU time
outside operators: the generator's Rust, the host top-k, float32's host kernels (attention,
few-row linear layers). Profiling adds about a microsecond per op, so the totals are a little
above an unprofiled run's.
"""

import argparse
import csv
import os
import resource
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target" / "release" / "tchseq"
MODEL = ROOT / "weights" / "multi30k.en-de"
INPUT = ROOT / "bench" / "work" / "bundled" / "input.en"

KINDS = [
    ("matrix products", ("aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "mkldnn::_linear_pointwise", "quantized::linear_dynamic")),
    ("attention kernels", ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_softmax", "aten::_native_multi_head_attention", "aten::baddbmm")),
    ("beam top-k", ("aten::topk", "aten::sort")),
    ("log-softmax", ("aten::_log_softmax",)),
    ("cache: cat, reorder (index_select)", ("aten::cat", "aten::index_select")),
    ("layer norm", ("aten::native_layer_norm",)),
    ("element-wise (add, mul, masks, fills, nan_to_num, copies)", ("aten::add", "aten::add_", "aten::mul", "aten::fill_", "aten::nan_to_num", "aten::copy_", "aten::masked_fill_", "aten::logical_not", "aten::logical_and", "aten::eq", "aten::ne", "aten::gather", "aten::masked_select", "aten::any", "aten::sub_", "aten::div", "aten::clamp_min", "aten::relu", "aten::sum", "aten::_to_copy", "aten::sub", "aten::fmod", "aten::ge", "aten::all")),
    ("views and allocation (view, select, narrow, empty, as_strided, ...)", ()),
]


def run(binary, batch, threads, compute_type, lines_file):
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "ops.tsv"
        cmd = [str(binary), "--device", "cpu", "--threads", str(threads), "translate", "-m", str(MODEL),
               "--tokenizer", "none", "--bpe", "none", "--format", "fairseq", "--beam", "5",
               "--compute-type", compute_type, "--batch-size", str(batch), "--buffer-size", str(max(batch, 1024) if batch > 1 else 1),
               "--input", str(lines_file)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "TCHSEQ_OP_PROFILE": str(report)})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        with open(report) as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    ops = {r["op"]: (int(r["calls"]), int(r["top_level_calls"]), int(r["self_ns"])) for r in rows}
    return ops, cpu_s


def minus(a, b):
    """The ops and CPU time of run `a` beyond those of run `b` (start-up and load cancel)."""
    (ops_a, cpu_a), (ops_b, cpu_b) = a, b
    zero = (0, 0, 0)
    return {k: tuple(x - y for x, y in zip(v, ops_b.get(k, zero))) for k, v in ops_a.items()}, cpu_a - cpu_b


def table(results, header):
    out = [f"| per decoder step | {' | '.join(header)} |", "|---|" + "---:|" * len(header)]
    known = {n for _, ns in KINDS for n in ns}
    steps = lambda ops: ops["aten::log_softmax"][0]
    for kind, names in KINDS:
        cells = []
        for ops, _ in results:
            picked = [v for k, v in ops.items() if (k in names if names else k not in known)]
            us = sum(v[2] for v in picked) / 1e3 / steps(ops)
            calls = sum(v[0] for v in picked) / steps(ops)
            cells.append(f"{us:.0f} µs ({calls:.0f})")
        out.append(f"| {kind} | {' | '.join(cells)} |")
    for label, fn in [
        ("all libtorch ops (top-level calls)", lambda ops, cpu: f"{sum(v[2] for v in ops.values()) / 1e3 / steps(ops):.0f} µs ({sum(v[1] for v in ops.values()) / steps(ops):.0f})"),
        ("outside libtorch ops (Rust, host kernels)", lambda ops, cpu: f"{(cpu * 1e9 - sum(v[2] for v in ops.values())) / 1e3 / steps(ops):.0f} µs"),
        ("process CPU time per step", lambda ops, cpu: f"**{cpu * 1e6 / steps(ops):.0f} µs**"),
        ("decoder steps measured", lambda ops, cpu: f"{steps(ops)}"),
    ]:
        out.append(f"| {label} | {' | '.join(fn(ops, cpu) for ops, cpu in results)} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--latency-lines", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compute-types", default="exact,float32")
    p.add_argument("--tchseq", default=str(BIN))
    a = p.parse_args()
    types = a.compute_types.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        lines = INPUT.read_text().splitlines()
        files = {}
        for batch, n in [(32, a.lines), (1, a.latency_lines), (0, 1)]:
            files[batch] = Path(tmp) / f"in{batch}.txt"
            files[batch].write_text("\n".join(lines[:n]) + "\n")
        header, results = [], []
        for batch in (1, 32):
            for ct in types:
                header.append(f"{ct}, batch {batch}")
                one_line = run(a.tchseq, 1, a.threads, ct, files[0])
                results.append(minus(run(a.tchseq, batch, a.threads, ct, files[batch]), one_line))
    print(f"bundled model, beam 5, --threads {a.threads}; batch 1: the first {a.latency_lines} test_2016_flickr lines, "
          f"batch 32: the first {a.lines}\n")
    print(table(results, header))


if __name__ == "__main__":
    main()
