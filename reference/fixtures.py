#!/usr/bin/env python3
"""Builds tests/fixtures/models/<name>/ from the trained checkpoints in reference/work/ckpt and
writes tests/fixtures/models/manifest.json. Run by reference/fixtures.sh (after training),
from the repository root, inside `source reference/env.sh`.

Every golden here is output of fairseq 0.12.2 itself: goldens.py (fairseq's model objects)
and the fairseq-interactive / fairseq-generate CLIs, run as subprocesses with the argv that
the manifest records.

Usage: fixtures.py [NAME ...]   (default: all fixtures; FIXTURE_JOBS=N builds N at a time)
       fixtures.py --manifest-only  (reassemble manifest.json from reference/work/meta)
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

REF = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(REF)
WORK = os.path.relpath(os.path.join(REF, "work"), ROOT)
FIX = "tests/fixtures/models"
PY = sys.executable

# name: how the fixture checkpoint is made, and facts the manifest states about it
FIXTURES = [
    {"name": "postnorm", "base": "postnorm", "kind": "release", "data": "bin-joined",
     "format": "zip", "config_source": "cfg", "dtype": "float32"},
    {"name": "prenorm", "base": "prenorm", "kind": "release", "data": "bin-sep",
     "format": "zip", "config_source": "cfg", "dtype": "float32"},
    {"name": "untied", "base": "untied", "kind": "release", "data": "bin-joined",
     "format": "zip", "config_source": "cfg", "dtype": "float32"},
    {"name": "postnorm-legacy", "base": "postnorm", "kind": "legacy", "data": "bin-joined",
     "format": "legacy", "config_source": "args", "dtype": "float32"},
    {"name": "prenorm-fp16", "base": "prenorm", "kind": "fp16", "data": "bin-sep",
     "format": "zip", "config_source": "cfg", "dtype": "float16"},
    {"name": "postnorm-untied-2018", "base": "postnorm-untied", "kind": "layout2018", "data": "bin-sep",
     "format": "legacy", "config_source": "args", "dtype": "float32"},
]

OPTION_SETS = {
    "beam5": ["--beam", "5"],
    "beam4_lenpen0.6_nbest3": ["--beam", "4", "--lenpen", "0.6", "--nbest", "3"],
    "beam1": ["--beam", "1"],
    "beam5_minlen3_maxlen_unkpen2": ["--beam", "5", "--min-len", "3", "--max-len-a", "1.2",
                                     "--max-len-b", "3", "--unkpen", "2"],
    "beam5_ngram2": ["--beam", "5", "--no-repeat-ngram-size", "2"],
    "sampling_topk5": ["--sampling", "--sampling-topk", "5", "--beam", "3", "--nbest", "3",
                       "--seed", "1"],
}
BATCHING = {
    "batched": {"suffix": ".txt", "argv": ["--buffer-size", "1024", "--batch-size", "16"]},
    "bs1": {"suffix": ".bs1.txt", "argv": ["--batch-size", "1", "--buffer-size", "1"]},
}
SCORE_REFERENCE = {
    "bs1": {"file": "score_reference.txt", "argv": ["--batch-size", "1"]},
    "b16": {"file": "score_reference.b16.txt", "argv": ["--batch-size", "16"]},
}
# verify batch: rows of inputs.src (lengths 3, 8, 1, 12, 5, 17 and 6 with an unknown symbol)
VERIFY_ROWS = "2,7,0,11,4,62,70"
# fixtures that also get fastpath_golden.py's references (encoder states as the fast path
# returns them: batch-first, dense or nested)
FASTPATH_FIXTURES = ("postnorm",)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ")


def run(argv, **kw):
    t = time.time()
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(argv)}")
    return p.stdout, time.time() - t


def fairseq_stdout(argv, out_path):
    """Run a fairseq CLI, keep its stdout lines except fairseq's log lines."""
    out, secs = run(argv)
    lines = [l for l in out.splitlines() if not LOG_LINE.match(l)]
    with open(os.path.join(ROOT, out_path), "w", encoding="utf-8") as f:
        f.write("".join(l + "\n" for l in lines))
    return lines


