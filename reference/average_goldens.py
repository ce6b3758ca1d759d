"""Goldens for `tchseq average`: fairseq 0.12.2's own scripts/average_checkpoints.py (the copy
beside this file, copied unchanged from fairseq v0.12.2, MIT) run on the fixture checkpoints
and on three small synthetic ones made here, recorded as tests/fixtures/average/goldens.json: per case, the arguments, the checkpoints the
script picked, the top-level keys and, for every averaged tensor in key order, its dtype, shape
and the SHA-256 of its bytes.

With --check TCHSEQ, tchseq's output for every case is also loaded by torch and compared with
the script's (every averaged tensor with torch.equal, every other entry by repr), and each
fixture-model output is loaded by fairseq's checkpoint_utils.load_model_ensemble.
"""
import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairseq_average_checkpoints as fairseq_average  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "tests/fixtures/models")
OUT = os.path.join(ROOT, "tests/fixtures/average")

# name, links made in a scratch directory {D} (link name -> target), tchseq/fairseq arguments
# ({M}: tests/fixtures/models, {A}: tests/fixtures/average, {D}: the scratch directory), and the
# fixture whose dictionaries load_model_ensemble takes (None: a synthetic checkpoint).
EPOCHS = {
    "checkpoint1.pt": "{M}/prenorm/model.pt",
    "checkpoint2.pt": "{M}/prenorm-fp16/model.pt",
    "checkpoint3.pt": "{M}/prenorm/model.pt",
    "checkpoint10.pt": "{M}/prenorm-fp16/model.pt",
    "checkpoint_last.pt": "{M}/prenorm/model.pt",
    "checkpoint_best.pt": "{M}/prenorm/model.pt",
    "checkpoint_2_300.pt": "{M}/prenorm-fp16/model.pt",
    "checkpoint_1_100.pt": "{M}/prenorm/model.pt",
    "checkpoint_1_250.pt": "{M}/prenorm-fp16/model.pt",
    "checkpoint_1_200.pt": "{M}/prenorm/model.pt",
}
CASES = [
    ("prenorm_fp16_and_float", {}, ["--inputs", "{M}/prenorm-fp16/model.pt", "{M}/prenorm/model.pt"], "prenorm"),
    ("prenorm_three", {}, ["--inputs", "{M}/prenorm/model.pt", "{M}/prenorm-fp16/model.pt", "{M}/prenorm-fp16/model.pt"], "prenorm"),
    ("postnorm_and_legacy", {}, ["--inputs", "{M}/postnorm/model.pt", "{M}/postnorm-legacy/model.pt"], "postnorm"),
    ("untied_alone", {}, ["--inputs", "{M}/untied/model.pt"], "untied"),
    ("epochs_last2", EPOCHS, ["--inputs", "{D}", "--num-epoch-checkpoints", "2"], "prenorm"),
    ("epochs_upper_bound3", EPOCHS, ["--inputs", "{D}", "--num-epoch-checkpoints", "3", "--checkpoint-upper-bound", "3"], "prenorm"),
    ("updates_last3", EPOCHS, ["--inputs", "{D}", "--num-update-checkpoints", "3"], "prenorm"),
    ("updates_upper_bound250", EPOCHS, ["--inputs", "{D}", "--num-update-checkpoints", "2", "--checkpoint-upper-bound", "250"], "prenorm"),
    ("synthetic", {}, ["--inputs", "{A}/synthetic_a.pt", "{A}/synthetic_b.pt", "{A}/synthetic_c.pt"], None),
]


