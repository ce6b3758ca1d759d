"""The check's `cuda_graph` step (docs/gpu.md): the decoder step replayed as a CUDA graph
(`TCHSEQ_CUDA_GRAPH=1` with `TCHSEQ_KV_CACHE=fixed`, src/model/step_graphs.rs) beside the eager
fixed-shape step, on the bundled model's test set and the base-size model's input: the same hypotheses, and both timed. On the
CPU there is nothing to capture: there the rows check that the setting is refused in one line and
changes no hypothesis, which is all of the path but the capture."""
import json
import os
import re

from speed import models, repeated, target_tokens

# the compute types whose step is replayed (exact keeps fairseq's growing cache)
GRAPH_TYPES = ["float32", "float16", "bfloat16"]
STATS = re.compile(r"CUDA graphs: (\d+) captured, (\d+) steps replayed, (\d+) eager, (\d+) buckets failed(?:, (\d+) batches took a kept graph)?")
STAT_NAMES = ["captured", "replayed", "eager_steps", "failed_buckets", "kept_graph_batches"]
REFUSED = "TCHSEQ_CUDA_GRAPH=1: no CUDA device"


def hypotheses(out):
    """The best hypothesis of every line of jsonl output: (tokens, score)."""
    hyps = []
    for line in out.splitlines():
        try:
            h = json.loads(line)["hypotheses"][0]
        except (ValueError, KeyError, IndexError):
            continue
        hyps.append((h.get("tokens"), h.get("score")))
    return hyps


def stderr_of(check, name):
    path = os.path.join(check.raw, f"{name}.err")
    return open(path).read() if os.path.exists(path) else ""


def cuda_graph(check):
    latency_lines = 10 if check.a.dry else 100
    rows = check.results["cuda_graph"] = []
    for model, (margs, src) in models(check).items():
        first = open(src).readline().strip()
        latency_input = "".join(open(src).readlines()[:latency_lines])
        throughput_input = repeated(check, model, src)
        for ct in [c for c in check.a.compute_types if c in GRAPH_TYPES]:
            rows.append(graph_row(check, model, margs, ct, first, throughput_input, latency_input, latency_lines))


def graph_row(check, model, margs, ct, first, throughput_input, latency_input, latency_lines):
    row = {"model": model, "compute_type": ct, "device": check.a.device}
    outs = {}
    for label, env in (("eager", {"TCHSEQ_KV_CACHE": "fixed"}), ("graph", {"TCHSEQ_KV_CACHE": "fixed", "TCHSEQ_CUDA_GRAPH": "1"})):
        name = f"cuda_graph.{model}.{ct}.{label}"
        common = ["translate", *margs, "--compute-type", ct, "--beam", "5"]
        _, _, startup, _ = check.tchseq(f"{name}.startup", [*common, first], env=env)
        rc, out, seconds, _ = check.tchseq(f"{name}.b32", [*common, "--format", "jsonl", "--batch-size", "32", "--buffer-size", "4096",
                                                        "--input", throughput_input], env=env)
        row[f"{label}_b32_tokens_per_s"] = target_tokens(out) / max(seconds - startup, 1e-9) if rc == 0 else None
        outs[label] = hypotheses(out) if rc == 0 else None
        rc, out, seconds, _ = check.tchseq(f"{name}.b1", [*common, "--format", "jsonl", "--batch-size", "1"], stdin=latency_input, env=env)
        row[f"{label}_b1_ms_per_sentence"] = 1000 * max(seconds - startup, 0) / latency_lines if rc == 0 else None
        outs[f"{label}_b1"] = hypotheses(out) if rc == 0 else None
    where = f"raw/cuda_graph.{model}.{ct}.graph.b32.err"
    err = stderr_of(check, f"cuda_graph.{model}.{ct}.graph.b32")
    stats = STATS.search(err)
    if stats:
        row.update((k, int(v)) for k, v in zip(STAT_NAMES, stats.groups()) if v is not None)
    b1_stats = STATS.search(stderr_of(check, f"cuda_graph.{model}.{ct}.graph.b1"))
    if b1_stats:
        row.update((f"b1_{k}", int(v)) for k, v in zip(STAT_NAMES, b1_stats.groups()) if v is not None)
    eager_b1, graph_b1 = outs["eager_b1"], outs["graph_b1"]
    if eager_b1 is not None and graph_b1 is not None:
        row["b1_hypotheses"] = len(eager_b1)
        row["b1_same_hypotheses"] = sum(a[0] == b[0] for a, b in zip(eager_b1, graph_b1)) if len(eager_b1) == len(graph_b1) else 0
        if row["b1_same_hypotheses"] != len(eager_b1):
            check.fail(f"cuda_graph.{model}.{ct}: at batch 1, {len(eager_b1) - row['b1_same_hypotheses']} of {len(eager_b1)} hypotheses differ from the eager step's")
    eager, graph = outs["eager"], outs["graph"]
    if eager is None or graph is None:
        return row
    row["hypotheses"] = len(eager)
    row["same_hypotheses"] = sum(a[0] == b[0] for a, b in zip(eager, graph)) if len(eager) == len(graph) else 0
    scores = [abs(a[1] - b[1]) for a, b in zip(eager, graph) if a[0] == b[0] and a[1] is not None and b[1] is not None]
    row["max_score_difference"] = max(scores, default=0.0)
    if row["same_hypotheses"] != len(eager) or len(graph) != len(eager):
        check.fail(f"cuda_graph.{model}.{ct}: {len(eager) - row['same_hypotheses']} of {len(eager)} hypotheses differ from the eager step's")
    if check.a.dry:
        row["note"] = "CPU: nothing to capture; TCHSEQ_CUDA_GRAPH=1 refused, the hypotheses the eager step's"
        if REFUSED not in err or stats:
            check.fail(f"cuda_graph.{model}.{ct}: on the CPU the setting must be refused in one line, and no graph made ({where})")
    elif not stats or row.get("replayed", 0) == 0:
        check.fail(f"cuda_graph.{model}.{ct}: no step was replayed ({where})")
    return row