CLI_CHECK_FIXTURE = "postnorm"
CLI_CHECK = ("interactive/beam5.txt", "interactive/sampling_topk5.bs1.txt", "score_reference.b16.txt")


def cli_check(jobs):
    """The in-process runner must print what the real console scripts print."""
    for job in jobs:
        if not job["out"].endswith(CLI_CHECK):
            continue
        tmp = os.path.join(ROOT, WORK, "cli-check.txt")
        lines = fairseq_stdout(job["argv"], os.path.relpath(tmp, ROOT))
        mine = open(os.path.join(ROOT, job["out"])).read().splitlines()
        if hyp_lines(lines) != hyp_lines(mine):
            raise SystemExit(f"in-process output differs from `{' '.join(job['argv'])}`")
        print(f"cli check ok: {job['out']}", flush=True)


def hyp_lines(lines):
    return [l for l in lines if not l.startswith("W-")]


def sha256(path):
    return hashlib.sha256(open(os.path.join(ROOT, path), "rb").read()).hexdigest()


def build(fx):
    name, d = fx["name"], f"{FIX}/{fx['name']}"
    shutil.rmtree(os.path.join(ROOT, d), ignore_errors=True)
    os.makedirs(os.path.join(ROOT, d, "interactive"))
    base = f"{WORK}/ckpt/{fx['base']}/checkpoint_last.pt"
    run([PY, f"{REF}/derive_variants.py", fx["kind"], base, f"{d}/model.pt"])
    for lang in ("src", "tgt"):
        shutil.copy(os.path.join(ROOT, WORK, fx["data"], f"dict.{lang}.txt"), os.path.join(ROOT, d))

    out, _ = run([PY, f"{REF}/goldens.py", "--data", d, "--path", f"{d}/model.pt", "--out", d,
                  "-s", "src", "-t", "tgt", "--sentences", f"{FIX}/inputs.src", f"{FIX}/inputs.tgt",
                  VERIFY_ROWS])
    summary = json.loads(out.strip().splitlines()[-1])
    fastpath = None
    if name in FASTPATH_FIXTURES:
        out, _ = run([PY, f"{REF}/fastpath_golden.py", "--fixture", d])
        fastpath = json.loads(out.strip().splitlines()[-1])

    commands = {"interactive": {}, "score_reference": {}}
    jobs = []
    for set_name, opts in OPTION_SETS.items():
        for bname, b in BATCHING.items():
            argv = ["fairseq-interactive", d, "--path", f"{d}/model.pt", "-s", "src", "-t", "tgt",
                    "--cpu", "--input", f"{FIX}/inputs.src"] + opts + b["argv"]
            rel = f"interactive/{set_name}{b['suffix']}"
            jobs.append({"argv": argv, "out": f"{d}/{rel}"})
            commands["interactive"].setdefault(set_name, {})[bname] = {"file": rel, "argv": argv}
    for bname, s in SCORE_REFERENCE.items():
        argv = ["fairseq-generate", f"{WORK}/{fx['data']}", "--gen-subset", "test", "-s", "src",
                "-t", "tgt", "--path", f"{d}/model.pt", "--score-reference", "--cpu"] + s["argv"]
        jobs.append({"argv": argv, "out": f"{d}/{s['file']}"})
        commands["score_reference"][bname] = {"file": s["file"], "argv": argv}
    jobs_file = f"{WORK}/jobs-{name}.json"  # per fixture: safe with FIXTURE_JOBS > 1
    json.dump(jobs, open(os.path.join(ROOT, jobs_file), "w"), indent=1)
    run([PY, f"{REF}/run_cli.py", jobs_file])
    if name == CLI_CHECK_FIXTURE:
        cli_check(jobs)

    # --no-repeat-ngram-size is a no-op on CPU in 0.12.2: check it on these very outputs
    ngram_noop = {}
    for bname, b in BATCHING.items():
        a = open(os.path.join(ROOT, d, f"interactive/beam5{b['suffix']}")).read().splitlines()
        c = open(os.path.join(ROOT, d, f"interactive/beam5_ngram2{b['suffix']}")).read().splitlines()
        ngram_noop[bname] = hyp_lines(a) == hyp_lines(c)
    return summary, commands, ngram_noop, fastpath