def synthetic(seed):
    """A small checkpoint with what the fixtures lack: integer, bfloat16, float64 and bool
    parameters, a 0-dim one, two sharing a storage, a Namespace, an OrderedDict with _metadata
    and tensors outside `model`."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(4, 3, generator=g)
    model = collections.OrderedDict()
    model["embed.weight"] = shared
    model["proj.weight"] = shared  # tied: one storage
    model["half.weight"] = torch.randn(5, generator=g).half()
    model["bf16.weight"] = torch.randn(6, generator=g).bfloat16()
    model["double.weight"] = torch.randn(2, 2, generator=g).double()
    model["steps"] = torch.randint(-50, 50, (7,), generator=g)
    model["counts"] = torch.randint(0, 100, (3,), generator=g, dtype=torch.int32)
    model["scalar"] = torch.tensor(float(seed) / 3)
    model["version"] = torch.tensor([seed], dtype=torch.float32)
    model._metadata = collections.OrderedDict([("", {"version": 1})])
    moments = torch.randn(8, generator=g)
    return {
        "args": argparse.Namespace(arch="synthetic", lr=[0.25], seed=seed, big=2**70, blob=b"\x00\xff"),
        "cfg": None,
        "model": model,
        "optimizer_history": [{"num_updates": 100 * seed, "lr_scheduler_state": {"best": None}}],
        "last_optimizer_state": {"state": {0: {"exp_avg": moments, "exp_avg_view": moments[2:6]}}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.98)}]},
        "extra_state": {"metrics": collections.OrderedDict(default=[(10, "loss", {"val": torch.tensor(0.5)})]), "pair": (1, 2.5, None, True)},
    }


def expand(arg, scratch):
    return arg.replace("{M}", MODELS).replace("{A}", OUT).replace("{D}", scratch)


def prepare(links, scratch):
    for name, target in links.items():
        os.symlink(expand(target, scratch), os.path.join(scratch, name))


def fairseq_inputs(args):
    """The checkpoints fairseq's main() averages for these arguments, in order."""
    i = args.index("--inputs")
    inputs = []
    for a in args[i + 1:]:
        if a.startswith("--"):
            break
        inputs.append(a)
    opt = {args[j]: args[j + 1] for j in range(len(args) - 1) if args[j].startswith("--num-") or args[j] == "--checkpoint-upper-bound"}
    upper = int(opt["--checkpoint-upper-bound"]) if "--checkpoint-upper-bound" in opt else None
    if "--num-update-checkpoints" in opt:
        return fairseq_average.last_n_checkpoints(inputs, int(opt["--num-update-checkpoints"]), True, upper_bound=upper)
    if "--num-epoch-checkpoints" in opt:
        return fairseq_average.last_n_checkpoints(inputs, int(opt["--num-epoch-checkpoints"]), False, upper_bound=upper)
    return inputs


def tensor_bytes(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def check(tchseq, args, ref, fixture, scratch):
    out = os.path.join(scratch, "ours.pt")
    subprocess.run([tchseq, "average", *args, "--output", out], check=True)
    ours = torch.load(out, map_location="cpu", weights_only=False)
    assert list(ours) == list(ref), (list(ours), list(ref))
    assert type(ours["model"]) is collections.OrderedDict
    assert list(ours["model"]) == list(ref["model"])
    for k, v in ref["model"].items():
        o = ours["model"][k]
        assert o.dtype == v.dtype and o.shape == v.shape and torch.equal(o, v), k
    for k in ref:
        if k != "model":
            assert repr(ours[k]) == repr(ref[k]), k
    if fixture is not None:
        from fairseq import checkpoint_utils

        models, _cfg = checkpoint_utils.load_model_ensemble([out], arg_overrides={"data": os.path.join(MODELS, fixture), "source_lang": "src", "target_lang": "tgt"})
        # fairseq's loading derives the encoder fast path's copies (`layers.N.in_proj_weight`,
        # `fc1_bias`, ...) from the layer's own weights; `_float_tensor` is a buffer the model makes
        loaded = models[0].state_dict()
        differ = [k for k, v in ref["model"].items() if k in loaded and not torch.equal(loaded[k].to(v.dtype), v)]
        assert all(re.fullmatch(r"encoder\.layers\.\d+\.(in_proj|out_proj|fc1|fc2)_(weight|bias)|.*\._float_tensor", k) for k in differ), differ
    return len(ref["model"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", metavar="TCHSEQ", help="also compare tchseq's output with the script's, live")
    cli = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    for name, seed in [("a", 1), ("b", 2), ("c", 3)]:
        path = os.path.join(OUT, f"synthetic_{name}.pt")
        if not os.path.exists(path):
            torch.save(synthetic(seed), path)
    cases = []
    compared = 0
    for name, links, template, fixture in CASES:
        scratch = tempfile.mkdtemp(prefix="average-")
        try:
            prepare(links, scratch)
            args = [expand(a, scratch) for a in template]
            inputs = fairseq_inputs(args)
            ref = fairseq_average.average_checkpoints(inputs)
            tensors = [
                {"name": k, "dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape), "sha256": hashlib.sha256(tensor_bytes(v)).hexdigest()}
                for k, v in ref["model"].items()
            ]
            rel = lambda p: os.path.relpath(p, scratch) if p.startswith(scratch) else "{" + ("M}/" + os.path.relpath(p, MODELS) if p.startswith(MODELS) else "A}/" + os.path.relpath(p, OUT))
            cases.append({"name": name, "links": links, "args": template, "inputs": [rel(p) for p in inputs], "top_keys": list(ref), "tensors": tensors})
            if cli.check:
                compared += check(cli.check, args, ref, fixture, scratch)
        finally:
            shutil.rmtree(scratch)
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump({"fairseq": "0.12.2", "torch": torch.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases, {sum(len(c['tensors']) for c in cases)} tensors recorded")
    if cli.check:
        print(f"tchseq average: {compared} tensors equal to fairseq's in {len(cases)} cases; fixture outputs load in fairseq")


if __name__ == "__main__":
    main()
