"""gpu/check.py's results.json as Markdown (report.md): `python gpu/report.py OUT` re-renders one."""
import json
import os
import sys


def verify_drift(v):
    """Per kind of activation (`encoder_states.{i}` …): the largest units and rescale over every
    verify run that recorded its tensors."""
    import re
    worst = {}
    for x in v:
        for t in x.get("tensors", []):
            if "units" not in t:
                continue
            kind = re.sub(r"\.\d+$", ".{i}", t["name"])
            w = worst.setdefault(kind, [0.0, 0.0, 0.0])
            w[0] = max(w[0], t["units"])
            if abs(t.get("rescale_eps", 0.0)) > w[1]:
                w[1], w[2] = abs(t["rescale_eps"]), t["rescale_standard_errors"]
    return [(f"`{k}`", f"{u:.2f}", f"{r:.2f}", f"{se:.1f}") for k, (u, r, se) in sorted(worst.items())]


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def num(value, fmt):
    return "–" if value is None else format(value, fmt)


def render(r):
    out = [f"# GPU check ({r['device']}, {r['started']})\n"]
    e = r.get("environment", {})
    out.append(f"- device: {e.get('gpu') or e.get('cpu_model') or r['device']}")
    out.append(f"- libtorch {e.get('libtorch_version')} from {e.get('libtorch_dir')}; CUDA available: {e.get('cuda_available')}, "
               f"cuDNN {e.get('cudnn_version')}")
    out.append(f"- steps (s): " + ", ".join(f"{k} {v:.0f}" for k, v in r.get("step_seconds", {}).items()))
    failures = r.get("failures", [])
    out.append(f"- **{len(failures)} failures**" + ("" if not failures else ":"))
    out += [f"  - {f}" for f in failures]
    out.append("")

    if "parity" in r:
        out.append("## Parity: `exact` against the committed fairseq goldens\n")
        rows = [(p["run"], p["hypotheses"], p["same_tokens"], p["near_ties"], p["differing"], f"{p['max_score_diff']:.1e}",
                 f"{p['max_positional_diff']:.1e}") for p in r["parity"]]
        out.append(table(["run", "hypotheses", "same tokens", "proven near-ties", "differing", "max score diff", "max P diff"], rows))
        hyps = sum(p["hypotheses"] for p in r["parity"])
        bad = sum(p["differing"] for p in r["parity"])
        out.append(f"{hyps} hypotheses, {bad} mismatches (limit: scores within 1e-4; a differing hypothesis must be a near-tie "
                   "proven by force-decoding ours on the device).\n")
    if "verify" in r:
        v = r["verify"]
        out.append("## `verify` on the fixtures\n")
        out.append(table(["fixture", "reference", "passed", "failed"], [(x["fixture"], x["reference"], x["passed"], x["failed"]) for x in v]))
        drift = verify_drift(v)
        if drift:
            out.append("Largest difference per kind of activation, in units of eps · max|ref| · depth (the derived bound "
                       "allows 12), and largest rescale in eps (allowed up to 1.5, or within 20 standard errors):\n")
            out.append(table(["tensors", "largest units", "largest rescale (eps, either sign)", "its standard errors"], drift))
    if "fidelity" in r:
        out.append(f"## Fidelity on Multi30k test_2016_flickr ({r.get('bleu_by', '')})\n")
        rows = [(f["compute_type"], f"{f['same_as_exact']}/{f['sentences']}", f"{f['bleu']:.2f}") for f in r["fidelity"]]
        out.append(table(["compute type", "hypotheses equal to exact (fp32)", "BLEU"], rows))
        for g in r.get("goals_missed", []):
            out.append(f"- goal missed: {g}")
        out.append("")
    if "speed" in r:
        repeat = r.get("speed_repeat", 1)
        reads = f"; the batch-32 and batch-128 runs read their input {repeat} times" if repeat > 1 else ""
        out.append(f"## Speed (beam 5; throughput in target tokens/s after start-up{reads}; peak = CUDA allocator's peak allocated)\n")
        rows = [(s["model"], s["compute_type"], s.get("kv_cache", "growing"), num(s.get("b32_tokens_per_s"), ".0f"),
                 num(s.get("b128_tokens_per_s"), ".0f"), num(s.get("b1_ms_per_sentence"), ".1f"), num(s.get("startup_s"), ".2f"),
                 num(s.get("b128_peak_mb"), ".0f"), num(s.get("peak_rss_mb"), ".0f")) for s in r["speed"]]
        out.append(table(["model", "compute type", "cache", "batch 32 tok/s", "batch 128 tok/s", "batch 1 ms/sentence", "start-up + 1 line (s)",
                          "GPU peak MB (b128)", "peak RSS MB"], rows))
    if r.get("cuda_graph"):
        out.append("## The decoder step replayed as a CUDA graph (beam 5, fixed cache; batch 32 in target tokens/s)\n")
        rows = [(g.get("model", "bundled"), g["compute_type"], f"{g.get('same_hypotheses', '-')}/{g.get('hypotheses', '-')}", num(g.get("max_score_difference"), ".1e"),
                 num(g.get("eager_b32_tokens_per_s"), ".0f"), num(g.get("graph_b32_tokens_per_s"), ".0f"),
                 num(g.get("eager_b1_ms_per_sentence"), ".1f"), num(g.get("graph_b1_ms_per_sentence"), ".1f"),
                 f"{g.get('captured', '-')} / {g.get('kept_graph_batches', '-')} / {g.get('replayed', '-')} / {g.get('failed_buckets', '-')}",
                 f"{g.get('b1_same_hypotheses', '-')}/{g.get('b1_hypotheses', '-')}",
                 f"{g.get('b1_captured', '-')} / {g.get('b1_kept_graph_batches', '-')} / {g.get('b1_replayed', '-')} / {g.get('b1_eager_steps', '-')}",
                 g.get("note", "")) for g in r["cuda_graph"]]
        out.append(table(["model", "compute type", "hypotheses as eager", "largest score difference", "eager b32 tok/s", "graph b32 tok/s",
                          "eager b1 ms", "graph b1 ms", "b32 captured / batches on a kept graph / replayed / failed buckets",
                          "b1 hypotheses as eager", "b1 captured / on a kept graph / replayed / eager", "note"], rows))
    if r.get("cpu_threads"):
        out.append("## The CPU tier on this machine's cores (base model, beam 5, batch 32; target tokens/s after start-up)\n")
        one = {x["compute_type"]: x["tokens_per_s"] for x in r["cpu_threads"] if x["threads"] == 1 and x["inter_threads"] == 1}
        rows = [(x["compute_type"], x["threads"], x["inter_threads"], num(x["tokens_per_s"], ".0f"),
                 num(x["tokens_per_s"] / one[x["compute_type"]] if x["tokens_per_s"] and one.get(x["compute_type"]) else None, ".2f"))
                for x in r["cpu_threads"]]
        out.append(table(["compute type", "--threads", "--inter-threads", "tok/s", "× 1 thread"], rows))
    f = r.get("fairseq")
    if f:
        out.append("## fairseq 0.12.2 on the same device\n")
        if not f.get("ran"):
            out.append(f"Not run: {f.get('why')}\n")
        else:
            out.append(f"- fairseq {f['version']} from {f.get('from')}; bundled input, line for line beside tchseq exact "
                       "(fp16: fairseq --fp16 beside --dtype fp16):")
            out += [f"  - {x['run']}: {x['identical']} of {x['lines']} lines identical" for x in f.get("line_for_line", [])]
            out.append(f"- fairseq `--fp16` beside tchseq `--compute-type float16`, test set at batch 128: {f['fp16_same_hypotheses']} of {f['fp16_hypotheses']} "
                       f"hypotheses the same; fairseq {num(f.get('fp16_b128_seconds'), '.2f')} s, tchseq "
                       f"{num(f.get('tchseq_float16_b128_seconds'), '.2f')} s (both with start-up)")
            if "fp16_same_as_fp32" in f:
                out.append(f"- fairseq `--fp16` beside fp32 (exact), test set: {f['fp16_same_as_fp32']} of {f['fp16_sentences']} hypotheses "
                           f"the same, BLEU {f['fp16_bleu']:.2f}")
            out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    out = sys.argv[1]
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(render(results))