def model_facts(d):
    """Config facts read back from the fixture checkpoint (what fairseq will use)."""
    import torch

    st = torch.load(os.path.join(ROOT, d, "model.pt"), map_location="cpu", weights_only=False)
    m = st["args"] if st.get("args") is not None else st["cfg"]["model"]
    keys = ["arch", "encoder_embed_dim", "decoder_embed_dim", "encoder_ffn_embed_dim",
            "decoder_ffn_embed_dim", "encoder_layers", "decoder_layers", "encoder_attention_heads",
            "decoder_attention_heads", "encoder_normalize_before", "decoder_normalize_before",
            "encoder_learned_pos", "decoder_learned_pos", "activation_fn", "layernorm_embedding",
            "no_scale_embedding", "share_all_embeddings", "share_decoder_input_output_embed"]
    return {k: getattr(m, k, None) for k in keys}, sorted(st.keys())


def build_entry(fx):
    t = time.time()
    summary, commands, ngram_noop, fastpath = build(fx)
    d = f"{FIX}/{fx['name']}"
    facts, top_keys = model_facts(d)
    info_path = os.path.join(ROOT, WORK, "ckpt", fx["base"], "train_info.json")
    train_info = json.load(open(info_path)) if os.path.exists(info_path) else {}
    entry = {
        "name": fx["name"],
        "dir": d,
        "checkpoint": "model.pt",
        "format": fx["format"],
        "config_source": fx["config_source"],
        "dtype": fx["dtype"],
        "derived_from": None if fx["kind"] == "release" else fx["base"],
        "derivation": fx["kind"],
        "checkpoint_top_level_keys": top_keys,
        "source_lang": "src",
        "target_lang": "tgt",
        "checkpoint_stores_langs": False,
        "src_dict": "dict.src.txt",
        "tgt_dict": "dict.tgt.txt",
        "joined_dictionary": fx["data"] == "bin-joined",
        "model": facts,
        "encoder_attention_path": {s: v["encoder_path"] for s, v in summary["sides"].items()},
        "goldens": {
            "weights": "weights.pt",
            "weights_dtypes": summary["weights_dtypes"],
            "verify": {s: f"verify_{s}.pt" for s in summary["sides"]},
            "verify_sentences": summary["sentences"],
            "verify_targets": summary["targets"],
            "verify_rows_of_inputs": [int(i) for i in VERIFY_ROWS.split(",")],
            "interactive": commands["interactive"],
            "score_reference": commands["score_reference"],
        },
        "no_repeat_ngram_noop_on_cpu": ngram_noop,
        "training": {"command": train_info.get("argv"), "seconds": train_info.get("seconds"),
                     "final_train_stats": train_info.get("final_train_stats"),
                     "final_valid_stats": train_info.get("final_valid_stats"),
                     "data": f"{WORK}/{fx['data']}"},
        "sha256": {f: sha256(f"{d}/{f}") for f in ("model.pt", "weights.pt", "verify_left.pt", "verify_right.pt")},
    }
    if fastpath:
        goldens = entry["goldens"]
        entry["goldens"] = {}
        for k, v in goldens.items():  # after verify_rows_of_inputs
            entry["goldens"][k] = v
            if k == "verify_rows_of_inputs":
                entry["goldens"]["verify_fastpath"] = fastpath
        entry["sha256"].update({v["file"]: sha256(f"{d}/{v['file']}") for v in fastpath.values()})
    os.makedirs(os.path.join(ROOT, WORK, "meta"), exist_ok=True)
    json.dump(entry, open(os.path.join(ROOT, WORK, "meta", f"{fx['name']}.json"), "w"), indent=1)
    print(f"{fx['name']}: built in {time.time() - t:.0f}s; encoder path "
          f"{entry['encoder_attention_path']}; ngram no-op {ngram_noop}", flush=True)


def stores_langs(path):
    import torch

    st = torch.load(os.path.join(ROOT, path), map_location="cpu", weights_only=False)
    src = getattr(st["args"], "source_lang", None) if st.get("args") is not None else st["cfg"]["task"].get("source_lang")
    return src is not None


def write_manifest():
    entries = []
    for fx in FIXTURES:
        p = os.path.join(ROOT, WORK, "meta", f"{fx['name']}.json")
        if os.path.exists(p):
            e = json.load(open(p))
            e["sha256"] = {f: sha256(f"{e['dir']}/{f}") for f in e["sha256"]}
            e["checkpoint_stores_langs"] = stores_langs(f"{e['dir']}/model.pt")
            entries.append(e)
    manifest = {
        "fairseq_version": "0.12.2",
        "torch_version": "2.13.0",
        "paths_relative_to": "repository root",
        "inputs": {"src": f"{FIX}/inputs.src", "tgt": f"{FIX}/inputs.tgt"},
        "option_sets": OPTION_SETS,
        "batching": {k: v["argv"] for k, v in BATCHING.items()},
        "batching_files": {k: v["suffix"] for k, v in BATCHING.items()},
        "score_reference": SCORE_REFERENCE,
        "interactive_command": "fairseq-interactive {dir} --path {dir}/model.pt -s src -t tgt --cpu "
                               f"--input {FIX}/inputs.src " + "{option_set} {batching}",
        "score_reference_command": "fairseq-generate {training.data} --gen-subset test -s src -t tgt "
                                   "--path {dir}/model.pt --score-reference --cpu {batching}",
        "stdout_filter": "fairseq log lines (^YYYY-MM-DD HH:MM:SS | ) dropped; all other stdout lines kept verbatim",
        "nondeterministic_fields": ["W- lines (decoding time)"],
        "verify_format": "torch.save dict of tensors; see reference/README.md",
        "encoder_attention_path_values": {
            "fast_bt": "every encoder layer = torch._transformer_encoder_layer_fwd on a dense batch-first tensor "
                       "(mask = [B,S] key padding mask: a left-padded batch)",
            "fast_bt_nested": "same, on a nested tensor from torch._nested_tensor_from_mask (right-padded batch, "
                              "or one without padding: its all-false mask counts as left-aligned); "
                              "encoder_out = to_padded_tensor(0.0)",
            "fairseq_mha": "fairseq's per-op layer (MultiheadAttention -> F.multi_head_attention_forward / SDPA)",
        },
        "sha256_note": "sha256 of the committed files (integrity only: torch.save output is not "
                       "byte-reproducible; reference/compare_fixture.py compares rebuilds by tensors)",
        "fixtures": entries,
    }
    with open(os.path.join(ROOT, FIX, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def main():
    """fixtures.py [NAME ...]: build those fixtures (default all) with FIXTURE_JOBS threads,
    then assemble the manifest from every built fixture's metadata."""
    from concurrent.futures import ThreadPoolExecutor

    if sys.argv[1:] == ["--manifest-only"]:
        write_manifest()
        return
    names = sys.argv[1:] or [f["name"] for f in FIXTURES]
    os.makedirs(os.path.join(ROOT, FIX), exist_ok=True)
    for f in ("inputs.src", "inputs.tgt"):
        shutil.copy(os.path.join(ROOT, WORK, "data", f), os.path.join(ROOT, FIX, f))
    todo = [fx for fx in FIXTURES if fx["name"] in names]
    import threading

    lock = threading.Lock()

    def one(fx):
        build_entry(fx)
        with lock:  # the manifest is usable as soon as the first fixture is done
            write_manifest()

    with ThreadPoolExecutor(max_workers=int(os.environ.get("FIXTURE_JOBS", "1"))) as pool:
        for r in [pool.submit(one, fx) for fx in todo]:
            r.result()


if __name__ == "__main__":
    main()
